//! The Flax guide "Randomness and PRNGs in Flax", from "Receiving,
//! manipulating and creating PRNG keys" through the "Sharp edge", run in
//! Rust: each section is its own example (`guide_*`), run here in the
//! guide's order. Every number printed is the guide's.
//!
//! Run: `cargo run --release --example randomness_guide`

#[path = "guide_make_rng.rs"]
mod make_rng;

#[path = "prng_basics.rs"]
mod prng_basics;

#[path = "guide_param_variable.rs"]
mod param_variable;

#[path = "guide_training.rs"]
mod training;

#[path = "guide_sharp_edge.rs"]
mod sharp_edge;

use flaxen::core::Result;

fn main() -> Result<()> {
    println!("# Receiving, manipulating and creating PRNG keys with Module.make_rng");
    println!("# and Sub-Modules and self.make_rng\n");
    make_rng::main()?;
    println!("\n# How self.make_rng works under the hood (by hand)\n");
    prng_basics::main()?;
    println!("\n# Using self.param and self.variable\n");
    param_variable::main()?;
    println!("\n# Managing RNG streams inside a training loop\n");
    training::main()?;
    println!("\n# Sharp edge: unintentionally generating the same values\n");
    sharp_edge::main()
}
