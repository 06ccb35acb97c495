//! The order of `sum_all` and of sums over several axes against eager
//! `jnp.sum` (jax 0.10.2, CPU), bit for bit: every 2-D shape up to 40 x 40,
//! aspect ratios from 1:100 to 100:1 up to 2,000 elements, lengths of
//! 32k + 31 / 32k + 1 / 32k (padded tree-reduction windows) with short
//! rows, a grid of 3-D shapes up to 2,000 elements, and sums over two to
//! four axes, the last ones or followed by kept axes (whose loads LLVM
//! vectorizes with gaps: every loop length from 2 to 32, windows of 32,
//! and 200 drawn shapes of 3 to 5 axes; tools/oracle/generate_full_sums.py
//! writes tests/fixtures/full_sums.json; the inputs come from
//! `element_bits`).

mod common;

use common::load_fixture;
use flaxen::tensor::Tensor;
use serde::Deserialize;

#[derive(Deserialize)]
struct Case {
    shape: Vec<usize>,
    axes: Option<Vec<isize>>,
    seed: u64,
    y: Vec<u32>,
}

#[derive(Deserialize)]
struct Fixture {
    negzero_sum: u32,
    cases: Vec<Case>,
}

/// The bits of element `i` of input `seed`, as the oracle script computes
/// them: a 32-bit hash gives the sign, an exponent from -9 to 9 in steps
/// of 3 and 16 mantissa bits.
fn element_bits(seed: u64, i: u64) -> u32 {
    let m = 1u64 << 32;
    let mut h = (i * 2654435761 + seed * 40503 + 12345) % m;
    h = ((h ^ (h >> 15)) * 2246822519) % m;
    h ^= h >> 13;
    let sign = (h & 1) << 31;
    let exp = (127 - 9 + 3 * ((h >> 1) % 7)) << 23;
    let mant = (h >> 16) << 7;
    (sign | exp | mant) as u32
}

#[test]
fn sums_over_all_and_several_axes_in_xla_order() {
    let f: Fixture = load_fixture("full_sums.json");
    let mut failures = Vec::new();
    for c in &f.cases {
        let n: usize = c.shape.iter().product();
        let x: Vec<f32> = (0..n as u64)
            .map(|i| f32::from_bits(element_bits(c.seed, i)))
            .collect();
        let x = Tensor::from_vec(x, &c.shape).unwrap();
        let y = match &c.axes {
            None => x.sum_all(),
            Some(axes) => x.sum(axes, false).unwrap(),
        };
        let got: Vec<u32> = y.to_vec().iter().map(|v| v.to_bits()).collect();
        if got != c.y {
            failures.push(format!(
                "sum of {:?} over {:?}: got {:08x?}, want {:08x?}",
                c.shape,
                c.axes,
                &got[..got.len().min(4)],
                &c.y[..c.y.len().min(4)]
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n{}",
        failures.len(),
        f.cases.len(),
        failures.join("\n")
    );
}

#[test]
fn sum_of_negative_zeros_is_positive_zero() {
    let f: Fixture = load_fixture("full_sums.json");
    let x = Tensor::from_vec(vec![-0.0; 20], &[4, 5]).unwrap();
    assert_eq!(x.sum_all().to_vec()[0].to_bits(), f.negzero_sum);
    assert_eq!(x.mean_all().to_vec()[0].to_bits(), f.negzero_sum);
}
