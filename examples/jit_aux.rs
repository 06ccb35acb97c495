//! A compiled training step that returns more than the loss: Flax's
//! `jax.value_and_grad(loss_fn, has_aux=True)` inside `jax.jit`, where
//! `loss_fn` also returns the logits, and the training accuracy is
//! computed from them outside the step (no second forward pass).
//!
//! Run: `cargo run --release --example jit_aux`

use flaxen::core::{Result, Rngs, Scope, Variables};
use flaxen::nn::{Dense, Dropout, Module};
use flaxen::optim::{adam, losses, GradientTransformation};
use flaxen::random::{self, Key};
use flaxen::tensor::{
    as_jitted, jit_value_and_grad_with_aux, value_and_grad_with_aux, Array, Tensor, Tree,
};
use ndarray::{Array1, Axis};

/// Dense(32) → relu → Dropout(0.1) → Dense(2).
struct Classifier;

impl Module for Classifier {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let x = s.call(Dense::new(32), x)?.relu();
        let x = s.call(Dropout::new(0.1), x)?;
        s.call(Dense::new(2), x)
    }
}

// ANCHOR: loss_fn
/// The mean cross-entropy of a batch, and the logits as an auxiliary
/// output: `return loss, logits` in Flax's `loss_fn`.
fn loss_fn(params: &Tree, batch: &Tree, keys: &[Key]) -> flaxen::Result<(Tensor, Tree)> {
    let variables = Variables::new().with("params", params.clone());
    let rngs = Rngs::none().with("dropout", keys[0].clone());
    let logits = Classifier.apply(&variables, batch.tensor("x")?.clone(), rngs)?;
    let loss = losses::softmax_cross_entropy_with_integer_labels(&logits, batch.array("y")?)?;
    Ok((loss.mean_all(), Tree::new().with("logits", logits)))
}
// ANCHOR_END: loss_fn

/// Two overlapping clouds of 2-D points, labels 0 and 1.
fn data(key: Key, n: usize) -> flaxen::Result<(Tensor, Array1<i32>)> {
    let noise = random::normal(key, &[n, 2])?;
    let labels = Array1::from_shape_fn(n, |i| (i % 2) as i32);
    let mut x = noise.into_dimensionality::<ndarray::Ix2>().expect("2-D");
    for (mut row, &label) in x.axis_iter_mut(Axis(0)).zip(&labels) {
        row += if label == 1 { 1.5 } else { -1.5 };
    }
    Ok((Tensor::from_array(x), labels))
}

fn main() -> flaxen::Result<()> {
    let [k_data, k_init, k_drop] = random::split(random::key(0), 3)?.into_array()?;
    let (x, y) = data(k_data, 256)?;
    let batch = Tree::new()
        .with("x", x.clone())
        .with("y", Array::from(y.clone().into_dyn()));
    let mut params = Classifier.init(k_init, x)?.params();
    let optimizer = adam(0.05);
    let mut state = optimizer.init(&params)?;

    // ANCHOR: step
    let mut step = jit_value_and_grad_with_aux(loss_fn);
    for t in 0..20 {
        let keys = [random::fold_in(k_drop.clone(), t)];
        let ((loss, aux), grads) = step.call_with_aux(&params, &batch, &keys)?;
        if t == 0 {
            // The compiled step gives `jax.jit`'s numbers: the eager step's
            // run as one compiled computation.
            let ((eager, _), _) =
                as_jitted(|| value_and_grad_with_aux(|p| loss_fn(p, &batch, &keys), &params))?;
            assert_eq!(loss.item()?.to_bits(), eager.item()?.to_bits());
        }
        // Metrics from the auxiliary logits (with the step's dropout).
        let predicted = aux.tensor("logits")?.argmax(-1)?;
        let correct = predicted.iter().zip(&y).filter(|(p, l)| p == l).count();
        // ANCHOR_END: step
        if t % 5 == 4 {
            println!(
                "step {:2}  loss {:.4}  training accuracy {:.3}",
                t + 1,
                loss.item()?,
                correct as f64 / y.len() as f64
            );
        }
        let (updates, next) = optimizer.update(&grads, &state, Some(&params))?;
        params = flaxen::optim::apply_updates(&params, &updates)?;
        state = next;
    }
    println!("compiled: {}", step.is_compiled());
    Ok(())
}
