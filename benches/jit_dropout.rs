//! The 784-512-512-10 training step (batch 128, mean squared error) of a
//! `Module` MLP with `Dropout(0.1)` after each hidden layer, compiled with
//! its dropout key as an argument (`jit_value_and_grad_with_keys`), next
//! to the same step compiled without dropout and to the sampling of its
//! two masks alone: the issue's bar is that the compiled step with dropout
//! costs no more than the step without it plus the masks.
//!
//! ```text
//! cargo bench --bench jit_dropout
//! ```
//!
//! Timed as the JAX scripts time (median and best of ~10 ms batches).

use criterion::black_box;

mod common;
use common::{batch_times, fmt};
use flaxen::core::{Result, Rngs, Scope, Variables};
use flaxen::nn::{Dense, Dropout, Module};
use flaxen::random::{self, Key};
use flaxen::tensor::{jit_value_and_grad_with_keys, value_and_grad, Tensor, Tree};

/// Dense(512) -> relu -> Dropout -> Dense(512) -> relu -> Dropout -> Dense(10).
struct Mlp {
    rate: f64,
}

impl Module for Mlp {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let mut h = x;
        for _ in 0..2 {
            h = s.child(Dense::new(512))?.call(h)?.relu();
            h = s.child(Dropout::new(self.rate))?.call(h)?;
        }
        s.child(Dense::new(10))?.call(h)
    }
}

fn loss(model: &Mlp, p: &Tree, b: &Tree, keys: &[Key]) -> flaxen::Result<Tensor> {
    let v = Variables::new().with("params", p.clone());
    let rngs = Rngs::none().with("dropout", keys[0].clone());
    let out = model.apply(&v, b.tensor("x")?.clone(), rngs)?;
    Ok(out.sub(b.tensor("y")?)?.square().mean_all())
}

fn main() {
    let [kp, kx, ky] = random::split(random::key(0), 3)
        .unwrap()
        .into_array()
        .unwrap();
    let x = Tensor::from_array(random::normal(kx, &[128, 784]).unwrap());
    let y = Tensor::from_array(random::normal(ky, &[128, 10]).unwrap());
    let params = Mlp { rate: 0.1 }.init(kp, x.clone()).unwrap().params();
    let batch = Tree::new().with("x", x).with("y", y);
    let key = random::key(1);
    let mut t = 0u32;
    let mut next_keys = || {
        t += 1;
        [random::fold_in(key.clone(), t)]
    };
    // `JIT_DROPOUT_ONLY=name` times that measurement alone (for a profile).
    let only = std::env::var("JIT_DROPOUT_ONLY").ok();
    let mut best = std::collections::HashMap::new();
    let mut time = |name: &'static str, f: &mut dyn FnMut()| {
        if only.as_deref().is_some_and(|o| o != name) {
            return;
        }
        let (median, b) = batch_times(f);
        println!(
            "jit_dropout/{name}: median {}, best {}",
            fmt(median),
            fmt(b)
        );
        best.insert(name, b);
    };

    let with = Mlp { rate: 0.1 };
    let mut step =
        jit_value_and_grad_with_keys(|p: &Tree, b: &Tree, k: &[Key]| loss(&with, p, b, k));
    step.call_with_keys(&params, &batch, &next_keys()).unwrap();
    assert!(step.is_compiled());
    time("step_dropout_jit", &mut || {
        let keys = next_keys();
        black_box(step.call_with_keys(&params, &batch, &keys).unwrap());
    });

    let without = Mlp { rate: 0.0 };
    let mut plain =
        jit_value_and_grad_with_keys(|p: &Tree, b: &Tree, k: &[Key]| loss(&without, p, b, k));
    plain.call_with_keys(&params, &batch, &next_keys()).unwrap();
    assert!(plain.is_compiled());
    time("step_jit", &mut || {
        let keys = next_keys();
        black_box(plain.call_with_keys(&params, &batch, &keys).unwrap());
    });

    time("two_masks_128x512", &mut || {
        let [a, b] = random::split(next_keys()[0].clone(), 2)
            .unwrap()
            .into_array()
            .unwrap();
        black_box(random::bernoulli(a, 0.9, &[128, 512]).unwrap());
        black_box(random::bernoulli(b, 0.9, &[128, 512]).unwrap());
    });

    time("step_dropout_eager", &mut || {
        let keys = next_keys();
        black_box(value_and_grad(|p| loss(&with, p, &batch, &keys), &params).unwrap());
    });
    if let (Some(d), Some(p), Some(m)) = (
        best.get("step_dropout_jit"),
        best.get("step_jit"),
        best.get("two_masks_128x512"),
    ) {
        println!(
            "jit_dropout/ratio (step with dropout) / (step without + masks), best: {:.2}",
            d / (p + m)
        );
    }
}
