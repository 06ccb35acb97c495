//! A model trained in Flax, evaluated in Rust: the parameters of
//! `Dense(32) -> relu -> Dense(10)`, trained on the shipped digits by
//! tools/oracle/generate_checkpoints.py and saved with
//! `flax.serialization.to_bytes`, restored with `from_bytes` and run on the
//! 297 test images. Every line it prints is the one the Flax script printed
//! (examples/expected/load_flax_checkpoint.txt): the same predictions and
//! the same logits, bit for bit.
//!
//! Run: `cargo run --release --example load_flax_checkpoint`

use flaxen::core::{Result, Scope};
use flaxen::data::digits;
use flaxen::nn::{tabulate, Dense, Module};
use flaxen::random;
use flaxen::serialization::from_bytes;
use flaxen::tensor::{as_jitted, Tensor};
use ndarray::s;

/// The Flax model of the checkpoint, line for line:
/// `x = nn.relu(nn.Dense(32)(x)); return nn.Dense(10)(x)`.
struct Digits;

impl Module for Digits {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let x = s.call(Dense::new(32), x)?.relu();
        s.call(Dense::new(10), x)
    }

    // tabulate's inputs and outputs columns when it runs as a submodule
    // (the model's own row describes its input with `Shapes`).
    fn tabulate_input(&self, x: &Tensor) -> String {
        flaxen::nn::Shapes::shapes(x)
    }

    fn tabulate_output(&self, y: &Tensor) -> String {
        flaxen::nn::Shapes::shapes(y)
    }
}

/// The checkpoint ships with the repository (data/checkpoints/README.md).
const CHECKPOINT: &[u8] = include_bytes!("../data/checkpoints/digits_mlp.msgpack");
const TRAIN: usize = 1500;

fn main() -> flaxen::Result<()> {
    let data = digits::load()?;
    let x = data.images_f32();
    let x_test = Tensor::from_array(x.slice(s![TRAIN.., ..]).to_owned().into_dyn());
    let y_test = data.labels.slice(s![TRAIN..]).to_owned();

    // The model as `nn.tabulate` shows it: the same table as Flax's.
    let x0 = Tensor::from_array(x.slice(s![..1, ..]).to_owned().into_dyn());
    println!("{}", tabulate(&Digits, random::key(0), x0.clone())?);

    // The target says what the checkpoint must hold: the model's variables
    // at init (their values are replaced, their shapes are checked).
    let target = Digits.init(random::key(0), x0)?;
    let variables = from_bytes(&target, CHECKPOINT)?;
    let shape = |p: &str| -> flaxen::Result<String> {
        let dims: Vec<String> = variables
            .lookup(p)?
            .as_tensor()
            .map(|t| t.shape().iter().map(|d| d.to_string()).collect())
            .unwrap_or_default();
        Ok(format!("({})", dims.join(", ")))
    };
    println!(
        "loaded data/checkpoints/digits_mlp.msgpack: Dense_0/kernel {}, Dense_1/kernel {}",
        shape("params/Dense_0/kernel")?,
        shape("params/Dense_1/kernel")?
    );

    // Flax evaluated under jax.jit; as_jitted computes as XLA does.
    let logits = as_jitted(|| Digits.apply(&variables, x_test, ()))?;
    let predicted = logits.argmax(-1)?;
    let correct = predicted
        .iter()
        .zip(y_test.iter())
        .filter(|(p, t)| p == t)
        .count();
    println!(
        "test accuracy: {:.4} on {} images",
        correct as f64 / y_test.len() as f64,
        y_test.len()
    );
    let head = |v: &mut dyn Iterator<Item = i32>| -> String {
        v.take(10)
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join(" ")
    };
    println!(
        "first 10 predictions: {}",
        head(&mut predicted.iter().copied())
    );
    println!(
        "first 10 labels:      {}",
        head(&mut y_test.iter().copied())
    );
    let row: Vec<String> = logits.to_vec()[..10]
        .iter()
        .map(|v| format!("{v:?}"))
        .collect();
    println!("logits[0]: [{}]", row.join(", "));
    Ok(())
}
