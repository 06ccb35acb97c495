//! Training a classifier on the shipped handwritten digits with the recipe
//! of the Flax + optax reference run (tools/oracle/train_digits.py). Every
//! test accuracy it prints is the reference's, and so are the first three
//! epochs' losses; later losses differ in their last digits (the first 17
//! steps are bit-exact; see tests/train_digits.rs for the one known cause).
//!
//! Run: `cargo run --release --example train_digits`

use flaxen::core::{Result, Rngs, Scope, Variables};
use flaxen::data::{digits, Batches};
use flaxen::nn::{Dense, Dropout, Module};
use flaxen::optim::{adamw, losses, warmup_cosine_decay_schedule, GradientTransformation};
use flaxen::random::{self, Key};
use flaxen::tensor::{
    as_jitted, jit_value_and_grad_with_keys, Array, JitValueAndGrad, Tensor, Tree,
};
use indicatif::{ProgressBar, ProgressStyle};
use ndarray::{s, Array1, Array2};
use std::cell::RefCell;

/// Dense(128) → relu → Dropout(0.2) → Dense(128) → relu → Dropout(0.2) →
/// Dense(10), as the Flax `Mlp` of the reference.
pub struct Mlp {
    /// Dropout is active (and needs a `dropout` key) in training.
    pub train: bool,
}

impl Module for Mlp {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let x = s.call(Dense::new(128), x)?.relu();
        let x = s.call(Dropout::new(0.2).deterministic(!self.train), x)?;
        let x = s.call(Dense::new(128), x)?.relu();
        let x = s.call(Dropout::new(0.2).deterministic(!self.train), x)?;
        s.call(Dense::new(10), x)
    }
}

/// The recipe's constants.
pub const EPOCHS: usize = 30;
/// Examples per step.
pub const BATCH: usize = 100;
/// The first `TRAIN` images train, the rest test.
pub const TRAIN: usize = 1500;

/// The reference's `loss_fn`: the mean cross-entropy of a batch (`x`, and
/// its int32 labels `y`) with dropout drawn from `keys[0]`, run with the
/// numbers of `jax.jit` (the reference's step is jitted).
pub fn loss(params: &Tree, batch: &Tree, keys: &[Key]) -> flaxen::Result<Tensor> {
    as_jitted(|| {
        let variables = Variables::new().with("params", params.clone());
        let rngs = Rngs::from([("dropout", keys[0].clone())]);
        let logits = Mlp { train: true }.apply(&variables, batch.tensor("x")?.clone(), rngs)?;
        // The labels by reference: an argument of the compiled step.
        let labels = batch.array("y")?;
        Ok(losses::softmax_cross_entropy_with_integer_labels(&logits, labels)?.mean_all())
    })
}

/// A batch as the compiled step's inputs: the images and their labels.
pub fn batch_inputs(x: Tensor, y: &Array1<i32>) -> Tree {
    Tree::new()
        .with("x", x)
        .with("y", Array::from(y.clone().into_dyn()))
}

/// The compiled step's type: [`loss`] under `jit_value_and_grad_with_keys`.
type Step = JitValueAndGrad<fn(&Tree, &Tree, &[Key]) -> flaxen::Result<Tensor>>;

thread_local! {
    /// Each thread's compiled step (traced on its first call, replayed
    /// after, as the reference's `jax.jit`-ed step).
    static STEP: RefCell<Step> = RefCell::new(jit_value_and_grad_with_keys(loss as _));
}

/// One training step: [`loss`] and its gradient (the reference's
/// `jax.jit(jax.value_and_grad(loss_fn))`), compiled: the first call
/// traces it, later calls replay the trace with the new parameters, batch,
/// labels and dropout key.
pub fn loss_and_grads(
    params: &Tree,
    x: Tensor,
    y: &Array1<i32>,
    dropout_key: Key,
) -> flaxen::Result<(Tensor, Tree)> {
    let batch = batch_inputs(x, y);
    STEP.with(|step| {
        step.borrow_mut()
            .call_with_keys(params, &batch, &[dropout_key])
    })
}

/// The share of `x`'s images whose predicted class is the label.
pub fn accuracy(params: &Tree, x: &Array2<f32>, y: &Array1<i32>) -> flaxen::Result<f64> {
    let variables = Variables::new().with("params", params.clone());
    let logits = Mlp { train: false }.apply(&variables, Tensor::from_array(x.clone()), ())?;
    let predicted = logits.argmax(-1)?;
    let correct = predicted.iter().zip(y).filter(|(p, l)| p == l).count();
    Ok(correct as f64 / y.len() as f64)
}

/// Python's `f"{v:.9g}"` for the losses printed (9 significant digits,
/// trailing zeros dropped).
pub fn format_g9(v: f32) -> String {
    let v = f64::from(v);
    let digits = format!("{:.*e}", 8, v);
    let (mantissa, exp) = digits.split_once('e').expect("scientific form");
    let exp: i32 = exp.parse().expect("exponent");
    if !(-4..9).contains(&exp) {
        let m = mantissa.trim_end_matches('0').trim_end_matches('.');
        return format!("{m}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
    }
    let decimals = (8 - exp).max(0) as usize;
    let fixed = format!("{v:.decimals$}");
    if fixed.contains('.') {
        fixed
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
    } else {
        fixed
    }
}

pub fn main() -> flaxen::Result<()> {
    let data = digits::load()?;
    let x = data.images_f32();
    let (x_train, y_train) = (
        x.slice(s![..TRAIN, ..]).to_owned(),
        data.labels.slice(s![..TRAIN]).to_owned(),
    );
    let (x_test, y_test) = (
        x.slice(s![TRAIN.., ..]).to_owned(),
        data.labels.slice(s![TRAIN..]).to_owned(),
    );
    let steps_per_epoch = TRAIN / BATCH;
    let total_steps = (EPOCHS * steps_per_epoch) as i32;

    let [params_key, dropout_key, shuffle_key] = random::split_n(random::key(0));
    let first = Tensor::from_array(x_train.slice(s![..1, ..]).to_owned());
    let mut params = Mlp { train: false }.init(params_key, first)?.params();
    let tx = adamw(
        warmup_cosine_decay_schedule(0.0, 3e-3, 50, total_steps, 1e-5),
        1e-4,
    );
    let mut opt_state = tx.init(&params)?;

    let bar = ProgressBar::new(total_steps as u64).with_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} steps  {msg}")
            .expect("a valid template"),
    );
    let mut step = 0u32;
    for epoch in 0..EPOCHS {
        let key = random::fold_in(random::clone(&shuffle_key), epoch as u32);
        let mut losses = Vec::with_capacity(steps_per_epoch);
        for batch in Batches::shuffled(x_train.view(), y_train.view(), BATCH, key)? {
            let key = random::fold_in(random::clone(&dropout_key), step);
            let (loss, grads) =
                loss_and_grads(&params, Tensor::from_array(batch.x), &batch.y, key)?;
            (params, opt_state) = tx.apply_gradients_owned(&grads, opt_state, params)?;
            losses.push(loss.item()?);
            step += 1;
            bar.inc(1);
        }
        // The epoch loss: summed in order, divided by the count, in f32.
        let mean = losses.iter().fold(0.0f32, |a, &l| a + l) / losses.len() as f32;
        let acc = accuracy(&params, &x_test, &y_test)?;
        bar.set_message(format!("epoch {epoch:02}"));
        bar.suspend(|| {
            println!(
                "epoch {epoch:02}  loss {}  test accuracy {acc:.4}",
                format_g9(mean)
            )
        });
    }
    bar.finish_and_clear();
    Ok(())
}
