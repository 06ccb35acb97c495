//! The Flax randomness guide, section "Lifted transforms / nn.vmap":
//! a batched `Dense`, and a model with a `variable`, with different
//! `variable_axes` and `split_rngs`. The guide's notebook ran these cells
//! after turning on `flax_fix_rng_separator`, so this example does too.
//!
//! Run: `cargo run --release --example guide_vmap`

use flaxen::core::{Result, Rngs, Scope};
use flaxen::nn::{Dense, Module, Vmap};
use flaxen::random;
use flaxen::tensor::Tensor;

pub struct Model;

impl Module for Model {
    type Input = Tensor;
    type Output = Tensor;

    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let x = s.call(Dense::new(2), x)?;
        let kernel = s.variable("other_collection", "kernel", || {
            Ok(Tensor::from_array(random::normal(
                s.make_rng("other")?,
                x.shape(),
            )?))
        })?;
        Ok(x.add(&kernel.value())?)
    }
}

pub fn main() -> Result<()> {
    let x = Tensor::ones(&[3, 2]);
    // flax.config.update('flax_fix_rng_separator', True), as in the notebook.
    let params = || Rngs::from(random::key(0)).fix_separator(true);
    let both =
        || Rngs::from([("params", random::key(0)), ("other", random::key(1))]).fix_separator(true);

    for (variable_axis, split) in [(None, false), (Some(0), false), (Some(0), true)] {
        let batch_dense = Vmap::new(Dense::new(2))
            .in_axes(Some(0))
            .out_axes(0)
            .variable_axes("params", variable_axis)
            .split_rngs("params", split);
        println!("{}\n", batch_dense.init(params(), x.clone())?.pretty());
    }

    for (other_axis, split_other) in [(Some(0), true), (Some(0), false), (None, false)] {
        let batch_model = Vmap::new(Model)
            .in_axes(Some(0))
            .out_axes(0)
            .variable_axes("params", Some(0))
            .variable_axes("other_collection", other_axis)
            .split_rngs("params", true)
            .split_rngs("other", split_other);
        println!("{}\n", batch_model.init(both(), x.clone())?.pretty());
    }
    Ok(())
}
