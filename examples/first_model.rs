//! The book's first chapter, "Install and a first model": a two-layer MLP
//! written as a `Module`, its parameters created by `init` from a key, and
//! `apply` run on them. Prints the parameters' shapes and the output; the
//! numbers are those of the same model in Flax (see the chapter).
//!
//! Run: `cargo run --release --example first_model`

use flaxen::core::{Result, Scope, Variables};
use flaxen::nn::{Dense, Module};
use flaxen::random;
use flaxen::tensor::{tree_map, Tensor};

// ANCHOR: model
/// Dense(hidden) → relu → Dense(outputs). The struct holds the
/// hyperparameters (Flax's dataclass fields); `call` is `__call__`.
pub struct Mlp {
    /// Width of the hidden layer.
    pub hidden: usize,
    /// Number of outputs.
    pub outputs: usize,
}

impl Module for Mlp {
    type Input = Tensor;
    type Output = Tensor;

    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let x = s.call(Dense::new(self.hidden), x)?.relu();
        s.call(Dense::new(self.outputs), x)
    }
}
// ANCHOR_END: model

pub fn main() -> Result<()> {
    // ANCHOR: init
    let model = Mlp {
        hidden: 16,
        outputs: 3,
    };
    let [params_key, data_key] = random::split_n(random::key(0));
    // A batch of 4 inputs of 8 features.
    let x = Tensor::from_array(random::normal(data_key, &[4, 8])?);

    // `init` runs `call` once on an example input, creating every
    // parameter from the key; it returns them as `Variables`.
    let variables = model.init(params_key, x.clone())?;
    for (path, tensor) in variables.flatten() {
        println!("{path:<22} {:?}", tensor.shape());
    }
    // ANCHOR_END: init

    // ANCHOR: apply
    // `apply` runs the model on given variables; it changes nothing.
    let y = model.apply(&variables, x.clone(), ())?;
    println!("output {:?}:\n{y}", y.shape());
    // ANCHOR_END: apply

    // ANCHOR: variables
    // Variables are plain values: read one by its path...
    let bias = variables.tensor("params/Dense_1/bias").expect("created");
    println!("params/Dense_1/bias = {bias}");
    // ...or build new ones: every parameter halved is another model, run
    // by the same code.
    let halved = tree_map(&variables.params(), |t| t * 0.5);
    let halved = Variables::new().with("params", halved);
    let y_halved = model.apply(&halved, x, ())?;
    println!(
        "halved parameters, first row: {}",
        y_halved.index_axis(0, 0)?
    );

    // The shapes are fixed at `init`: an input of another width is an
    // error naming the parameter and both shapes.
    let wrong = Tensor::ones(&[4, 5]);
    match model.apply(&variables, wrong, ()) {
        Ok(_) => unreachable!("a kernel of 8 rows cannot take 5 features"),
        Err(e) => println!("error: {e}"),
    }
    // ANCHOR_END: variables
    Ok(())
}
