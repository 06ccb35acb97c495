//! `nn::Jit`'s `static_argnums` and `methods` against flax 0.12.8's
//! `nn.jit(AE, methods={'encode': dict(static_argnums=(2,)), 'decode': {}})`
//! (tools/oracle/generate_nn_jit_options.py): variables, outputs over calls
//! with changing static flags and dropout keys, how many programs were
//! compiled after each call (Flax's trace count), a method applied at the
//! top level; and the typed errors for bad options.

use flaxen::core::{Error, Result, Rngs, Scope, Variables};
use flaxen::nn::{Dense, Dropout, Jit, Method, MethodCall, Module};
use flaxen::random;
use flaxen::tensor::Tensor;
use serde_json::Value;

mod common;

use common::{json_u32s as u32s, load_fixture, tensor_bits as bits};

/// Flax's setup-style `AE`: `enc`, `drop`, `dec`.
#[derive(Clone, Debug)]
struct Ae;

/// `AE.encode(x, train)`.
struct Encode;

/// `AE.decode(z)`.
struct Decode;

impl Method<Ae> for Encode {
    type Input = (Tensor, bool);
    type Output = Tensor;
    fn name(&self) -> &'static str {
        "encode"
    }
    fn run(&self, _: &Ae, s: &Scope<'_>, (x, train): (Tensor, bool)) -> Result<Tensor> {
        let h = s.call_named("enc", Dense::new(4), x)?.relu();
        s.call_named("drop", Dropout::new(0.3).deterministic(!train), h)
    }
}

impl Method<Ae> for Decode {
    type Input = Tensor;
    type Output = Tensor;
    fn name(&self) -> &'static str {
        "decode"
    }
    fn run(&self, _: &Ae, s: &Scope<'_>, z: Tensor) -> Result<Tensor> {
        s.call_named("dec", Dense::new(3), z)
    }
}

impl Module for Ae {
    type Input = (Tensor, bool);
    type Output = Tensor;
    fn type_name(&self) -> &'static str {
        "AE"
    }
    fn method_names(&self) -> &'static [&'static str] {
        &["encode", "decode"]
    }
    fn call(&self, s: &Scope<'_>, input: (Tensor, bool)) -> Result<Tensor> {
        let z = Encode.run(self, s, input)?;
        Decode.run(self, s, z)
    }
}

/// `ae = JitAE(); z = ae.encode(x, train); return ae.decode(z), z`.
#[derive(Clone)]
struct Outer {
    ae: Jit<Ae>,
}

impl Outer {
    fn new() -> Outer {
        Outer {
            ae: Jit::new(Ae)
                .method_static_argnums("encode", [2])
                .and_then(|j| j.method_static_argnums("decode", []))
                .unwrap(),
        }
    }
}

impl Module for Outer {
    type Input = (Tensor, bool);
    type Output = (Tensor, Tensor);
    fn type_name(&self) -> &'static str {
        "Outer"
    }
    fn call(&self, s: &Scope<'_>, (x, train): (Tensor, bool)) -> Result<(Tensor, Tensor)> {
        let ae = s.child(self.ae.clone())?;
        let z = ae.method(Encode, (x, train))?;
        let y = ae.method(Decode, z.clone())?;
        Ok((y, z))
    }
}

fn init_rngs() -> Rngs {
    Rngs::none()
        .with("params", random::key(0))
        .with("dropout", random::key(1))
}

fn input(f: &Value) -> Tensor {
    let shape: Vec<usize> = f["x_shape"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_u64().unwrap() as usize)
        .collect();
    Tensor::from_vec(
        u32s(&f["x"]).into_iter().map(f32::from_bits).collect(),
        &shape,
    )
    .unwrap()
}

#[test]
fn static_flag_and_method_match_flax() {
    let f: Value = load_fixture("nn_jit_options.json");
    let want = &f["jitted"];
    let x = input(&f);
    let outer = Outer::new();
    let v = outer.init(init_rngs(), (x.clone(), true)).unwrap();
    let params = v.params();
    let want_params = want["variables"]["params"].as_object().unwrap();
    assert_eq!(params.paths().len(), want_params.len());
    for (path, t) in params.paths() {
        assert_eq!(bits(t), u32s(&want_params[&path]["bits"]), "init {path}");
    }
    for (t, call) in want["calls"].as_array().unwrap().iter().enumerate() {
        let train = call["train"].as_bool().unwrap();
        let rngs = Rngs::none().with("dropout", random::key(100 + t as u32));
        let (y, z) = outer.apply(&v, (x.clone(), train), rngs).unwrap();
        assert_eq!(bits(&z), u32s(&call["z"]), "call {t} (train {train}): z");
        assert_eq!(bits(&y), u32s(&call["y"]), "call {t} (train {train}): y");
        // One program per static value, as Flax traces once per value.
        let traces = call["traces"].as_u64().unwrap() as usize;
        assert_eq!(
            outer.ae.compiled_counts_of("encode"),
            (traces, 0),
            "call {t}"
        );
    }
    // `decode` compiled once (its input never changes shape), `__call__`
    // not at all.
    assert_eq!(outer.ae.compiled_counts_of("decode"), (1, 0));
    assert_eq!(outer.ae.compiled_counts_of("__call__"), (0, 0));

    // `JitAE().apply(..., method='encode')` at the top level: the same
    // signature as inside Outer, so the program is replayed.
    let ae_vars = Variables::new().with("params", params.subtree("JitAE_0").unwrap().clone());
    let rngs = Rngs::none().with("dropout", random::key(7));
    let top = MethodCall::new(outer.ae.clone(), Encode)
        .apply(&ae_vars, (x, true), rngs)
        .unwrap();
    assert_eq!(bits(&top), u32s(&want["top_encode"]), "top-level encode");
    let traces = want["top_traces"].as_u64().unwrap() as usize;
    assert_eq!(outer.ae.compiled_counts_of("encode"), (traces, 0));
}

#[test]
fn a_changed_static_value_compiles_again_and_a_seen_one_replays() {
    let x = Tensor::from_vec((0..12).map(|i| i as f32 * 0.3 - 1.0).collect(), &[4, 3]).unwrap();
    let outer = Outer::new();
    let v = outer.init(init_rngs(), (x.clone(), true)).unwrap();
    let counts = |train: bool, t: u32| {
        let rngs = Rngs::none().with("dropout", random::key(t));
        let (y, _) = outer.apply(&v, (x.clone(), train), rngs).unwrap();
        // The same call through a fresh Jit, which traces (runs the body).
        let rngs = Rngs::none().with("dropout", random::key(t));
        let (fresh, _) = Outer::new().apply(&v, (x.clone(), train), rngs).unwrap();
        assert_eq!(bits(&y), bits(&fresh), "train {train}, call {t}");
        outer.ae.compiled_counts_of("encode").0
    };
    assert_eq!(counts(true, 0), 1);
    assert_eq!(counts(true, 1), 1, "the same static value replays");
    assert_eq!(counts(false, 2), 2, "a new static value compiles");
    assert_eq!(counts(false, 3), 2);
    assert_eq!(
        counts(true, 4),
        2,
        "a value seen before replays its program"
    );
}

/// `Outer` with `ae` jitted with `static_argnums` for `methods`.
fn outer_with(argnums: &[usize], methods: &[&str]) -> Outer {
    Outer {
        ae: Jit::new(Ae)
            .static_argnums(argnums.iter().copied())
            .methods(methods.iter().copied())
            .unwrap(),
    }
}

/// The `Error::Lift` of `jit` that initializing `outer` gives.
fn jit_error(outer: Outer) -> (String, String) {
    let x = Tensor::ones(&[2, 3]);
    match outer.init(init_rngs(), (x, true)).unwrap_err() {
        Error::Lift {
            path,
            transform: "jit",
            message,
        } => (path, message),
        other => panic!("expected a jit Error::Lift, got {other}"),
    }
}

#[test]
fn a_static_argument_index_out_of_range_is_an_error() {
    let (path, message) = jit_error(outer_with(&[3], &["encode"]));
    assert_eq!(path, "/JitAE_0");
    assert!(message.contains("argument 3 of encode"), "{message}");
    assert!(message.contains("2 positional argument(s)"), "{message}");
    // JAX ignores the number, then cannot branch on the traced flag.
    let f: Value = load_fixture("nn_jit_options.json");
    assert_eq!(
        f["jitted"]["out_of_range_argnum"],
        "TracerBoolConversionError"
    );
    // One static_argnums for methods of different arities: decode(z) has
    // no argument 2 (method_static_argnums gives each its own).
    let (_, message) = jit_error(outer_with(&[2], &["encode", "decode"]));
    assert!(message.contains("argument 2 of decode"), "{message}");
    assert!(message.contains("1 positional argument(s)"), "{message}");
}

#[test]
fn a_static_argument_holding_a_tensor_is_an_error() {
    let (_, message) = jit_error(outer_with(&[1, 2], &["encode"]));
    assert!(
        message.contains("static argument 1 of encode holds 1 tensor"),
        "{message}"
    );
}

#[test]
fn a_flag_not_marked_static_is_an_error() {
    let (_, message) = jit_error(outer_with(&[], &["encode"]));
    assert!(message.contains("argument 2 of encode"), "{message}");
    assert!(message.contains("not in static_argnums []"), "{message}");
}

#[test]
fn self_as_argument_0_is_ignored_as_in_flax() {
    let x = Tensor::ones(&[2, 3]);
    let outer = outer_with(&[0, 2], &["encode"]);
    outer.init(init_rngs(), (x, true)).unwrap();
}

#[test]
fn a_method_the_module_lacks_is_an_error() {
    let err = Jit::new(Ae).methods(["encode", "encod"]).unwrap_err();
    let also = Jit::new(Ae)
        .method_static_argnums("encod", [2])
        .unwrap_err();
    assert_eq!(err, also);
    match err {
        Error::Lift {
            transform: "jit",
            message,
            ..
        } => {
            assert!(message.contains("\"encod\""), "{message}");
            assert!(message.contains("AE does not have"), "{message}");
            assert!(message.contains("__call__, encode, decode"), "{message}");
        }
        other => panic!("expected a jit Error::Lift, got {other}"),
    }
}

#[test]
fn call_is_compiled_only_when_named() {
    let x = Tensor::ones(&[2, 3]);
    let v = Ae.init(init_rngs(), (x.clone(), false)).unwrap();
    let only_encode = Jit::new(Ae).methods(["encode"]).unwrap();
    let both = Jit::new(Ae).methods(["__call__", "encode"]).unwrap();
    let plain = Ae.apply(&v, (x.clone(), false), ()).unwrap();
    for jit in [&only_encode, &both] {
        let y = jit.apply(&v, (x.clone(), false), ()).unwrap();
        assert_eq!(bits(&y), bits(&plain));
    }
    assert_eq!(only_encode.compiled_counts(), (0, 0));
    assert_eq!(both.compiled_counts_of("__call__"), (1, 0));
}
