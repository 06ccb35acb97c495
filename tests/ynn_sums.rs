//! Sums that XLA:CPU hands to YNNPACK (at least 4,096 input elements)
//! against eager `jnp.sum` and `jnp.mean` (jax 0.10.2, CPU), bit for bit:
//! full sums of 4,096 to 100,000 elements (tile boundaries at 32,768
//! included), sums over the last axis, over the leading axes as
//! BatchNorm's statistics over `(N, H, W)` (tiles of 8, 2 and 1 images),
//! over middle axes, a mean, and NaN, infinities (of both signs in one
//! sum) and -0 in the inputs, compared bit for bit, NaN's sign included
//! (tools/oracle/generate_ynn_sums.py writes
//! tests/fixtures/ynn_sums.json; both sides make the inputs with
//! `hashed_inputs`). Eager and in a compiled step.

mod common;

use common::{hashed_inputs, load_fixture};

use flaxen::tensor::{as_jitted, jit_value_and_grad, Tensor, Tree};
use serde::Deserialize;

#[derive(Deserialize)]
struct Case {
    shape: Vec<usize>,
    axes: Option<Vec<isize>>,
    mean: bool,
    seed: u64,
    /// Elements set to these bits ([row-major index, bits]).
    #[serde(default)]
    edits: Vec<(usize, u32)>,
    y: Vec<u32>,
}

/// The case's input: hashed values, then the oracle's edits.
fn input(case: &Case) -> Tensor {
    let x = hashed_inputs(&case.shape, case.seed);
    if case.edits.is_empty() {
        return x;
    }
    let mut v = x.to_vec();
    for &(i, b) in &case.edits {
        v[i] = f32::from_bits(b);
    }
    Tensor::from_vec(v, &case.shape).unwrap()
}

#[derive(Deserialize)]
struct Fixture {
    cases: Vec<Case>,
}

/// The case's reduction of `x`.
fn reduce(case: &Case, x: &Tensor) -> flaxen::tensor::Result<Tensor> {
    match (&case.axes, case.mean) {
        (None, false) => Ok(x.sum_all()),
        (None, true) => Ok(x.mean_all()),
        (Some(a), false) => x.sum(a, false),
        (Some(a), true) => x.mean(a, false),
    }
}

fn bits(t: &Tensor) -> Vec<u32> {
    t.to_vec().iter().map(|v| v.to_bits()).collect()
}

#[test]
fn sums_from_4096_elements_match_ynnpack() {
    if !common::ynn_pooled() {
        eprintln!("not run: one CPU (YNNPACK does not tile without a pool)");
        return;
    }
    let f: Fixture = load_fixture("ynn_sums.json");
    let mut failed = Vec::new();
    for case in &f.cases {
        let x = input(case);
        let y = reduce(case, &x).unwrap();
        if bits(&y) != case.y {
            failed.push(format!(
                "{:?} over {:?} (mean {})",
                case.shape, case.axes, case.mean
            ));
        }
    }
    assert!(failed.is_empty(), "{failed:?}");
}

#[test]
fn compiled_steps_sum_as_jitted_eager_ones() {
    if !common::ynn_pooled() {
        eprintln!("not run: one CPU");
        return;
    }
    let f: Fixture = load_fixture("ynn_sums.json");
    for case in f.cases.iter().filter(|c| c.axes.is_some()) {
        let x = input(case);
        let w = Tensor::ones(reduce(case, &x).unwrap().shape());
        let mut step = jit_value_and_grad(|t: &Tree| {
            let y = reduce(case, t.tensor("x")?)?;
            Ok(y.mul(&w)?.sum_all())
        });
        let p = Tree::new().with("x", x.clone());
        // Twice: the second call replays the compiled program.
        for _ in 0..2 {
            let (v, _) = step.call(&p).unwrap();
            // The step runs as one compiled computation.
            let want = as_jitted(|| reduce(case, &x).unwrap().mul(&w).unwrap().sum_all());
            assert_eq!(
                bits(&v),
                bits(&want),
                "{:?} over {:?}",
                case.shape,
                case.axes
            );
        }
    }
}
