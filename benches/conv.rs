//! A 3×3 convolution layer (`Conv(32, (3, 3))`, SAME, 16 → 32 features) on
//! a batch of 32 images of 28×28, forward and forward + backward, next to
//! the same work in JAX (`tools/bench/jax_conv.py`, jitted). flaxen runs
//! the convolution in XLA:CPU's order (chains of fused multiply-adds), so
//! the values are JAX's; the book's "Convolutions and more layers" chapter
//! has the ratio.

use criterion::{criterion_group, criterion_main, Criterion};
use flaxen::core::Variables;
use flaxen::nn::{Conv, Module};
use flaxen::random;
use flaxen::tensor::{value_and_grad, Tensor};

fn conv(c: &mut Criterion) {
    let x = Tensor::from_array(random::normal(random::key(1), &[32, 28, 28, 16]).unwrap());
    let layer = Conv::new(32, &[3, 3]);
    let v = layer.init(random::key(0), x.clone()).unwrap();
    let mut g = c.benchmark_group("conv_3x3_16_32_28x28_b32");
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
