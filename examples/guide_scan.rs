//! The Flax randomness guide, section "Lifted transforms / nn.scan": three
//! residual blocks as one scanned layer, with and without splitting the
//! `params` stream (the notebook ran with `flax_fix_rng_separator` on).
//!
//! Run: `cargo run --release --example guide_scan`

use flaxen::core::{Result, Rngs, Scope};
use flaxen::nn::{relu, Dense, Module, Scan};
use flaxen::random;
use flaxen::tensor::Tensor;

pub struct ResidualMLPBlock;

impl Module for ResidualMLPBlock {
    type Input = (Tensor, ());
    type Output = (Tensor, ());

    fn call(&self, s: &Scope<'_>, (x, _): (Tensor, ())) -> Result<(Tensor, ())> {
        let h = s.call(Dense::new(2), x.clone())?;
        let h = relu(&h);
        Ok((x.add(&h)?, ())) // return an empty carry
    }
}

pub fn main() -> Result<()> {
    let x = Tensor::ones(&[3, 2]);
    let rngs = || Rngs::from(random::key(0)).fix_separator(true);
    for split in [true, false] {
        let scan_mlp = Scan::new(ResidualMLPBlock)
            .variable_axes("params", 0)
            .variable_broadcast(false)
            .split_rngs("params", split)
            .length(3);
        // pass in an empty carry
        println!("{}\n", scan_mlp.init(rngs(), (x.clone(), ()))?.pretty());
    }
    Ok(())
}
