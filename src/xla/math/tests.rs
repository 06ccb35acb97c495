//! The XLA functions against JAX: a fixture of a few thousand inputs per
//! function (tools/oracle/xla_math.py), compared bit for bit, NaNs included;
//! and an opt-in exhaustive comparison with a dump of all 2^32 inputs.

use super::*;
use serde_json::Value;

type Scalar = fn(f32) -> f32;
type Slice = fn(&mut [f32]);

const FUNCTIONS: [(&str, Scalar, Slice); 4] = [
    ("log", log, log_slice),
    ("log1p", log1p, log1p_slice),
    ("erf", erf, erf_slice),
    ("erf_inv", erf_inv, erf_inv_slice),
];

/// Everything the exhaustive comparison knows: the fixture's functions and
/// the ones checked only through module fixtures and dumps.
const EXHAUSTIVE: [(&str, Scalar, Slice); 8] = [
    ("log", log, log_slice),
    ("log1p", log1p, log1p_slice),
    ("erf", erf, erf_slice),
    ("erf_inv", erf_inv, erf_inv_slice),
    ("tanh", tanh, tanh_slice),
    ("exp", exp, exp_slice),
    ("logistic", logistic, logistic_slice),
    ("expm1", expm1, expm1_slice),
];

fn fixture() -> Value {
    serde_json::from_str(include_str!("../../../tests/fixtures/xla_math.json"))
        .expect("tests/fixtures/xla_math.json is valid JSON")
}

fn words(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("an array of bit patterns")
        .iter()
        .map(|w| w.as_u64().expect("a u32 bit pattern") as u32)
        .collect()
}

#[test]
fn matches_jax_fixture_bit_for_bit() {
    let fixture = fixture();
    for (name, scalar, slice) in FUNCTIONS {
        let inputs = words(&fixture[name]["in"]);
        let expected = words(&fixture[name]["out"]);
        assert_eq!(inputs.len(), expected.len(), "{name}");
        assert!(inputs.len() > 1000, "{name}: fixture too small");

        let mut batch: Vec<f32> = inputs.iter().map(|&b| f32::from_bits(b)).collect();
        slice(&mut batch);
        let mut bad = Vec::new();
        for ((&x, &want), got) in inputs.iter().zip(&expected).zip(&batch) {
            let one = scalar(f32::from_bits(x)).to_bits();
            if one != want || got.to_bits() != want {
                bad.push(format!(
                    "{name}({x:#010x} = {:e}): JAX {want:#010x}, scalar {one:#010x}, slice {:#010x}",
                    f32::from_bits(x),
                    got.to_bits()
                ));
            }
        }
        assert!(
            bad.is_empty(),
            "{} of {} differ:\n{}",
            bad.len(),
            inputs.len(),
            bad[..bad.len().min(20)].join("\n")
        );
    }
}

#[test]
fn denormals_are_flushed_like_xla() {
    let sub = f32::from_bits(0x0040_0000);
    assert_eq!(log(sub), f32::NEG_INFINITY);
    assert_eq!(log1p(-sub).to_bits(), 0x8000_0000);
    assert_eq!(erf(sub).to_bits(), 0);
    assert_eq!(erf_inv(-sub).to_bits(), 0x8000_0000);
    // The exact product 1.3264034e-38 * 0.886... is just below the smallest
    // normal; it would round up to it, but XLA flushes it.
    assert_eq!(erf_inv(f32::from_bits(0x0090_6EBB)).to_bits(), 0);
}

/// Compares with a dump written by tools/oracle/xla_math_exhaustive.py:
///
/// ```text
/// XLA_MATH_FN=erf_inv XLA_MATH_DUMP=/tmp/erf_inv.bin \
///     cargo test --release --lib xla_math -- --ignored --nocapture
/// ```
///
/// `XLA_MATH_START` is the first input bit pattern of the dump (default 0).
/// Without an FMA target feature `mul_add` is a libm call, so this takes a
/// few minutes per function.
#[test]
#[ignore = "needs a dump from tools/oracle/xla_math_exhaustive.py"]
fn exhaustive_against_dump() {
    use rayon::prelude::*;
    use std::io::Read;

    let var = |k: &str| std::env::var(k).ok();
    let (Some(name), Some(path)) = (var("XLA_MATH_FN"), var("XLA_MATH_DUMP")) else {
        panic!("set XLA_MATH_FN and XLA_MATH_DUMP");
    };
    let start: u64 = var("XLA_MATH_START").map_or(0, |s| s.parse().expect("a number"));
    let (_, scalar, slice) = EXHAUSTIVE
        .into_iter()
        .find(|f| f.0 == name)
        .expect("XLA_MATH_FN is one of log, log1p, erf, erf_inv, tanh, exp, logistic, expm1");

    const CHUNK: usize = 1 << 22;
    let mut file = std::fs::File::open(&path).expect("XLA_MATH_DUMP opens");
    let mut bytes = vec![0u8; 4 * CHUNK];
    let (mut pos, mut total, mut bad) = (start, 0u64, 0u64);
    // (input, JAX, slice form, scalar form) for every input where either
    // form differs from JAX.
    loop {
        let mut got = 0;
        while got < bytes.len() {
            match file.read(&mut bytes[got..]).expect("dump reads") {
                0 => break,
                n => got += n,
            }
        }
        let n = got / 4;
        if n == 0 {
            break;
        }
        let chunk_bad: Vec<(u32, u32, u32, u32)> = bytes[..4 * n]
            .par_chunks(4 * 4096)
            .enumerate()
            .flat_map_iter(|(j, want)| {
                let first = pos + (j * 4096) as u64;
                let mut xs: Vec<f32> = (0..want.len() / 4)
                    .map(|i| f32::from_bits((first + i as u64) as u32))
                    .collect();
                slice(&mut xs);
                xs.into_iter()
                    .enumerate()
                    .filter_map(move |(i, y)| {
                        let w = u32::from_le_bytes(want[4 * i..4 * i + 4].try_into().unwrap());
                        let x = (first + i as u64) as u32;
                        let one = scalar(f32::from_bits(x)).to_bits();
                        (y.to_bits() != w || one != w).then_some((x, w, y.to_bits(), one))
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        for &(x, w, y, one) in chunk_bad.iter().take(20usize.saturating_sub(bad as usize)) {
            println!("{name}({x:#010x}): JAX {w:#010x}, slice {y:#010x}, scalar {one:#010x}");
        }
        bad += chunk_bad.len() as u64;
        total += n as u64;
        pos += n as u64;
        if got < bytes.len() {
            break;
        }
    }
    println!("{name}: {total} inputs compared, {bad} differ");
    assert_eq!(bad, 0);
}

/// The lane-wise `erf_inv_slice` against the scalar `erf_inv` over a sweep
/// of bit patterns (every 251st, plus the neighbourhoods of the special
/// values), with the widest vector instructions as the samplers run it.
#[test]
fn lanes_match_scalar() {
    let specials = [
        0u32,
        0x3F80_0000,
        0x3F00_0000,
        0x3ED4_13CD,
        0x0080_0000,
        0x7F80_0000,
    ];
    let mut inputs: Vec<u32> = (0..=u32::MAX).step_by(251).collect();
    for s in specials {
        for d in 0..64u32 {
            for b in [s.wrapping_add(d), s.wrapping_sub(d)] {
                inputs.extend([b, b | 0x8000_0000]);
            }
        }
    }
    let xs: Vec<f32> = inputs.iter().map(|&b| f32::from_bits(b)).collect();
    let (lanes, scalar) = crate::random::sampling::simd(|| {
        let mut lanes = xs.clone();
        erf_inv_slice(&mut lanes);
        let scalar: Vec<f32> = xs.iter().map(|&x| erf_inv(x)).collect();
        (lanes, scalar)
    });
    for ((x, l), s) in inputs.iter().zip(&lanes).zip(&scalar) {
        assert_eq!(l.to_bits(), s.to_bits(), "erf_inv({x:#010x})");
    }
}
