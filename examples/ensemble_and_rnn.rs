//! The book's chapter "Use cases: an ensemble and an RNN": lifted
//! transforms put to work on the shipped digits. An ensemble of five MLPs
//! with `Vmap` (one parameter set and one dropout key per member, one
//! training step for all), and an LSTM that reads each 8×8 image as a
//! sequence of 8 rows with `RNN` — and the same LSTM written with `Scan`,
//! run on the `RNN`'s parameters. Prints the parameter shapes and the test
//! accuracies.
//!
//! Run: `cargo run --release --example ensemble_and_rnn`

use flaxen::core::{Result, Rngs, Scope, Variables};
use flaxen::data::{digits, Batches};
use flaxen::nn::{Dense, Dropout, LSTMCell, Module, Scan, Vmap, RNN};
use flaxen::optim::{adam, losses, GradientTransformation};
use flaxen::random::{self, Key};
use flaxen::tensor::{value_and_grad, Tensor, Tree};
use ndarray::{s, Array1, Array2, Axis};

/// Ensemble members.
pub const MEMBERS: usize = 5;
/// The first `TRAIN` images train, the rest test.
pub const TRAIN: usize = 1500;
/// Training epochs of each model.
pub const EPOCHS: u32 = 30;

// ANCHOR: ensemble
/// One member: Dense(32) → relu → Dropout(0.2) → Dense(10).
pub struct Member {
    /// Dropout is active.
    pub train: bool,
}

impl Module for Member {
    type Input = Tensor;
    type Output = Tensor;

    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let x = s.call(Dense::new(32), x)?.relu();
        let x = s.call(Dropout::new(0.2).deterministic(!self.train), x)?;
        s.call(Dense::new(10), x)
    }
}

/// `MEMBERS` members, each with its own parameters, all reading the same
/// batch: Flax's `nn.vmap(Member, in_axes=None, axis_size=5,
/// variable_axes={'params': 0}, split_rngs={'params': True, 'dropout':
/// True})`. The logits come back stacked: `[members, batch, 10]`.
pub struct Ensemble {
    /// Dropout is active.
    pub train: bool,
}

impl Module for Ensemble {
    type Input = Tensor;
    type Output = Tensor;

    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let members = Vmap::new(Member { train: self.train })
            .in_axes(None) // every member sees the whole batch
            .axis_size(MEMBERS)
            .variable_axes("params", 0) // parameters stacked on axis 0
            .split_rngs("params", true) // each member initialized differently
            .split_rngs("dropout", true); // and dropping out differently
        s.call_named("members", members, x)
    }
}
// ANCHOR_END: ensemble

// ANCHOR: rnn
/// Reads an image as a sequence: 8 time steps of one 8-pixel row each, an
/// LSTM over them, and a Dense layer on the last hidden state.
pub struct RowReader;

impl Module for RowReader {
    type Input = Tensor;
    type Output = Tensor;

    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let rows = x.reshape(&[-1, 8, 8])?; // [batch, time, features]
        let ((_c, h), _ys) = s.call(RNN::new(LSTMCell::new(32)), rows.into())?;
        s.call(Dense::new(10), h)
    }
}
// ANCHOR_END: rnn

// ANCHOR: scan
/// The LSTM of `RowReader` spelled out with `Scan`, as Flax's `nn.RNN`
/// does it: one copy of the cell's parameters broadcast to every step, no
/// key split per step, time on axis 1 of the inputs and of the outputs.
/// Returns the final carry `(c, h)` and the outputs `[batch, time, 32]`.
pub struct ScannedLstm;

impl Module for ScannedLstm {
    type Input = Tensor;
    type Output = ((Tensor, Tensor), Tensor);

    fn call(&self, s: &Scope<'_>, rows: Tensor) -> Result<Self::Output> {
        let cell = LSTMCell::new(32);
        let step_shape = [rows.shape()[0], rows.shape()[2]];
        let carry = cell.initialize_carry(random::key(0), &step_shape)?;
        let scan = Scan::new(cell)
            .variable_broadcast("params")
            .split_rngs("params", false)
            .in_axes(Some(1))
            .out_axes(1);
        // Named "cell", as in `RNN`, so both read `params/cell/...`.
        s.call_named("cell", scan, (carry, rows))
    }
}
// ANCHOR_END: scan

/// Trains `model` with Adam for `epochs` epochs of batches of 100, with a
/// dropout key per step; `loss` maps logits and labels to the loss.
fn train<M: Module<Input = Tensor, Output = Tensor>>(
    model: impl Fn(bool) -> M,
    loss: impl Fn(&Tensor, &Array1<i32>) -> Result<Tensor>,
    x: &Array2<f32>,
    y: &Array1<i32>,
    epochs: u32,
    key: Key,
) -> Result<Tree> {
    let [params_key, dropout_key, shuffle_key] = random::split_n(key);
    let first = Tensor::from_array(x.slice(s![..1, ..]).to_owned());
    let mut params = model(false).init(params_key, first)?.params();
    let tx = adam(3e-3);
    let mut state = tx.init(&params)?;
    let mut step = 0;
    for epoch in 0..epochs {
        let order = random::fold_in(random::clone(&shuffle_key), epoch);
        for batch in Batches::shuffled(x.view(), y.view(), 100, order)? {
            let key = random::fold_in(random::clone(&dropout_key), step);
            let bx = Tensor::from_array(batch.x);
            let (_, grads) = value_and_grad(
                |p| {
                    let v = Variables::new().with("params", p.clone());
                    let rngs = Rngs::from([("dropout", random::clone(&key))]);
                    loss(&model(true).apply(&v, bx.clone(), rngs)?, &batch.y)
                },
                &params,
            )?;
            (params, state) = tx.apply_gradients(&grads, &state, &params)?;
            step += 1;
        }
    }
    Ok(params)
}

/// The share of predictions equal to the labels.
fn accuracy(predicted: &ndarray::ArrayD<i32>, y: &Array1<i32>) -> f64 {
    let correct = predicted.iter().zip(y).filter(|(p, l)| p == l).count();
    correct as f64 / y.len() as f64
}

/// Prints every parameter's path and shape.
fn print_shapes(params: &Tree) {
    for (path, t) in params.paths() {
        println!("  {path:<28} {:?}", t.shape());
    }
}

pub fn main() -> Result<()> {
    let data = digits::load()?;
    let images = data.images_f32();
    let (x_train, y_train) = (
        images.slice(s![..TRAIN, ..]).to_owned(),
        data.labels.slice(s![..TRAIN]).to_owned(),
    );
    let x_test = Tensor::from_array(images.slice(s![TRAIN.., ..]).to_owned());
    let y_test = data.labels.slice(s![TRAIN..]).to_owned();

    // ANCHOR: ensemble_train
    // Each member's own mean cross-entropy, summed over the members: the
    // members do not interact, each gets the gradient of its own loss.
    let ensemble_loss = |logits: &Tensor, y: &Array1<i32>| -> Result<Tensor> {
        let labels = y.view().insert_axis(Axis(0));
        let labels = labels.broadcast((MEMBERS, y.len())).expect("broadcast");
        let per_example = losses::softmax_cross_entropy_with_integer_labels(
            logits,
            &labels.to_owned().into_dyn(),
        )?;
        Ok(per_example.mean(&[1], false)?.sum_all())
    };
    let params = train(
        |train| Ensemble { train },
        ensemble_loss,
        &x_train,
        &y_train,
        EPOCHS,
        random::key(1),
    )?;
    println!("ensemble parameters:");
    print_shapes(&params);

    let v = Variables::new().with("params", params);
    let logits = Ensemble { train: false }.apply(&v, x_test.clone(), ())?;
    for m in 0..MEMBERS {
        let member = logits.index_axis(0, m)?.argmax(-1)?;
        println!(
            "  member {m}: test accuracy {:.4}",
            accuracy(&member, &y_test)
        );
    }
    // The ensemble's prediction: the members' probabilities averaged.
    let mean_probs = logits.softmax(-1)?.mean(&[0], false)?;
    let ensemble = mean_probs.argmax(-1)?;
    println!(
        "  ensemble: test accuracy {:.4}",
        accuracy(&ensemble, &y_test)
    );
    // ANCHOR_END: ensemble_train

    // ANCHOR: rnn_train
    let mean_loss = |logits: &Tensor, y: &Array1<i32>| -> Result<Tensor> {
        let l = losses::softmax_cross_entropy_with_integer_labels(logits, &y.clone().into_dyn())?;
        Ok(l.mean_all())
    };
    let params = train(
        |_| RowReader,
        mean_loss,
        &x_train,
        &y_train,
        EPOCHS,
        random::key(2),
    )?;
    println!("RNN parameters:");
    print_shapes(&params);
    let v = Variables::new().with("params", params);
    let predicted = RowReader.apply(&v, x_test.clone(), ())?.argmax(-1)?;
    println!("  RNN: test accuracy {:.4}", accuracy(&predicted, &y_test));
    // ANCHOR_END: rnn_train

    // ANCHOR: scan_check
    // The trained LSTM's parameters, run through `RNN` and through `Scan`.
    let rows = x_test.reshape(&[-1, 8, 8])?;
    let lstm = Variables::new().with("params", v.params().subtree("RNN_0").expect("trained"));
    let ((_, h_rnn), ys_rnn) = RNN::new(LSTMCell::new(32)).apply(&lstm, rows.clone().into(), ())?;
    let ((_, h_scan), ys_scan) = ScannedLstm.apply(&lstm, rows, ())?;
    let bits = |t: &Tensor| t.to_vec().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    println!(
        "Scan and RNN: outputs {:?}, identical: {}",
        ys_scan.shape(),
        bits(&ys_rnn) == bits(&ys_scan) && bits(&h_rnn) == bits(&h_scan)
    );
    // ANCHOR_END: scan_check
    Ok(())
}
