//! The Flax randomness guide, section "Using self.param and
//! self.variable": which stream seed, path and call count each initial
//! value comes from.
//!
//! Run: `cargo run --release --example guide_param_variable`

use flaxen::core::{Result, Rngs, Scope};
use flaxen::init::Initializer;
use flaxen::nn::{Dense, Module};
use flaxen::random;
use flaxen::tensor::Tensor;

/// `jax.random.normal` as an initializer (`kernel_init=jax.random.normal`).
fn normal() -> Initializer {
    Initializer::from_fn("normal", random::normal)
}

pub struct Model;

impl Module for Model {
    type Input = Tensor;
    type Output = Tensor;

    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        // kernel will use 'params' seed, initial data will include 'Dense_0', call count 1
        let x = s.call(Dense::new(2).kernel_init(normal()).use_bias(false), x)?;
        // model_param will use 'params' seed, call count 1
        let model_param = s.param("model_param", random::normal, x.shape())?;
        // model_variable1 will use 'params' seed, call count 2
        let model_variable1 = s.variable("other_collection", "model_variable1", || {
            Ok(Tensor::from_array(random::normal(
                s.make_rng("params")?,
                x.shape(),
            )?))
        })?;
        // model_variable2 will use 'other' seed, call count 1
        let model_variable2 = s.variable("other_collection", "model_variable2", || {
            Ok(Tensor::from_array(random::normal(
                s.make_rng("other")?,
                x.shape(),
            )?))
        })?;
        let _ = (
            model_param,
            model_variable1.value(),
            model_variable2.value(),
        );
        // kernel will use 'params' seed, initial data will include 'Dense_1', call count 1
        // bias will use 'params' seed, initial data will include 'Dense_1', call count 2
        s.call(Dense::new(2).kernel_init(normal()).bias_init(normal()), x)
    }
}

pub fn main() -> Result<()> {
    let model = Model;
    let variables = model.init(
        Rngs::from([("params", random::key(0)), ("other", random::key(1))]),
        Tensor::ones(&[2, 2]),
    )?;
    for path in [
        "params/Dense_0/kernel",
        "params/model_param",
        "other_collection/model_variable1",
        "other_collection/model_variable2",
        "params/Dense_1/kernel",
        "params/Dense_1/bias",
    ] {
        println!("{}", variables.tensor(path).expect("created by init"));
    }
    Ok(())
}
