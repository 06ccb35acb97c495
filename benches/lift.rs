//! The cost of lifting: a vmapped `Dense` with per-item parameters against
//! the same computation written by hand as one batched matmul, and a scan
//! over 64 residual blocks against the unrolled loop. The goal is at most
//! 1.5x the hand-written version; the book's "Lifted transforms" chapter
//! has the table.

use criterion::{criterion_group, criterion_main, Criterion};
use flaxen::core::{Result, Scope, Variables};
use flaxen::nn::{Dense, Module, Scan, Vmap};
use flaxen::random;
use flaxen::tensor::Tensor;
use std::hint::black_box;

const ITEMS: usize = 16;
const BATCH: usize = 32;
const FEATURES: usize = 64;
const DEPTH: usize = 64;

fn vmapped_dense(c: &mut Criterion) {
    let x = Tensor::from_array(random::normal(random::key(1), &[ITEMS, BATCH, FEATURES]).unwrap());
    let model = || {
        Vmap::new(Dense::new(FEATURES))
            .variable_axes("params", Some(0))
            .split_rngs("params", true)
    };
    let v = model().init(random::key(0), x.clone()).unwrap();
    let kernel = v.tensor("params/kernel").unwrap().clone();
    let bias = v.tensor("params/bias").unwrap().clone();
    let mut g = c.benchmark_group("vmap_dense");
    g.bench_function("vmap", |b| {
        b.iter(|| model().apply(&v, black_box(x.clone()), ()).unwrap())
    });
    g.bench_function("hand_written_batched_matmul", |b| {
        b.iter(|| {
            let y = black_box(&x).matmul(&kernel).unwrap();
            y.add(
                &bias
                    .reshape(&[ITEMS as isize, 1, FEATURES as isize])
                    .unwrap(),
            )
            .unwrap()
        })
    });
    g.finish();
}

struct Block;

impl Module for Block {
    type Input = (Tensor, ());
    type Output = (Tensor, ());
    fn call(&self, s: &Scope<'_>, (x, _): (Tensor, ())) -> Result<(Tensor, ())> {
        let h = s.call(Dense::new(FEATURES), x.clone())?.relu();
        Ok((x.add(&h)?, ()))
    }
}

struct Unrolled;

impl Module for Unrolled {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, mut x: Tensor) -> Result<Tensor> {
        for _ in 0..DEPTH {
            x = s.call(Block, (x, ()))?.0;
        }
        Ok(x)
    }
}

fn scanned_blocks(c: &mut Criterion) {
    let x = Tensor::from_array(random::normal(random::key(1), &[BATCH, FEATURES]).unwrap());
    let scan = || {
        Scan::new(Block)
            .variable_axes("params", 0)
            .split_rngs("params", true)
            .length(DEPTH)
    };
    let sv = scan().init(random::key(0), (x.clone(), ())).unwrap();
    let uv: Variables = Unrolled.init(random::key(0), x.clone()).unwrap();
    let mut g = c.benchmark_group("scan_64_residual_blocks");
    g.sample_size(20);
    g.bench_function("scan", |b| {
        b.iter(|| scan().apply(&sv, (black_box(x.clone()), ()), ()).unwrap())
    });
    g.bench_function("unrolled", |b| {
        b.iter(|| Unrolled.apply(&uv, black_box(x.clone()), ()).unwrap())
    });
    g.finish();
}

criterion_group!(benches, vmapped_dense, scanned_blocks);
criterion_main!(benches);
