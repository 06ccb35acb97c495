//! Compiling a module with `nn::Jit` (Flax's `nn.jit`): the first call
//! traces it, later calls with the same shapes replay the recorded
//! operations, dropout masks are drawn again from each call's keys, and
//! batch statistics come back updated, all with the numbers of running
//! the module; then Flax's `static_argnums` and `methods`: an
//! autoencoder whose `encode(x, train)` is compiled once per `train` flag
//! and whose `decode(z)` is compiled too.
//!
//! Its output is examples/expected/nn_jit.txt (checked by .ci/run).
//!
//! Run with `cargo run --release --example nn_jit`.

use flaxen::core::{Result, Rngs, Scope, Variables};
use flaxen::nn::{BatchNorm, Dense, Dropout, Jit, Method, Module};
use flaxen::random;
use flaxen::tensor::Tensor;

// ANCHOR: block
/// Dense -> relu -> Dropout -> Dense, optionally with BatchNorm.
#[derive(Clone, Debug)]
struct Block {
    batch_norm: bool,
}

impl Module for Block {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let mut h = s.call(Dense::new(16), x)?.relu();
        h = s.call(Dropout::new(0.3), h)?;
        if self.batch_norm {
            h = s.call(BatchNorm::new().momentum(0.9), h)?;
        }
        s.call(Dense::new(2), h)
    }
}

/// The model keeps its `Jit` and calls clones of it: clones share the
/// compiled programs.
struct Model {
    block: Jit<Block>,
}

impl Module for Model {
    type Input = Tensor;
    type Output = Tensor;
    fn type_name(&self) -> &'static str {
        "Model"
    }
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        s.call(self.block.clone(), x)
    }
}
// ANCHOR_END: block

// ANCHOR: methods
/// Flax's setup-style autoencoder: `encode(x, train)` and `decode(z)`.
#[derive(Clone, Debug)]
struct AutoEncoder;

/// `encode(x, train)`: Dense(4) -> relu -> Dropout when `train`.
struct Encode;

impl Method<AutoEncoder> for Encode {
    type Input = (Tensor, bool);
    type Output = Tensor;
    fn name(&self) -> &'static str {
        "encode"
    }
    fn run(&self, _: &AutoEncoder, s: &Scope<'_>, (x, train): (Tensor, bool)) -> Result<Tensor> {
        let h = s.call_named("enc", Dense::new(4), x)?.relu();
        s.call_named("drop", Dropout::new(0.3).deterministic(!train), h)
    }
}

/// `decode(z)`: Dense(3).
struct Decode;

impl Method<AutoEncoder> for Decode {
    type Input = Tensor;
    type Output = Tensor;
    fn name(&self) -> &'static str {
        "decode"
    }
    fn run(&self, _: &AutoEncoder, s: &Scope<'_>, z: Tensor) -> Result<Tensor> {
        s.call_named("dec", Dense::new(3), z)
    }
}

impl Module for AutoEncoder {
    type Input = (Tensor, bool);
    type Output = Tensor;
    fn method_names(&self) -> &'static [&'static str] {
        &["encode", "decode"]
    }
    fn call(&self, s: &Scope<'_>, input: (Tensor, bool)) -> Result<Tensor> {
        let z = Encode.run(self, s, input)?;
        Decode.run(self, s, z)
    }
}

/// `ae.encode(x, train)` then `ae.decode(z)` on one jitted submodule.
struct Pipeline {
    ae: Jit<AutoEncoder>,
}

impl Module for Pipeline {
    type Input = (Tensor, bool);
    type Output = Tensor;
    fn type_name(&self) -> &'static str {
        "Pipeline"
    }
    fn call(&self, s: &Scope<'_>, (x, train): (Tensor, bool)) -> Result<Tensor> {
        let ae = s.child(self.ae.clone())?;
        let z = ae.method(Encode, (x, train))?;
        ae.method(Decode, z)
    }
}
// ANCHOR_END: methods

fn row(t: &Tensor) -> String {
    let v = t.to_vec();
    format!("[{:+.5}, {:+.5}]", v[0], v[1])
}

fn main() -> flaxen::Result<()> {
    // ANCHOR: calls
    let x = Tensor::from_vec((0..24).map(|i| (i as f32 * 0.7).sin()).collect(), &[8, 3])?;
    let model = Model {
        block: Jit::new(Block { batch_norm: false }),
    };
    let rngs = Rngs::none()
        .with("params", random::key(0))
        .with("dropout", random::key(1));
    let v = model.init(rngs, x.clone())?;
    println!(
        "variables: {:?}",
        v.params()
            .paths()
            .iter()
            .map(|(p, _)| p.clone())
            .collect::<Vec<_>>()
    );
    for t in 0..3 {
        let rngs = Rngs::none().with("dropout", random::key(10 + t));
        let y = model.apply(&v, x.clone(), rngs)?;
        // Each call replays the compiled body with fresh dropout masks.
        println!("call {t}: first row {}", row(&y));
    }
    println!("compiled: {}", model.block.is_compiled());
    // ANCHOR_END: calls

    // ANCHOR: batch_stats
    let model = Model {
        block: Jit::new(Block { batch_norm: true }),
    };
    let rngs = Rngs::none()
        .with("params", random::key(0))
        .with("dropout", random::key(1));
    let v = model.init(rngs, x.clone())?;
    let mut stats = v.collection("batch_stats").cloned().unwrap_or_default();
    for t in 0..3 {
        let vars = Variables::new()
            .with("params", v.params())
            .with("batch_stats", stats.clone());
        let rngs = Rngs::none().with("dropout", random::key(10 + t));
        let (y, updated) = model.apply_mut(&vars, x.clone(), rngs, ["batch_stats"])?;
        stats = updated
            .collection("batch_stats")
            .cloned()
            .unwrap_or_default();
        let mean = stats.tensor("JitBlock_0/BatchNorm_0/mean")?.to_vec();
        println!(
            "call {t}: first row {}, running mean[0] {:+.5}",
            row(&y),
            mean[0]
        );
    }
    let (compiled, eager) = model.block.compiled_counts();
    println!("with BatchNorm: {compiled} signature(s) compiled, {eager} run eagerly");
    for reason in model.block.eager_reasons() {
        println!("  eager because: {reason}");
    }
    // ANCHOR_END: batch_stats

    // ANCHOR: options
    // nn.jit(AutoEncoder, methods={"encode": dict(static_argnums=(2,)),
    //                              "decode": {}})
    let ae = Jit::new(AutoEncoder)
        .method_static_argnums("encode", [2])?
        .method_static_argnums("decode", [])?;
    let model = Pipeline { ae };
    let rngs = Rngs::none()
        .with("params", random::key(0))
        .with("dropout", random::key(1));
    let v = model.init(rngs, (x.clone(), true))?;
    for (t, train) in [true, true, false, true, false].into_iter().enumerate() {
        let rngs = Rngs::none().with("dropout", random::key(20 + t as u32));
        let y = model.apply(&v, (x.clone(), train), rngs)?;
        let (programs, _) = model.ae.compiled_counts_of("encode");
        println!(
            "call {t} (train {train:5}): first row [{:+.5}, {:+.5}, {:+.5}], encode programs {programs}",
            y.to_vec()[0],
            y.to_vec()[1],
            y.to_vec()[2]
        );
    }
    for method in ["encode", "decode", "__call__"] {
        let (compiled, _) = model.ae.compiled_counts_of(method);
        println!("{method}: {compiled} program(s)");
    }
    // Options that do not fit are typed errors.
    if let Err(e) = Jit::new(AutoEncoder).methods(["encdoe"]) {
        println!("error: {e}");
    }
    let flag_not_static = Pipeline {
        ae: Jit::new(AutoEncoder)
            .static_argnums([])
            .methods(["encode"])?,
    };
    if let Err(e) = flag_not_static.init(random::key(0), (x.clone(), true)) {
        println!("error: {e}");
    }
    // ANCHOR_END: options
    Ok(())
}
