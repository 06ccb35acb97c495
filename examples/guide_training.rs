//! The Flax randomness guide, section "Managing RNG streams inside a
//! training loop": `param`, `variable`, two `Dropout` layers and `Dense`,
//! trained for ten steps with `jax.grad` and a plain SGD update.
//!
//! Run: `cargo run --release --example guide_training`

use flaxen::core::{grad, Result, Rngs, Scope, Variables};
use flaxen::nn::{Dense, Dropout, Module};
use flaxen::optim::Sgd;
use flaxen::random::{self, Key};
use flaxen::tensor::Tensor;

pub struct SubModule;

impl Module for SubModule {
    type Input = (Tensor, bool);
    type Output = Tensor;

    fn call(&self, s: &Scope<'_>, (x, train): (Tensor, bool)) -> Result<Tensor> {
        // variables created using `param` will use `make_rng("params")`
        let kernel = s.param("submodule_kernel", random::normal, x.shape())?;
        let x = x.add(&kernel)?;
        // `Dropout` will use make_rng("dropout")
        let x = s.call(Dropout::new(0.2).deterministic(!train), x)?;
        // `Dense` will use make_rng("params")
        s.call(Dense::new(3), x)
    }
}

pub struct Model;

impl Module for Model {
    type Input = (Tensor, bool);
    type Output = Tensor;

    fn call(&self, s: &Scope<'_>, (x, train): (Tensor, bool)) -> Result<Tensor> {
        // make kernel use `make_rng("other")`
        let kernel = s.variable("other_collection", "module_kernel", || {
            Ok(Tensor::from_array(random::normal(
                s.make_rng("other")?,
                x.shape(),
            )?))
        })?;
        let x = x.add(&kernel.value())?;
        let x = s.call(SubModule, (x, train))?;
        // `Dropout` will use make_rng("dropout")
        let x = s.call(Dropout::new(0.2).deterministic(!train), x)?;
        // `Dense` will use make_rng("params")
        s.call(Dense::new(2), x)
    }
}

pub fn main() -> Result<()> {
    let [params_rng, other_rng, mut train_rng] = random::split_n(random::key(0));
    let init_rngs = Rngs::from([("params", params_rng), ("other", other_rng)]);

    let x = Tensor::ones(&[1, 3]);
    let y = Tensor::ones(&[1, 2]);

    let module = Model;
    let mut variables = module.init(init_rngs, (x.clone(), false))?;

    let update = |variables: &Variables, rng: Key| -> Result<(Variables, Key)> {
        // only 'dropout' is needed during training: split it off, and keep
        // the other key for the next step
        let [dropout_rng, next_rng] = random::split_n(rng);
        let other = variables
            .collection("other_collection")
            .cloned()
            .unwrap_or_default();
        let loss = |params: &flaxen::tensor::Tree| {
            let out = module.apply(
                &Variables::new()
                    .with("params", params.clone())
                    .with("other_collection", other.clone()),
                (x.clone(), true),
                Rngs::none().with("dropout", random::clone(&dropout_rng)),
            )?;
            Ok(y.sub(&out)?.square().mean_all())
        };
        let grads = grad(loss, &variables.params())?;
        let params = Sgd::new(1e-3).update(&variables.params(), &grads)?;
        Ok((
            Variables::new()
                .with("params", params)
                .with("other_collection", other),
            next_rng,
        ))
    };

    for _ in 0..10 {
        (variables, train_rng) = update(&variables, train_rng)?;
        let out = module.apply(&variables, (x.clone(), false), ())?;
        println!("{}", y.sub(&out)?.square().mean_all());
    }
    Ok(())
}
