//! The matrix products of the 784-512-512-10 training step (batch 128),
//! each timed on its own along the exact path (XLA:CPU's order, limit
//! `usize::MAX`) and through the `gemm` crate (limit 0), as
//! tools/bench/jax_matmul_products.py times the same products in JAX.
//!
//! ```text
//! cargo bench --bench matmul_products
//! .venv-oracle/bin/python tools/bench/jax_matmul_products.py
//! ```
//!
//! Beside the wall-clock times, the process's CPU time per call (all
//! threads, from /proc/self/stat): on a machine shared with other work,
//! `RAYON_NUM_THREADS=1` and the CPU time compare the kernels' own cost.

use criterion::black_box;

mod common;
use common::{batch_times, fmt};
use flaxen::tensor::{set_exact_matmul_limit, Tensor};
use ndarray::{ArrayD, IxDyn};

/// Deterministic values in `[-1, 1)` (the numbers do not matter for
/// timing).
fn filled(shape: &[usize], seed: u64) -> Tensor {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
    let a = ArrayD::from_shape_fn(IxDyn(shape), |_| {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    });
    Tensor::from(a)
}

/// How the left and right operands reach the product.
#[derive(Clone, Copy)]
enum Form {
    /// `a @ b`, both row-major.
    Plain,
    /// `a^T @ b` with `a` stored `[k, m]` (the backward `x^T @ g`).
    LeftT,
    /// `a @ b^T` with `b` stored `[n, k]` (the backward `g @ W^T`).
    RightT,
}

/// The step's products: name, `(m, k, n)` and form.
const PRODUCTS: [(&str, (usize, usize, usize), Form); 8] = [
    ("fwd1 x@W1", (128, 784, 512), Form::Plain),
    ("fwd2 h1@W2", (128, 512, 512), Form::Plain),
    ("fwd3 h2@W3", (128, 512, 10), Form::Plain),
    ("bwd3 g3@W3^T", (128, 10, 512), Form::RightT),
    ("bwd3 h2^T@g3", (512, 128, 10), Form::LeftT),
    ("bwd2 g2@W2^T", (128, 512, 512), Form::RightT),
    ("bwd2 h1^T@g2", (512, 128, 512), Form::LeftT),
    ("bwd1 x^T@g1", (784, 128, 512), Form::LeftT),
];

/// The CPU time this process has used (user + system, all threads), in
/// seconds, from /proc/self/stat (0 where there is none).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may hold spaces): utime and
    // stime are fields 14 and 15, in clock ticks (100 per second on Linux).
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<f64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|v| v.parse().ok())
        .collect();
    f.iter().sum::<f64>() / 100.0
}

fn main() {
    // PRODUCTS_ONLY=<part of a name>, PRODUCTS_PATH=exact|gemm: a subset.
    let only = std::env::var("PRODUCTS_ONLY").ok();
    let path_only = std::env::var("PRODUCTS_PATH").ok();
    for (name, (m, k, n), form) in PRODUCTS {
        if only.as_ref().is_some_and(|o| !name.contains(o.as_str())) {
            continue;
        }
        let (a, b) = match form {
            Form::Plain => (filled(&[m, k], 1), filled(&[k, n], 2)),
            Form::LeftT => (filled(&[k, m], 1).transpose(), filled(&[k, n], 2)),
            Form::RightT => (filled(&[m, k], 1), filled(&[n, k], 2).transpose()),
        };
        for (path, limit) in [("exact", usize::MAX), ("gemm", 0)] {
            if path_only.as_ref().is_some_and(|p| p != path) {
                continue;
            }
            set_exact_matmul_limit(limit);
            let (mut calls, cpu) = (0u32, cpu_seconds());
            let (median, best) = batch_times(|| {
                black_box(black_box(&a).matmul(black_box(&b)).unwrap());
                calls += 1;
            });
            let cpu = (cpu_seconds() - cpu) / f64::from(calls);
            println!(
                "product/{name} {m}x{k}x{n} {path}: median {}, best {}, cpu {}",
                fmt(median),
                fmt(best),
                fmt(cpu)
            );
        }
    }
}
