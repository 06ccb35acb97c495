//! Compiling a training step whose model draws dropout masks: the keys are
//! arguments of the compiled step, as in a jitted JAX step, so every call
//! draws new masks while the rest of the step is replayed.
//!
//! Run with `cargo run --release --example jit_dropout`.

use flaxen::core::{Result, Rngs, Scope, Variables};
use flaxen::nn::{Dense, Dropout, Module};
use flaxen::random::{self, Key};
use flaxen::tensor::{
    as_jitted, jit_value_and_grad_with_keys, tree_map2, value_and_grad, Tensor, Tree,
};

// ANCHOR: model
/// Dense(64) -> relu -> Dropout(0.2) -> Dense(1).
struct Regressor;

impl Module for Regressor {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let h = s.child(Dense::new(64))?.call(x)?.relu();
        let h = s.child(Dropout::new(0.2))?.call(h)?;
        s.child(Dense::new(1))?.call(h)
    }
}

/// The loss of a batch, with the dropout key of this step.
fn loss(params: &Tree, batch: &Tree, keys: &[Key]) -> flaxen::Result<Tensor> {
    let variables = Variables::new().with("params", params.clone());
    let rngs = Rngs::none().with("dropout", keys[0].clone());
    let pred = Regressor.apply(&variables, batch.tensor("x")?.clone(), rngs)?;
    Ok(pred.sub(batch.tensor("y")?)?.square().mean_all())
}
// ANCHOR_END: model

fn main() -> Result<()> {
    let [params_key, data_key, dropout_key] = random::split(random::key(0), 3)?.into_array()?;
    // y = sum of sin(x): a smooth target to fit.
    let x = Tensor::from_array(random::uniform(data_key, &[256, 4])?);
    let x = &(&x * 6.0) - 3.0;
    let y = x.sin().sum(&[-1], true)?;
    let batch = Tree::new().with("x", x.clone()).with("y", y);
    let mut params = Regressor.init(params_key, x)?.params();

    // ANCHOR: step
    // Traced on the first call, replayed afterwards; `keys` are arguments,
    // so each call draws its own masks from them.
    let mut step = jit_value_and_grad_with_keys(loss);
    for t in 0..300u32 {
        let keys = [random::fold_in(dropout_key.clone(), t)];
        let (l, grads) = step.call_with_keys(&params, &batch, &keys)?;
        if t % 50 == 0 {
            println!("step {t:3}  loss {:.6}", l.item()?);
        }
        params = tree_map2(&params, &grads, |p, g| Ok(p - &(g * 0.05)))?;
    }
    println!("compiled: {}", step.is_compiled());
    // ANCHOR_END: step

    // ANCHOR: same
    // The replay gives `jax.jit`'s numbers: those of the eager step run
    // as one compiled computation (`as_jitted`), bit for bit.
    let keys = [random::fold_in(dropout_key, 1000)];
    let (compiled, g1) = step.call_with_keys(&params, &batch, &keys)?;
    let (eager, g2) = as_jitted(|| value_and_grad(|p| loss(p, &batch, &keys), &params))?;
    assert_eq!(compiled.item()?.to_bits(), eager.item()?.to_bits());
    for (a, b) in g1.leaves().iter().zip(g2.leaves()) {
        assert_eq!(a.to_vec(), b.to_vec());
    }
    println!("compiled == eager: loss {:.6}", compiled.item()?);
    // ANCHOR_END: same
    Ok(())
}
