//! Gradients through a module with a BatchNorm in training: Dense(64) ->
//! relu -> Dropout(0.1) -> BatchNorm -> Dense(64) -> relu -> Dense(10) on
//! a batch of 32, `value_and_grad` of `sum(y * w)` with respect to the
//! parameters, a fresh dropout key per call; the module run eagerly (its
//! BatchNorm op by op) and as an `nn::Jit` (inline under `grad`, its
//! BatchNorm one operation with XLA's backward program). Also a lone
//! BatchNorm on [32, 64] both ways.
//! tools/bench/jax_nn_jit_grad.py times the same in JAX.
//!
//! ```text
//! cargo bench --bench nn_jit_grad
//! ```
//!
//! Timed as the JAX scripts time (median and best of ~10 ms batches).

use criterion::black_box;

mod common;
use common::{batch_times, fmt};
use flaxen::core::{Result, Rngs, Scope, Variables};
use flaxen::nn::{BatchNorm, Dense, Dropout, Jit, Module};
use flaxen::random;
use flaxen::tensor::{value_and_grad, Tensor, Tree};

/// Dense(64) -> relu -> Dropout(0.1) -> BatchNorm(momentum 0.9) ->
/// Dense(64) -> relu -> Dense(10), or the BatchNorm alone.
#[derive(Clone)]
struct Block {
    bn_only: bool,
}

impl Module for Block {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        if self.bn_only {
            return s.call(BatchNorm::new().momentum(0.9), x);
        }
        let h = s.call(Dense::new(64), x)?.relu();
        let h = s.call(Dropout::new(0.1), h)?;
        let h = s.call(BatchNorm::new().momentum(0.9), h)?;
        let h = s.call(Dense::new(64), h)?.relu();
        s.call(Dense::new(10), h)
    }
}

/// Times `value_and_grad` of `sum(module(x) * w)` over the parameters.
fn time<M: Module<Input = Tensor, Output = Tensor>>(
    label: &str,
    m: &M,
    v: &Variables,
    x: &Tensor,
    w: &Tensor,
) {
    let stats = v.collection("batch_stats").unwrap().clone();
    let params = v.params();
    let mut t = 0u32;
    let (median, best) = batch_times(|| {
        t += 1;
        let rngs = Rngs::none().with("dropout", random::fold_in(random::key(2), t));
        let out = value_and_grad(
            |p: &Tree| {
                let vars = Variables::new()
                    .with("params", p.clone())
                    .with("batch_stats", stats.clone());
                let (y, _) = m.apply_mut(&vars, x.clone(), rngs.clone(), ["batch_stats"])?;
                Ok((&y * w).sum_all())
            },
            &params,
        );
        black_box(out.unwrap());
    });
    println!("{label}: median {}, best {}", fmt(median), fmt(best));
}

fn main() {
    for (name, bn_only) in [("mlp_bn_64_64_64_10_b32", false), ("bn_32x64", true)] {
        let x = Tensor::from_array(random::normal(random::key(1), &[32, 64]).unwrap());
        let block = Block { bn_only };
        let rngs = Rngs::none()
            .with("params", random::key(0))
            .with("dropout", random::key(1));
        let v = block.init(rngs, x.clone()).unwrap();
        let out = if bn_only { 64 } else { 10 };
        let w = Tensor::from_array(random::normal(random::key(3), &[32, out]).unwrap());
        time(&format!("nn_jit_grad/{name}/eager"), &block, &v, &x, &w);
        let jit = Jit::new(block.clone());
        time(&format!("nn_jit_grad/{name}/jit"), &jit, &v, &x, &w);
    }
}
