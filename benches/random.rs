//! Throughput of `flaxen::random` on 2^24 elements, and the cost of deriving
//! a key (the make_rng hash plus `fold_in`). Compare with
//! `tools/bench/jax_random.py`, run on the same machine in the same session;
//! the book's "Keys and randomness" chapter has the table.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use flaxen::core::rng_hash::path_hash;
use flaxen::random;
use std::hint::black_box;

const N: usize = 1 << 24;

fn samplers(c: &mut Criterion) {
    let mut g = c.benchmark_group("sample_2^24");
    g.throughput(Throughput::Elements(N as u64));
    g.sample_size(20);
    g.bench_function(BenchmarkId::new("bits", N), |b| {
        b.iter(|| random::bits(random::key(black_box(0)), &[N]).unwrap())
    });
    g.bench_function(BenchmarkId::new("normal", N), |b| {
        b.iter(|| random::normal(random::key(black_box(0)), &[N]).unwrap())
    });
    g.bench_function(BenchmarkId::new("truncated_normal", N), |b| {
        b.iter(|| random::truncated_normal(random::key(black_box(0)), -2.0, 2.0, &[N]).unwrap())
    });
    g.bench_function(BenchmarkId::new("uniform", N), |b| {
        b.iter(|| random::uniform(random::key(black_box(0)), &[N]).unwrap())
    });
    g.finish();
}

fn key_derivation(c: &mut Criterion) {
    let mut g = c.benchmark_group("key_derivation");
    let seed = random::key(0);
    g.bench_function("make_rng_hash_and_fold_in", |b| {
        b.iter(|| {
            let h = path_hash(
                &[black_box("Dense_0").into(), black_box(1u64).into()],
                false,
            );
            random::fold_in(random::clone(&seed), h)
        })
    });
    g.bench_function("fold_in", |b| {
        b.iter(|| random::fold_in(random::clone(&seed), black_box(7)))
    });
    g.bench_function("split_2", |b| {
        b.iter(|| random::split_n::<2>(random::clone(&seed)))
    });
    g.finish();
}

criterion_group!(benches, samplers, key_derivation);
criterion_main!(benches);
