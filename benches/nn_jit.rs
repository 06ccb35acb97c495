//! A small module compiled with `nn::Jit` against the same module run
//! eagerly: Dense(64) -> relu -> Dropout(0.1) -> Dense(64) -> relu ->
//! Dense(10) on a batch of 32 (and a tiny 8-16-16-4 version, where the
//! per-call overhead dominates), each call with a fresh dropout key, as
//! `model.apply` of a module with a jitted submodule runs in Flax; and the
//! 64-wide model with a BatchNorm (training, `batch_stats` mutable) after
//! its dropout.
//! tools/bench/jax_nn_jit.py times the same in JAX.
//!
//! ```text
//! cargo bench --bench nn_jit
//! ```
//!
//! Timed as the JAX scripts time (median and best of ~10 ms batches).

use criterion::black_box;

mod common;
use common::{batch_times, fmt};
use flaxen::core::{Result, Rngs, Scope, Variables};
use flaxen::nn::{BatchNorm, Dense, Dropout, Jit, Module};
use flaxen::random;
use flaxen::tensor::Tensor;

/// Dense(hidden) -> relu -> Dropout(0.1) [-> BatchNorm(momentum 0.9)] ->
/// Dense(hidden) -> relu -> Dense(out).
#[derive(Clone)]
struct Block {
    hidden: usize,
    out: usize,
    bn: bool,
}

impl Module for Block {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let h = s.call(Dense::new(self.hidden), x)?.relu();
        let mut h = s.call(Dropout::new(0.1), h)?;
        if self.bn {
            h = s.call(BatchNorm::new().momentum(0.9), h)?;
        }
        let h = s.call(Dense::new(self.hidden), h)?.relu();
        s.call(Dense::new(self.out), h)
    }
}

fn case(name: &str, batch: usize, features: usize, hidden: usize, out: usize, bn: bool) {
    let x = Tensor::from_array(random::normal(random::key(1), &[batch, features]).unwrap());
    let block = Block { hidden, out, bn };
    let jit = Jit::new(block.clone());
    let rngs = || {
        Rngs::none()
            .with("params", random::key(0))
            .with("dropout", random::key(1))
    };
    let v: Variables = jit.init(rngs(), x.clone()).unwrap();
    // A top-level Jit adds no level to the variables: `block` runs on
    // the same ones.
    let mut keys = {
        let key = random::key(2);
        let mut t = 0u32;
        move || {
            t += 1;
            Rngs::none().with("dropout", random::fold_in(key.clone(), t))
        }
    };
    // With BatchNorm, the statistics are updated (and dropped) on every
    // call, as Flax's `apply(..., mutable=["batch_stats"])`.
    let mutable: &[&str] = if bn { &["batch_stats"] } else { &[] };
    jit.apply_mut(&v, x.clone(), keys(), mutable).unwrap();
    assert!(jit.is_compiled(), "{:?}", jit.eager_reasons());
    let (median, eager) = batch_times(|| {
        black_box(block.apply_mut(&v, x.clone(), keys(), mutable).unwrap());
    });
    println!(
        "nn_jit/{name}/eager: median {}, best {}",
        fmt(median),
        fmt(eager)
    );
    let (median, replay) = batch_times(|| {
        black_box(jit.apply_mut(&v, x.clone(), keys(), mutable).unwrap());
    });
    println!(
        "nn_jit/{name}/jit_replay: median {}, best {}",
        fmt(median),
        fmt(replay)
    );
    println!(
        "nn_jit/{name}/speed-up (eager / replay, best): {:.2}",
        eager / replay
    );
}

fn main() {
    case("mlp_64_64_64_10_b32", 32, 64, 64, 10, false);
    case("mlp_16_16_16_4_b8", 8, 16, 16, 4, false);
    case("mlp_bn_64_64_64_10_b32", 32, 64, 64, 10, true);
}
