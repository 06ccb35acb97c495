//! The Flax randomness guide, section "Sharp edge - unintentionally
//! generating the same values": without Flax's separator flag, the paths
//! ("ab", "cdef") and ("abc", "def") hash alike, so two differently named
//! leaves draw the same number.
//!
//! Run: `cargo run --release --example guide_sharp_edge`

use flaxen::core::rng_hash::path_hash;
use flaxen::core::{Result, Rngs, Scope, Variables};
use flaxen::nn::Module;
use flaxen::random;

pub struct Leaf;

impl Module for Leaf {
    type Input = i32;
    type Output = i32;
    fn call(&self, s: &Scope<'_>, x: i32) -> Result<i32> {
        Ok(x + random::randint(s.make_rng("rng")?, &[], 0, 100)?[[]])
    }
}

pub struct Node {
    leaf_name: &'static str,
}

impl Module for Node {
    type Input = i32;
    type Output = i32;
    fn call(&self, s: &Scope<'_>, x: i32) -> Result<i32> {
        s.call_named(self.leaf_name, Leaf, x)
    }
}

pub struct Model;

impl Module for Model {
    type Input = i32;
    type Output = (i32, i32);
    fn call(&self, s: &Scope<'_>, x: i32) -> Result<(i32, i32)> {
        Ok((
            s.call_named("ab", Node { leaf_name: "cdef" }, x)?,
            s.call_named("abc", Node { leaf_name: "def" }, x)?,
        ))
    }
}

/// A boolean as JAX prints a scalar bool array.
fn jax_bool(b: bool) -> String {
    format!("Array({}, dtype=bool)", if b { "True" } else { "False" })
}

pub fn main() -> Result<()> {
    let rngs = || Rngs::none().with("rng", random::key(33));
    let (out1, out2) = Model.apply(&Variables::new(), 0, rngs())?;
    // same output, despite having different submodule names
    println!("{}", jax_bool(out1 == out2));

    for data in [
        &["A".into(), "B".into(), "C".into(), 1u64.into()][..],
        &["AB".into(), "C".into(), 1u64.into()][..],
        &["A".into(), "BC".into(), 1u64.into()][..],
        &["ABC".into(), 1u64.into()][..],
    ] {
        println!("{}", path_hash(data, false));
    }

    // flax.config.update('flax_fix_rng_separator', True), for this call only
    // (flaxen::core::set_flax_fix_rng_separator sets the process default).
    let (out1, out2) = Model.apply(&Variables::new(), 0, rngs().fix_separator(true))?;
    println!("{}", jax_bool(out1 == out2)); // different output
    Ok(())
}
