//! The matrix products of the 784-512-512-10 training step (batch 128),
//! each timed on its own along the exact path (XLA:CPU's order, limit
//! `usize::MAX`) and through the `gemm` crate (limit 0), as
//! tools/bench/jax_matmul_products.py times the same products in JAX.
//!
//! ```text
//! cargo bench --bench matmul_products
//! .venv-oracle/bin/python tools/bench/jax_matmul_products.py
//! ```

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

fn main() {
    for (name, (m, k, n), form) in PRODUCTS {
        let (a, b) = match form {
            Form::Plain => (filled(&[m, k], 1), filled(&[k, n], 2)),
            Form::LeftT => (filled(&[k, m], 1).transpose(), filled(&[k, n], 2)),
            Form::RightT => (filled(&[m, k], 1), filled(&[n, k], 2).transpose()),
        };
        for (path, limit) in [("exact", usize::MAX), ("gemm", 0)] {
            set_exact_matmul_limit(limit);
            let (median, best) = batch_times(|| {
                black_box(black_box(&a).matmul(black_box(&b)).unwrap());
            });
            println!(
                "product/{name} {m}x{k}x{n} {path}: median {}, best {}",
                fmt(median),
                fmt(best)
            );
        }
    }
}
