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
//! Timed as the JAX scripts time (median and best of ~10 ms batches), the
//! two compiled steps in alternation. `AUTODIFF_LIMIT=max` (or a number)
//! sets `set_exact_matmul_limit` first, as in benches/autodiff.rs.

use criterion::black_box;

mod common;
use common::{batch_times, fmt, interleaved_batch_times};
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
    if let Ok(limit) = std::env::var("AUTODIFF_LIMIT") {
        let limit = match limit.as_str() {
            "max" => usize::MAX,
            n => n.parse().expect("AUTODIFF_LIMIT: a number or max"),
        };
        flaxen::tensor::set_exact_matmul_limit(limit);
    }
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
    let with = Mlp { rate: 0.1 };
    let mut step =
        jit_value_and_grad_with_keys(|p: &Tree, b: &Tree, k: &[Key]| loss(&with, p, b, k));
    step.call_with_keys(&params, &batch, &next_keys()).unwrap();
    assert!(step.is_compiled());
    let without = Mlp { rate: 0.0 };
    let mut plain =
        jit_value_and_grad_with_keys(|p: &Tree, b: &Tree, k: &[Key]| loss(&without, p, b, k));
    plain.call_with_keys(&params, &batch, &next_keys()).unwrap();
    assert!(plain.is_compiled());

    let key = std::cell::RefCell::new(next_keys);
    let keys = || key.borrow_mut()();
    let mut step_dropout_jit = || {
        let keys = keys();
        black_box(step.call_with_keys(&params, &batch, &keys).unwrap());
    };
    let mut step_jit = || {
        let keys = keys();
        black_box(plain.call_with_keys(&params, &batch, &keys).unwrap());
    };
    let mut two_masks = || {
        let [a, b] = random::split(keys()[0].clone(), 2)
            .unwrap()
            .into_array()
            .unwrap();
        black_box(random::bernoulli(a, 0.9, &[128, 512]).unwrap());
        black_box(random::bernoulli(b, 0.9, &[128, 512]).unwrap());
    };
    let mut step_dropout_eager = || {
        let keys = keys();
        black_box(value_and_grad(|p| loss(&with, p, &batch, &keys), &params).unwrap());
    };
    let print = |name: &str, (median, best): (f64, f64)| {
        println!(
            "jit_dropout/{name}: median {}, best {}",
            fmt(median),
            fmt(best)
        );
    };
    // `JIT_DROPOUT_ONLY=name` times that measurement alone (for a profile).
    if let Ok(only) = std::env::var("JIT_DROPOUT_ONLY") {
        let f: &mut dyn FnMut() = match only.as_str() {
            "step_dropout_jit" => &mut step_dropout_jit,
            "step_jit" => &mut step_jit,
            "two_masks_128x512" => &mut two_masks,
            "step_dropout_eager" => &mut step_dropout_eager,
            other => panic!("JIT_DROPOUT_ONLY: no measurement {other}"),
        };
        print(&only, batch_times(f));
        return;
    }
    // The two steps run in alternation (a batch of each per round), so a
    // drift of the machine falls on both alike; the ratio is also taken
    // within each round. The masks are timed on their own, as the bar
    // states them (after a step, the pool's threads are still winding
    // down and a batch of masks takes up to 1.6 times as long).
    let (stats, rounds) = interleaved_batch_times(&mut [&mut step_dropout_jit, &mut step_jit]);
    let masks = batch_times(&mut two_masks);
    let [(dm, db), (pm, pb), (mm, mb)] = [stats[0], stats[1], masks];
    print("step_dropout_jit", (dm, db));
    print("step_jit", (pm, pb));
    print("two_masks_128x512", (mm, mb));
    print("step_dropout_eager", batch_times(&mut step_dropout_eager));
    let mut paired: Vec<f64> = rounds.iter().map(|r| r[0] / (r[1] + mm)).collect();
    paired.sort_by(f64::total_cmp);
    println!(
        "jit_dropout/ratio (step with dropout) / (step without + masks): median {:.3}, best {:.3}, within rounds (median of {}) {:.3}",
        dm / (pm + mm),
        db / (pb + mb),
        paired.len(),
        paired[paired.len() / 2]
    );
}
