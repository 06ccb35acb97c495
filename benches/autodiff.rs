//! Forward + backward of MLP training steps (the work of
//! tools/bench/jax_train_step.py), eager (`value_and_grad`) and compiled
//! (`jit_value_and_grad`), and the GEMM measurement behind `Tensor::matmul`.
//!
//! ```text
//! cargo bench --bench autodiff
//! .venv-oracle/bin/python tools/bench/jax_train_step.py
//! ```
//!
//! `AUTODIFF_BATCHES=1 cargo bench --bench autodiff` times the training
//! steps the way the JAX script does (median and best of ~10 ms batches)
//! instead of running criterion. `AUTODIFF_LIMIT=max` (or a number) sets
//! the exact-product limit first (`set_exact_matmul_limit`; 0: every
//! product through the `gemm` crate). `FLAXEN_BENCH_KEEP_FREED_MEMORY=1`
//! calls `memory::keep_freed_memory` first.

use criterion::{black_box, criterion_group, Criterion};

mod common;
use common::{batch_times, fmt};
use flaxen::tensor::{
    jit_value_and_grad_with, set_exact_matmul_limit, value_and_grad, Tensor, Tree,
};
use ndarray::{Array2, ArrayD, IxDyn};

/// Deterministic values in `[-scale, scale)` (a tiny LCG; the numbers do
/// not matter for timing).
fn filled(shape: &[usize], scale: f32, seed: u64) -> Tensor {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let a = ArrayD::from_shape_fn(IxDyn(shape), |_| {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
    });
    Tensor::from(a)
}

/// A ReLU MLP with layer sizes `sizes`, parameters `Dense_i/{kernel,bias}`.
fn mlp_params(sizes: &[usize]) -> Tree {
    let mut params = Tree::new();
    for (i, w) in sizes.windows(2).enumerate() {
        let scale = 1.0 / (w[0] as f32).sqrt();
        params
            .insert(
                format!("Dense_{i}"),
                Tree::new()
                    .with("kernel", filled(&[w[0], w[1]], scale, 2 * i as u64))
                    .with("bias", filled(&[w[1]], 0.1, 2 * i as u64 + 1)),
            )
            .unwrap();
    }
    params
}

/// The parameter paths of each layer (made once, as JAX traces once).
fn layer_paths(layers: usize) -> Vec<(String, String)> {
    (0..layers)
        .map(|i| (format!("Dense_{i}/kernel"), format!("Dense_{i}/bias")))
        .collect()
}

/// Mean squared error of the MLP on `(x, y)`.
fn mse(p: &Tree, x: &Tensor, y: &Tensor, paths: &[(String, String)]) -> flaxen::Result<Tensor> {
    let mut h = x.clone();
    let layers = paths.len();
    for (i, (kernel, bias)) in paths.iter().enumerate() {
        h = h.matmul(p.tensor(kernel)?)?.add(p.tensor(bias)?)?;
        if i + 1 < layers {
            h = h.relu();
        }
    }
    Ok(h.sub(y)?.square().mean_all())
}

/// The two steps: name, layer sizes, batch size.
const STEPS: [(&str, &[usize], usize); 2] = [
    ("mlp_784_512_512_10_b128", &[784, 512, 512, 10], 128),
    ("mlp_2_3_2_b8", &[2, 3, 2], 8),
];

fn train_steps(c: &mut Criterion) {
    let mut group = c.benchmark_group("train_step");
    for (name, sizes, batch) in STEPS {
        let params = mlp_params(sizes);
        let x = filled(&[batch, sizes[0]], 1.0, 100);
        let y = filled(&[batch, *sizes.last().unwrap()], 1.0, 101);
        let paths = layer_paths(sizes.len() - 1);
        group.bench_function(name, |b| {
            b.iter(|| {
                let (loss, grads) =
                    value_and_grad(|p| mse(p, &x, &y, &paths), black_box(&params)).unwrap();
                black_box((loss, grads))
            })
        });
        // The same step compiled: traced once, then replayed; the batch is an
        // input, as it is an argument of the JAX step.
        let batch = Tree::new().with("x", x.clone()).with("y", y.clone());
        let mut step = jit_value_and_grad_with(|p: &Tree, b: &Tree| {
            mse(p, b.tensor("x")?, b.tensor("y")?, &paths)
        });
        step.call_with(&params, &batch).unwrap();
        assert!(step.is_compiled());
        group.bench_function(format!("{name}_jit"), |b| {
            b.iter(|| {
                black_box(
                    step.call_with(black_box(&params), black_box(&batch))
                        .unwrap(),
                )
            })
        });
    }
    group.finish();
}

/// `Tensor::matmul` through the gemm crate (exact-product limit 0) and in
/// XLA's order (no limit), against ndarray's `dot` (matrixmultiply), on
/// the products of the large training step.
fn gemm_vs_matrixmultiply(c: &mut Criterion) {
    let mut group = c.benchmark_group("matmul");
    // (m, k, n): forward layers, and the backward dW = x^T g and dx = g W^T.
    for (m, k, n) in [
        (128, 784, 512),
        (128, 512, 512),
        (784, 128, 512),
        (128, 512, 784),
    ] {
        let a = filled(&[m, k], 1.0, 1);
        let b = filled(&[k, n], 1.0, 2);
        let (a2, b2): (Array2<f32>, Array2<f32>) =
            (a.to_array_fixed().unwrap(), b.to_array_fixed().unwrap());
        let limit = flaxen::tensor::exact_matmul_limit();
        set_exact_matmul_limit(0);
        group.bench_function(format!("gemm_{m}x{k}x{n}"), |bch| {
            bch.iter(|| black_box(a.matmul(&b).unwrap()))
        });
        set_exact_matmul_limit(usize::MAX);
        group.bench_function(format!("exact_{m}x{k}x{n}"), |bch| {
            bch.iter(|| black_box(a.matmul(&b).unwrap()))
        });
        set_exact_matmul_limit(limit);
        group.bench_function(format!("matrixmultiply_{m}x{k}x{n}"), |bch| {
            bch.iter(|| black_box(a2.dot(&b2)))
        });
    }
    group.finish();
}

/// The training steps timed exactly like the JAX script (median and best
/// batch), for a side-by-side table on a shared machine.
fn batch_report() {
    for (name, sizes, batch) in STEPS {
        let params = mlp_params(sizes);
        let x = filled(&[batch, sizes[0]], 1.0, 100);
        let y = filled(&[batch, *sizes.last().unwrap()], 1.0, 101);
        let paths = layer_paths(sizes.len() - 1);
        let (median, best) = batch_times(|| {
            black_box(value_and_grad(|p| mse(p, &x, &y, &paths), black_box(&params)).unwrap());
        });
        println!(
            "train_step/{name}: median {}, best {}",
            fmt(median),
            fmt(best)
        );
        let batch = Tree::new().with("x", x.clone()).with("y", y.clone());
        let mut step = jit_value_and_grad_with(|p: &Tree, b: &Tree| {
            mse(p, b.tensor("x")?, b.tensor("y")?, &paths)
        });
        let (median, best) = batch_times(|| {
            black_box(step.call_with(black_box(&params), &batch).unwrap());
        });
        println!(
            "train_step/{name}_jit: median {}, best {}",
            fmt(median),
            fmt(best)
        );
    }
}

criterion_group!(benches, train_steps, gemm_vs_matrixmultiply);

fn main() {
    // `FLAXEN_BENCH_KEEP_FREED_MEMORY=1`: `memory::keep_freed_memory` first
    // (glibc keeping freed pages; process-wide, so a run of its own).
    if std::env::var_os("FLAXEN_BENCH_KEEP_FREED_MEMORY").is_some() {
        flaxen::memory::keep_freed_memory();
    }
    if let Ok(limit) = std::env::var("AUTODIFF_LIMIT") {
        let limit = match limit.as_str() {
            "max" => usize::MAX,
            n => n.parse().expect("AUTODIFF_LIMIT: a number or max"),
        };
        set_exact_matmul_limit(limit);
    }
    // `AUTODIFF_BATCHES=1 cargo bench --bench autodiff`: the JAX script's
    // timing method instead of criterion's.
    if std::env::var_os("AUTODIFF_BATCHES").is_some() {
        batch_report();
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
