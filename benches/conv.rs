//! A 3×3 convolution layer (`Conv(32, (3, 3))`, SAME, 16 → 32 features) on
//! a batch of 32 images of 28×28, forward and forward + backward, next to
//! the same work in JAX (`tools/bench/jax_conv.py`, jitted). flaxen runs
//! the convolution in XLA:CPU's order (chains of fused multiply-adds), so
//! the values are JAX's; the book's "Convolutions and more layers" chapter
//! has the ratio. With `FLAXEN_BENCH_KEEP_FREED_MEMORY=1` the process first
//! calls `flaxen::memory::keep_freed_memory`.

use criterion::{criterion_group, criterion_main, Criterion};
use flaxen::core::Variables;
use flaxen::nn::{Conv, Module};
use flaxen::random;
use flaxen::tensor::{value_and_grad, Tensor};

fn conv(c: &mut Criterion) {
    // Run once as is and once with `FLAXEN_BENCH_KEEP_FREED_MEMORY=1`
    // (`memory::keep_freed_memory`, glibc keeping freed pages): the setting
    // is process-wide, so each is its own run with its own group name.
    let kept = std::env::var_os("FLAXEN_BENCH_KEEP_FREED_MEMORY").is_some()
        && flaxen::memory::keep_freed_memory();
    let group = if kept {
        "conv_3x3_16_32_28x28_b32_keep_freed_memory"
    } else {
        "conv_3x3_16_32_28x28_b32"
    };
    let x = Tensor::from_array(random::normal(random::key(1), &[32, 28, 28, 16]).unwrap());
    let layer = Conv::new(32, &[3, 3]);
    let v = layer.init(random::key(0), x.clone()).unwrap();
    let mut g = c.benchmark_group(group);
    g.sample_size(10);
    g.bench_function("forward", |b| {
        b.iter(|| layer.apply(&v, x.clone(), ()).unwrap())
    });
    g.bench_function("forward_backward", |b| {
        b.iter(|| {
            value_and_grad(
                |p| {
                    let vars = Variables::new().with("params", p.clone());
                    Ok(layer.apply(&vars, x.clone(), ())?.square().mean_all())
                },
                &v.params(),
            )
            .unwrap()
        })
    });
    g.finish();
}

criterion_group!(benches, conv);
criterion_main!(benches);
