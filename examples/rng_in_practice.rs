//! The book's chapter "RNG streams in practice": which key a model needs
//! when, where dropout's randomness comes from, and how a training loop
//! gives every step a fresh, reproducible dropout key with `fold_in` (as
//! `examples/train_digits.rs` does). Prints dropout masks for several keys,
//! the error of a missing `dropout` key, the keys and losses of a short
//! training run on the shipped digits, and checks of what stays the same
//! between calls.
//!
//! Run: `cargo run --release --example rng_in_practice`

use flaxen::core::{Result, Rngs, Scope, Variables};
use flaxen::data::{digits, Batches};
use flaxen::nn::{Dense, Dropout, Module};
use flaxen::optim::{adam, losses, GradientTransformation};
use flaxen::random::{self, Key};
use flaxen::tensor::{value_and_grad, Tensor, Tree};
use ndarray::{s, Array1, Array2};

// ANCHOR: masks
/// Two dropout layers on the same input, returned side by side, so that
/// their masks can be seen.
pub struct TwoDropouts;

impl Module for TwoDropouts {
    type Input = Tensor;
    type Output = (Tensor, Tensor);

    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<(Tensor, Tensor)> {
        let a = s.call(Dropout::new(0.5), x.clone())?;
        let b = s.call(Dropout::new(0.5), x)?;
        Ok((a, b))
    }
}

fn dropout_masks() -> Result<()> {
    let x = Tensor::ones(&[8]);
    let none = Variables::new(); // dropout has no parameters
    let rngs = |key: &Key| Rngs::from([("dropout", random::clone(key))]);
    let key = random::key(42);

    let (a, b) = TwoDropouts.apply(&none, x.clone(), rngs(&key))?;
    println!("{:<20} Dropout_0 {a}  Dropout_1 {b}", "key(42)");
    // The same key again: the same masks (every apply starts counting anew).
    let (again, _) = TwoDropouts.apply(&none, x.clone(), rngs(&key))?;
    println!("{:<20} Dropout_0 {again}", "key(42) again");
    // Another key: other masks.
    let other = random::fold_in(random::clone(&key), 1);
    let (a, b) = TwoDropouts.apply(&none, x.clone(), rngs(&other))?;
    println!("{:<20} Dropout_0 {a}  Dropout_1 {b}", "fold_in(key(42), 1)");
    // No `dropout` key (and no `params` key to fall back on): an error.
    if let Err(e) = TwoDropouts.apply(&none, x, ()) {
        println!("without a key: {e}");
    }
    Ok(())
}
// ANCHOR_END: masks

// ANCHOR: model
/// Dense(64) → relu → Dropout(0.5) → Dense(10): a digits classifier whose
/// dropout is active in training.
pub struct Classifier {
    /// Dropout is active (and needs a `dropout` key).
    pub train: bool,
}

impl Module for Classifier {
    type Input = Tensor;
    type Output = Tensor;

    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let x = s.call(Dense::new(64), x)?.relu();
        let x = s.call(Dropout::new(0.5).deterministic(!self.train), x)?;
        s.call(Dense::new(10), x)
    }
}

/// The mean cross-entropy of a batch in training mode, with its dropout
/// key, and its gradient with respect to the parameters.
pub fn loss_and_grads(
    params: &Tree,
    x: &Tensor,
    y: &Array1<i32>,
    dropout_key: Key,
) -> Result<(Tensor, Tree)> {
    let labels = y.clone().into_dyn();
    value_and_grad(
        |p| {
            let variables = Variables::new().with("params", p.clone());
            let rngs = Rngs::from([("dropout", dropout_key)]);
            let logits = Classifier { train: true }.apply(&variables, x.clone(), rngs)?;
            let loss = losses::softmax_cross_entropy_with_integer_labels(&logits, &labels)?;
            Ok(loss.mean_all())
        },
        params,
    )
}
// ANCHOR_END: model

/// Bit-for-bit equality of two tensors.
fn same(a: &Tensor, b: &Tensor) -> bool {
    let bits = |t: &Tensor| t.to_vec().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    a.shape() == b.shape() && bits(a) == bits(b)
}

fn training() -> Result<()> {
    let data = digits::load()?;
    let x: Array2<f32> = data.images_f32().slice(s![..1000, ..]).to_owned();
    let y: Array1<i32> = data.labels.slice(s![..1000]).to_owned();

    // ANCHOR: loop
    // One root key, split once into a key per purpose.
    let [params_key, dropout_key, shuffle_key] = random::split_n(random::key(0));

    // `init` draws from the `params` stream only (dropout is off).
    let first = Tensor::from_array(x.slice(s![..1, ..]).to_owned());
    let mut params = Classifier { train: false }
        .init(params_key, first)?
        .params();
    let tx = adam(1e-3);
    let mut opt_state = tx.init(&params)?;

    let mut step = 0u32;
    for epoch in 0..2u32 {
        // A fresh permutation per epoch...
        let order_key = random::fold_in(random::clone(&shuffle_key), epoch);
        for batch in Batches::shuffled(x.view(), y.view(), 250, order_key)? {
            // ...and a fresh dropout key per step: fold the step number in.
            let key = random::fold_in(random::clone(&dropout_key), step);
            let [k0, k1] = random::key_data(&key);
            let batch_x = Tensor::from_array(batch.x);
            let (loss, grads) = loss_and_grads(&params, &batch_x, &batch.y, key)?;
            (params, opt_state) = tx.apply_gradients(&grads, &opt_state, &params)?;
            println!(
                "epoch {epoch} step {step}  dropout key [{k0:>10} {k1:>10}]  loss {:.6}",
                loss.item()?
            );
            step += 1;
        }
    }
    // ANCHOR_END: loop

    // ANCHOR: same
    let batch_x = Tensor::from_array(x.slice(s![..250, ..]).to_owned());
    let batch_y = y.slice(s![..250]).to_owned();
    let key_of = |t: u32| random::fold_in(random::clone(&dropout_key), t);

    // Step 3's key is fold_in(dropout_key, 3) whenever it is computed:
    // the same key, the same masks, the same loss and gradients.
    let (l1, g1) = loss_and_grads(&params, &batch_x, &batch_y, key_of(3))?;
    let (l2, g2) = loss_and_grads(&params, &batch_x, &batch_y, key_of(3))?;
    println!(
        "same key, same loss and gradients: {}",
        same(&l1, &l2) && g1 == g2
    );
    // Another step's key drops other units out.
    let (l3, _) = loss_and_grads(&params, &batch_x, &batch_y, key_of(4))?;
    println!(
        "step 3's key vs step 4's: loss {:.6} vs {:.6}",
        l1.item()?,
        l3.item()?
    );

    // Evaluation: dropout is off, no key is needed, and every call agrees.
    let variables = Variables::new().with("params", params);
    let eval = Classifier { train: false };
    let e1 = eval.apply(&variables, batch_x.clone(), ())?;
    let e2 = eval.apply(&variables, batch_x, ())?;
    println!(
        "evaluation without a key, twice the same: {}",
        same(&e1, &e2)
    );
    // ANCHOR_END: same
    Ok(())
}

// ANCHOR: split_chain
/// The Flax guide's way, a chain of splits: each step splits the running
/// key into the step's key and the next running key. Fresh keys too, but
/// step `t`'s key can only be had by replaying the `t` splits before it.
fn split_chain(mut key: Key, steps: usize) -> Vec<Key> {
    let mut keys = Vec::with_capacity(steps);
    for _ in 0..steps {
        let [step_key, next] = random::split_n(key);
        keys.push(step_key);
        key = next;
    }
    keys
}

/// The first three step keys of both schemes, from the same dropout key.
fn compare_schemes(dropout_key: &Key) {
    let chain = split_chain(random::clone(dropout_key), 3);
    for (t, key) in chain.iter().enumerate() {
        let folded = random::fold_in(random::clone(dropout_key), t as u32);
        println!(
            "step {t}: split chain {:?}  fold_in {:?}",
            random::key_data(key),
            random::key_data(&folded)
        );
    }
}
// ANCHOR_END: split_chain

pub fn main() -> Result<()> {
    dropout_masks()?;
    println!();
    training()?;
    println!();
    let [_, dropout_key, _] = random::split_n(random::key(0));
    compare_schemes(&dropout_key);
    Ok(())
}
