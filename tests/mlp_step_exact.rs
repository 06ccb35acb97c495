//! The 784-512-512-10 training step of benches/autodiff.rs bit for bit with
//! JAX (tests/fixtures/mlp_step.json, tools/oracle/generate_mlp_step.py):
//! loss and gradients, eager and compiled, with every product along the
//! exact path (the large ones run split between threads, with `k` cut
//! into chunks, and the backward pass's transposed products). Its own test
//! binary, since the exact-product limit is process-wide.

mod common;

use common::load_fixture;
use flaxen::tensor::{
    jit_value_and_grad_with, set_exact_matmul_limit, value_and_grad, Tensor, Tree,
};
use serde::Deserialize;
use std::collections::BTreeMap;

#[derive(Deserialize)]
struct Expected {
    shape: Vec<usize>,
    sha1: String,
    rows: Vec<String>,
}

#[derive(Deserialize)]
struct Case {
    loss: u32,
    grads: BTreeMap<String, Expected>,
}

#[derive(Deserialize)]
struct Fixture {
    sizes: Vec<usize>,
    batch: usize,
    kernel_scale: u32,
    bias_scale: u32,
    cases: BTreeMap<String, Case>,
}

/// `((i * 2654435761 + seed * 40503) mod 2^32) / 2^32 * 4 - 2`, in f64,
/// then f32 (generate_gemv.py's `inputs`), times `scale`.
fn hashed(shape: &[usize], seed: u64, scale: f32) -> Tensor {
    let n: usize = shape.iter().product();
    let v = (0..n as u64)
        .map(|i| {
            let h = (i * 2654435761 + seed * 40503) % (1 << 32);
            (h as f64 / 4294967296.0 * 4.0 - 2.0) as f32 * scale
        })
        .collect();
    Tensor::from_vec(v, shape).unwrap()
}

fn sha1(bits: impl Iterator<Item = u32>) -> String {
    use sha1::{Digest, Sha1};
    let mut sha = Sha1::new();
    for b in bits {
        sha.update(b.to_le_bytes());
    }
    sha.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

fn mse(p: &Tree, x: &Tensor, y: &Tensor, layers: usize) -> flaxen::Result<Tensor> {
    let mut h = x.clone();
    for i in 0..layers {
        h = h
            .matmul(p.tensor(&format!("Dense_{i}/kernel"))?)?
            .add(p.tensor(&format!("Dense_{i}/bias"))?)?;
        if i + 1 < layers {
            h = h.relu();
        }
    }
    Ok(h.sub(y)?.square().mean_all())
}

/// Where `loss` and `grads` differ from `case`: one line per array, naming
/// the first rows that differ.
fn differences(loss: &Tensor, grads: &Tree, case: &Case) -> Vec<String> {
    let mut bad = Vec::new();
    let l = loss.to_vec()[0];
    if l.to_bits() != case.loss {
        bad.push(format!(
            "loss {l:?} ({:#010x}), expected {:?}",
            l.to_bits(),
            f32::from_bits(case.loss)
        ));
    }
    for (path, want) in &case.grads {
        let g = grads.tensor(path).unwrap();
        assert_eq!(g.shape(), &want.shape[..], "{path}");
        let bits: Vec<u32> = g.to_vec().iter().map(|v| v.to_bits()).collect();
        if sha1(bits.iter().copied()) == want.sha1 {
            continue;
        }
        let width = *want.shape.last().unwrap();
        let rows: Vec<usize> = bits
            .chunks(width)
            .zip(&want.rows)
            .enumerate()
            .filter(|(_, (row, digest))| sha1(row.iter().copied()) != **digest)
            .map(|(i, _)| i)
            .collect();
        bad.push(format!(
            "{path}: {} of {} rows differ, first {:?}",
            rows.len(),
            want.rows.len(),
            &rows[..rows.len().min(8)]
        ));
    }
    bad
}

#[test]
fn large_mlp_step_matches_jax_bit_for_bit() {
    set_exact_matmul_limit(usize::MAX);
    let f: Fixture = load_fixture("mlp_step.json");
    let (kscale, bscale) = (f32::from_bits(f.kernel_scale), f32::from_bits(f.bias_scale));
    let layers = f.sizes.len() - 1;
    let mut params = Tree::new();
    for (i, w) in f.sizes.windows(2).enumerate() {
        let layer = Tree::new()
            .with("kernel", hashed(&[w[0], w[1]], 10 + 2 * i as u64, kscale))
            .with("bias", hashed(&[w[1]], 11 + 2 * i as u64, bscale));
        params.insert(format!("Dense_{i}"), layer).unwrap();
    }
    let x = hashed(&[f.batch, f.sizes[0]], 1, 1.0);
    let y = hashed(&[f.batch, f.sizes[layers]], 2, 1.0);
    let (loss, grads) = value_and_grad(|p| mse(p, &x, &y, layers), &params).unwrap();
    let eager = differences(&loss, &grads, &f.cases["eager"]);
    let batch = Tree::new().with("x", x.clone()).with("y", y.clone());
    let mut step = jit_value_and_grad_with(|p: &Tree, b: &Tree| {
        mse(p, b.tensor("x")?, b.tensor("y")?, layers)
    });
    let mut jit = Vec::new();
    for _ in 0..2 {
        let (loss, grads) = step.call_with(&params, &batch).unwrap();
        jit.push(differences(&loss, &grads, &f.cases["jit"]));
    }
    assert!(step.is_compiled());
    assert!(
        eager.is_empty() && jit.iter().all(Vec::is_empty),
        "eager: {eager:#?}\ncompiled: {jit:#?}"
    );
}
