//! The Flax randomness guide, sections "Receiving, manipulating and
//! creating PRNG keys with Module.make_rng" and "Sub-Modules and
//! self.make_rng", as flaxen modules.
//!
//! Run: `cargo run --release --example guide_make_rng`

use flaxen::core::{Result, Rngs, Scope};
use flaxen::nn::Module;
use flaxen::random;

pub struct RNGModule;

impl Module for RNGModule {
    type Input = ();
    type Output = ();
    fn call(&self, s: &Scope<'_>, _: ()) -> Result<()> {
        println!("{}", s.make_rng("rng_stream")?);
        println!("{}", s.make_rng("rng_stream")?);
        println!("{}", s.make_rng("rng_stream")?);
        Ok(())
    }
}

pub struct RNGModuleTwoStreams;

impl Module for RNGModuleTwoStreams {
    type Input = ();
    type Output = ();
    fn call(&self, s: &Scope<'_>, _: ()) -> Result<()> {
        for _ in 0..3 {
            println!("rng_stream1: {}", s.make_rng("rng_stream1")?);
            println!("rng_stream2: {}", s.make_rng("rng_stream2")?);
        }
        Ok(())
    }
}

pub struct RNGSubSubModule;

impl Module for RNGSubSubModule {
    type Input = ();
    type Output = ();
    fn call(&self, s: &Scope<'_>, _: ()) -> Result<()> {
        let name = s.path().last().cloned().unwrap_or_default();
        println!("{name}, count 1: {}", s.make_rng("rng_stream")?);
        println!("{name}, count 2: {}", s.make_rng("rng_stream")?);
        Ok(())
    }
}

pub struct RNGSubModule;

impl Module for RNGSubModule {
    type Input = ();
    type Output = ();
    fn call(&self, s: &Scope<'_>, _: ()) -> Result<()> {
        let name = s.path().last().cloned().unwrap_or_default();
        println!("{name}, count 1: {}", s.make_rng("rng_stream")?);
        println!("{name}, count 2: {}", s.make_rng("rng_stream")?);
        s.call(RNGSubSubModule, ())
    }
}

pub struct NestedRNGModule;

impl Module for NestedRNGModule {
    type Input = ();
    type Output = ();
    fn type_name(&self) -> &'static str {
        "RNGModule"
    }
    fn call(&self, s: &Scope<'_>, _: ()) -> Result<()> {
        println!("RNGModule, count 1: {}", s.make_rng("rng_stream")?);
        println!("RNGModule, count 2: {}", s.make_rng("rng_stream")?);
        s.call(RNGSubModule, ())
    }
}

/// The guide's second sub-module example: the same class used twice.
pub struct LeafRNGSubModule;

impl Module for LeafRNGSubModule {
    type Input = ();
    type Output = ();
    fn type_name(&self) -> &'static str {
        "RNGSubModule"
    }
    fn call(&self, s: &Scope<'_>, _: ()) -> Result<()> {
        let name = s.path().last().cloned().unwrap_or_default();
        println!("{name}, count 1: {}", s.make_rng("rng_stream")?);
        println!("{name}, count 2: {}", s.make_rng("rng_stream")?);
        Ok(())
    }
}

pub struct TwoSubModules;

impl Module for TwoSubModules {
    type Input = ();
    type Output = ();
    fn call(&self, s: &Scope<'_>, _: ()) -> Result<()> {
        println!("RNGModule, count 1: {}", s.make_rng("rng_stream")?);
        println!("RNGModule, count 2: {}", s.make_rng("rng_stream")?);
        s.call(LeafRNGSubModule, ())?;
        s.call(LeafRNGSubModule, ())
    }
}

pub fn main() -> Result<()> {
    println!("## one stream, key(0)");
    let rng_module = RNGModule;
    let _variables = rng_module.init(Rngs::none().with("rng_stream", random::key(0)), ())?;

    println!("\n## one stream, key(1)");
    let _variables = rng_module.init(Rngs::none().with("rng_stream", random::key(1)), ())?;

    println!("\n## two streams");
    let rng_module_two_streams = RNGModuleTwoStreams;
    let _variables = rng_module_two_streams.init(
        [
            ("rng_stream1", random::key(0)),
            ("rng_stream2", random::key(1)),
        ],
        (),
    )?;

    println!("\n## two streams, same seed");
    let _variables = rng_module_two_streams.init(
        [
            ("rng_stream1", random::key(0)),
            ("rng_stream2", random::key(0)),
        ],
        (),
    )?;

    println!("\n## sub-modules");
    let _variables = NestedRNGModule.init([("rng_stream", random::key(0))], ())?;

    println!("\n## the same sub-module class twice");
    let _variables = TwoSubModules.init([("rng_stream", random::key(0))], ())?;
    Ok(())
}
