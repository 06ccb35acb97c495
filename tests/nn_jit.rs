//! `nn::Jit` against flax 0.12.8's `nn.jit` (tools/oracle/generate_nn_jit.py):
//! variable names and values, outputs over several calls with fresh
//! dropout keys, updated batch statistics, the RNG keys the jitted body
//! sees, and gradients through the jitted module, bit for bit; and replay
//! against tracing, recompilation for new shapes, and errors.

use flaxen::core::{grad, Error, Result, Rngs, Scope, Variables};
use flaxen::nn::{BatchNorm, Dense, Dropout, Jit, Module};
use flaxen::random::{self, Key};
use flaxen::tensor::{as_jitted, jit_value_and_grad_with_keys, value_and_grad, Tensor, Tree};
use serde_json::Value;

mod common;

use common::{
    json_shape as shape, json_tensor as tensor, json_u32s as u32s, load_fixture,
    tensor_bits as bits,
};

fn fixture() -> Value {
    load_fixture("nn_jit.json")
}

/// Dense(8) -> relu -> Dropout(0.3) [-> BatchNorm(momentum 0.9)].
#[derive(Clone, Debug)]
struct Body {
    bn: bool,
    train: bool,
}

impl Module for Body {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let h = s.call(Dense::new(8), x)?.relu();
        let h = s.call(Dropout::new(0.3).deterministic(!self.train), h)?;
        if self.bn {
            let bn = BatchNorm::new()
                .use_running_average(!self.train)
                .momentum(0.9);
            return s.call(bn, h);
        }
        Ok(h)
    }
}

/// `nn.jit(Body)` twice, then Dense(2).
#[derive(Clone)]
struct Net {
    body: Jit<Body>,
}

impl Net {
    fn new(bn: bool) -> Net {
        Net {
            body: Jit::new(Body { bn, train: true }),
        }
    }
}

impl Module for Net {
    type Input = Tensor;
    type Output = Tensor;
    fn type_name(&self) -> &'static str {
        "Net"
    }
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let h = s.call(self.body.clone(), x)?;
        let h = s.call(self.body.clone(), h)?;
        s.call(Dense::new(2), h)
    }
}

fn case(name: &str) -> Value {
    let f = fixture();
    f["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap()
        .clone()
}

fn init_rngs() -> Rngs {
    Rngs::none()
        .with("params", random::key(0))
        .with("dropout", random::key(1))
}

fn dropout(t: i64) -> Rngs {
    Rngs::none().with("dropout", random::key(100 + t))
}

/// Which of the fixture's two runs a part is checked against: `jitted`
/// (as Flax runs `nn.jit`, compiled by XLA) or `eager` (the same keys,
/// the body op by op).
struct Reference {
    calls: &'static str,
    /// `None`: the gradients are not compared (see the BatchNorm case).
    grads: Option<&'static str>,
}

/// A tree as the fixture writes one: `{path: {shape, bits}}`.
fn tree_json(tree: &Tree) -> Value {
    let map = tree
        .paths()
        .into_iter()
        .map(|(p, t)| (p, serde_json::json!({"shape": t.shape(), "bits": bits(t)})))
        .collect();
    Value::Object(map)
}

/// flaxen's numbers for fixture case `c`, as the fixture holds Flax's:
/// the variables of init, four applies (batch statistics fed forward) and
/// the gradient of `sum(y * w)` with respect to the parameters.
fn numbers<M: Module<Input = Tensor, Output = Tensor>>(module: &M, c: &Value) -> Value {
    let x = tensor(&c["x"], &shape(&c["x_shape"]));
    let v = module.init(init_rngs(), x.clone()).unwrap();
    let variables: serde_json::Map<String, Value> = v
        .iter()
        .map(|(c, t)| (c.to_string(), tree_json(t)))
        .collect();
    let params = v.params();
    let mut stats = v.collection("batch_stats").cloned();
    let mut calls = Vec::new();
    for t in 0..4 {
        let mut vars = Variables::new().with("params", params.clone());
        if let Some(s) = &stats {
            vars = vars.with("batch_stats", s.clone());
        }
        let (y, upd) = module
            .apply_mut(&vars, x.clone(), dropout(t), ["batch_stats"])
            .unwrap();
        stats = upd.collection("batch_stats").cloned();
        let mut call = serde_json::json!({ "y": bits(&y) });
        if let Some(s) = &stats {
            call["batch_stats"] = tree_json(s);
        }
        calls.push(call);
    }
    let y_shape = shape(&c["jitted"]["y_shape"]);
    let w = tensor(&c["w"], &y_shape);
    let g = grad(
        |p: &Tree| {
            let mut vars = Variables::new().with("params", p.clone());
            if let Some(s) = v.collection("batch_stats") {
                vars = vars.with("batch_stats", s.clone());
            }
            let (y, _) = module.apply_mut(&vars, x.clone(), dropout(0), ["batch_stats"])?;
            Ok((&y * &w).sum_all())
        },
        &params,
    )
    .unwrap();
    serde_json::json!({
        "variables": variables,
        "calls": calls,
        "grads": tree_json(&g),
    })
}

/// `got[path]` equals `want[path]` for every path of both.
fn check_json_tree(got: &Value, want: &Value, what: &str) {
    let (got, want) = (got.as_object().unwrap(), want.as_object().unwrap());
    let mut paths: Vec<&String> = got.keys().collect();
    paths.sort();
    let mut expected: Vec<&String> = want.keys().collect();
    expected.sort();
    assert_eq!(paths, expected, "{what}: leaves");
    for path in paths {
        assert_eq!(got[path]["shape"], want[path]["shape"], "{what} {path}");
        assert_eq!(got[path]["bits"], want[path]["bits"], "{what} {path}");
    }
}

/// flaxen's numbers ([`numbers`]) checked against fixture case `name`.
fn check_case<M: Module<Input = Tensor, Output = Tensor>>(module: &M, name: &str, r: Reference) {
    let c = case(name);
    let got = numbers(module, &c);
    let want = &c["jitted"]["variables"];
    for (collection, tree) in got["variables"].as_object().unwrap() {
        check_json_tree(
            tree,
            &want[collection],
            &format!("{name} init {collection}"),
        );
    }
    for t in 0..4 {
        let (got, want) = (&got["calls"][t], &c[r.calls]["calls"][t]);
        assert_eq!(u32s(&got["y"]), u32s(&want["y"]), "{name} call {t} output");
        if !got["batch_stats"].is_null() {
            let what = format!("{name} call {t} stats");
            check_json_tree(&got["batch_stats"], &want["batch_stats"], &what);
        }
    }
    if let Some(grads) = r.grads {
        check_json_tree(&got["grads"], &c[grads]["grads"], &format!("{name} grads"));
    }
}

/// Prints flaxen's numbers for the `net_bn` case as one JSON line, from
/// which `tools/oracle/nn_jit_bn_ulps.py` writes the book's table of how
/// far they are from Flax's.
#[test]
#[ignore = "prints the numbers of the book's table"]
fn print_net_with_batch_norm_numbers() {
    println!("NET_BN {}", numbers(&Net::new(true), &case("net_bn")));
}

#[test]
fn net_matches_flax() {
    let net = Net::new(false);
    let r = Reference {
        calls: "jitted",
        grads: Some("jitted"),
    };
    check_case(&net, "net", r);
    assert!(net.body.is_compiled(), "{:?}", net.body.eager_reasons());
}

#[test]
fn net_with_batch_norm_matches_flax() {
    common::require_rsqrt_as_recorded!();
    // XLA rewrites BatchNorm's statistics and normalization when it fuses
    // the jitted body (sums times 1/n folded into the momentum,
    // multiply-adds contracted); a `Jit`'s forward pass does as XLA does
    // (tests/nn_jit_bn.rs checks more shapes). Under `grad` the module
    // runs inline, its BatchNorm as one operation with the forward numbers
    // and the backward program XLA compiles (tests/nn_jit_bn_grad.rs).
    let r = Reference {
        calls: "jitted",
        grads: Some("jitted"),
    };
    let net = Net::new(true);
    check_case(&net, "net_bn", r);
    // Calls after the first replayed the compiled body.
    assert_eq!(
        net.body.compiled_counts(),
        (2, 0),
        "{:?}",
        net.body.eager_reasons()
    );
}

#[test]
fn top_level_jit_matches_flax() {
    let top = Jit::new(Body {
        bn: false,
        train: true,
    });
    let r = Reference {
        calls: "jitted",
        grads: Some("jitted"),
    };
    check_case(&top, "top", r);
}

#[derive(Clone)]
struct Child;

impl Module for Child {
    type Input = Tensor;
    type Output = Vec<u32>;
    fn call(&self, s: &Scope<'_>, _: Tensor) -> Result<Vec<u32>> {
        Ok(s.make_rng("dropout")?.data().to_vec())
    }
}

/// The key data of two `make_rng('dropout')` and of a child's.
#[derive(Clone)]
struct Probe;

type Keys = (Vec<u32>, Vec<u32>, Vec<u32>);

impl Module for Probe {
    type Input = Tensor;
    type Output = Keys;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Keys> {
        let a = s.make_rng("dropout")?.data().to_vec();
        let b = s.make_rng("dropout")?.data().to_vec();
        Ok((a, b, s.call(Child, x)?))
    }
}

struct ProbeNet;

impl Module for ProbeNet {
    type Input = Tensor;
    type Output = (Keys, Keys, Vec<u32>);
    fn type_name(&self) -> &'static str {
        "ProbeNet"
    }
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Self::Output> {
        let jit = Jit::new(Probe);
        // One submodule (JitProbe_0) called twice, as Flax's `probe(x)`.
        let probe = s.child(jit.clone())?;
        let first = probe.call(x.clone())?;
        let second = probe.call(x)?;
        // The keys are data, not drawn through Tensor::sampled: the replay
        // could not draw them again, so each call runs the body.
        assert!(!jit.is_compiled());
        let after = s.make_rng("dropout")?.data().to_vec();
        Ok((first, second, after))
    }
}

#[test]
fn keys_the_body_sees_match_flax() {
    let f = fixture();
    let p = &f["probe"];
    let x = Tensor::ones(&[6, 3]);
    let v = ProbeNet.init(init_rngs(), x.clone()).unwrap();
    let rngs = Rngs::none().with("dropout", random::key(7));
    let ((a0, b0, c0), (a1, b1, c1), after) = ProbeNet.apply(&v, x, rngs).unwrap();
    let words = |v: &Value| u32s(v);
    assert_eq!(a0, words(&p["first"][0]), "first call, first make_rng");
    assert_eq!(b0, words(&p["first"][1]), "first call, second make_rng");
    assert_eq!(c0, words(&p["first"][2]), "first call, child");
    assert_eq!(a1, words(&p["second"][0]), "second call, first make_rng");
    assert_eq!(b1, words(&p["second"][1]), "second call, second make_rng");
    assert_eq!(c1, words(&p["second"][2]), "second call, child");
    assert_eq!(after, words(&p["after"]), "make_rng after the jitted calls");
}

/// `model` applied with the dropout keys `fold_in(key(3), t)` and the batch
/// statistics fed forward; the outputs and final statistics.
fn run_calls<M: Module<Input = Tensor, Output = Tensor>>(
    model: impl Fn() -> M,
    v: &Variables,
    xs: &[Tensor],
) -> (Vec<Vec<u32>>, Option<Tree>) {
    let mut stats = v.collection("batch_stats").cloned();
    let mut outs = Vec::new();
    for (t, x) in xs.iter().enumerate() {
        let mut vars = Variables::new().with("params", v.params());
        if let Some(s) = &stats {
            vars = vars.with("batch_stats", s.clone());
        }
        let rngs = Rngs::none().with("dropout", random::fold_in(random::key(3), t as u32));
        let (y, upd) = model()
            .apply_mut(&vars, x.clone(), rngs, ["batch_stats"])
            .unwrap();
        outs.push(bits(&y));
        stats = upd.collection("batch_stats").cloned();
    }
    (outs, stats)
}

#[test]
fn replay_equals_tracing_over_many_calls() {
    for bn in [false, true] {
        let x =
            Tensor::from_vec((0..18).map(|i| (i as f32 * 0.37).sin()).collect(), &[6, 3]).unwrap();
        let kept = Net::new(bn);
        let v = kept.init(init_rngs(), x.clone()).unwrap();
        let xs = vec![x; 20];
        // A fresh Jit traces (runs the body) on every call.
        let (traced, traced_stats) = run_calls(|| Net::new(bn), &v, &xs);
        let (replayed, replayed_stats) = run_calls(|| kept.clone(), &v, &xs);
        assert_eq!(traced, replayed, "bn = {bn}");
        if let (Some(a), Some(b)) = (traced_stats, replayed_stats) {
            for ((path, a), b) in a.paths().into_iter().zip(b.leaves()) {
                assert_eq!(bits(a), bits(b), "bn = {bn}: {path}");
            }
        }
        // Fresh masks on every call.
        assert_ne!(replayed[0], replayed[1]);
        // BatchNorm's statistics included: no eager fallback.
        assert_eq!(
            kept.body.compiled_counts().1,
            0,
            "{:?}",
            kept.body.eager_reasons()
        );
        assert!(kept.body.is_compiled(), "bn = {bn}");
    }
}

#[test]
fn a_new_input_shape_recompiles() {
    let kept = Net::new(false);
    let x6 = Tensor::from_vec((0..18).map(|i| i as f32 * 0.1).collect(), &[6, 3]).unwrap();
    let x2 = Tensor::from_vec((0..6).map(|i| 1.0 - i as f32 * 0.3).collect(), &[2, 3]).unwrap();
    let v = kept.init(init_rngs(), x6.clone()).unwrap();
    let xs = vec![x6.clone(), x6.clone(), x2.clone(), x2, x6.clone(), x6];
    let (traced, _) = run_calls(|| Net::new(false), &v, &xs);
    let (replayed, _) = run_calls(|| kept.clone(), &v, &xs);
    assert_eq!(traced, replayed);
    assert_eq!(replayed[2].len(), 4);
    // Two bodies ([6, 3] and [6, 8] inputs, then [2, 3] and [2, 8]).
    assert_eq!(kept.body.compiled_counts(), (4, 0));
}

#[test]
fn wrong_variable_shapes_are_errors_naming_the_module() {
    let kept = Net::new(false);
    let x = Tensor::ones(&[6, 3]);
    let v = kept.init(init_rngs(), x.clone()).unwrap();
    kept.apply(&v, x.clone(), dropout(0)).unwrap();
    let mut params = v.params();
    params
        .insert(
            "JitBody_0",
            v.params().subtree("JitBody_0").unwrap().with(
                "Dense_0",
                Tree::new()
                    .with("kernel", Tensor::ones(&[4, 8]))
                    .with("bias", Tensor::zeros(&[8])),
            ),
        )
        .unwrap();
    let bad = Variables::new().with("params", params);
    let err = kept.apply(&bad, x, dropout(1)).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("JitBody_0/Dense_0"), "{text}");
}

#[test]
fn a_missing_rng_stream_is_an_error_naming_the_module() {
    let kept = Net::new(false);
    let x = Tensor::ones(&[6, 3]);
    let v = kept.init(init_rngs(), x.clone()).unwrap();
    kept.apply(&v, x.clone(), dropout(0)).unwrap();
    let err = kept.apply(&v, x, Rngs::none()).unwrap_err();
    match &err {
        Error::MissingRng { path, stream, .. } => {
            assert_eq!(stream, "dropout");
            assert_eq!(path, "/JitBody_0/Dropout_0");
        }
        other => panic!("expected MissingRng, got {other}"),
    }
}

#[test]
fn a_jit_inside_a_compiled_training_step_draws_from_the_step_keys() {
    let net = Net::new(false);
    let x = Tensor::from_vec((0..18).map(|i| (i as f32 * 0.3).cos()).collect(), &[6, 3]).unwrap();
    let v = net.init(init_rngs(), x.clone()).unwrap();
    let loss = |p: &Tree, b: &Tree, keys: &[Key]| -> flaxen::Result<Tensor> {
        let vars = Variables::new().with("params", p.clone());
        let rngs = Rngs::none().with("dropout", keys[0].clone());
        let y = net.apply(&vars, b.tensor("x")?.clone(), rngs)?;
        Ok(y.square().sum_all())
    };
    let mut step = jit_value_and_grad_with_keys(&loss);
    let batch = Tree::new().with("x", x);
    let params = v.params();
    let mut losses = Vec::new();
    for t in 0..5 {
        let keys = [random::fold_in(random::key(9), t)];
        let (l, g) = step.call_with_keys(&params, &batch, &keys).unwrap();
        // The Jit runs inline under the step's trace; its forked keys are
        // derived from the step's key argument again on every replay.
        let (le, ge) = as_jitted(|| value_and_grad(|p| loss(p, &batch, &keys), &params)).unwrap();
        assert_eq!(
            l.item().unwrap().to_bits(),
            le.item().unwrap().to_bits(),
            "call {t}"
        );
        for ((path, a), b) in g.paths().into_iter().zip(ge.leaves()) {
            assert_eq!(bits(a), bits(b), "call {t}: {path}");
        }
        losses.push(l.item().unwrap());
    }
    assert!(step.is_compiled());
    assert_ne!(losses[1], losses[2]);
}

/// Dense(4) -> Dropout(0.5), keeping the total of the squared outputs in
/// `batch_stats/total` when writable: a writable collection updated by
/// operations the replay knows.
#[derive(Clone)]
struct Tally;

impl Module for Tally {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let y = s.call(Dense::new(4), x)?;
        let y = s.call(Dropout::new(0.5), y)?;
        let total = s.variable("batch_stats", "total", || Ok(Tensor::zeros(&[])))?;
        if s.is_mutable_collection("batch_stats") {
            total.set(total.value().add(&y.square().sum_all())?)?;
        }
        Ok(y)
    }
}

#[test]
fn writable_collections_are_results_of_the_replay() {
    let x = Tensor::from_vec((0..12).map(|i| i as f32 * 0.25 - 1.0).collect(), &[4, 3]).unwrap();
    let kept = Jit::new(Tally);
    let v = kept.init(init_rngs(), x.clone()).unwrap();
    // Ten calls of `model()`, the batch statistics fed forward.
    let run = |model: &dyn Fn() -> Jit<Tally>| {
        let mut stats = v.collection("batch_stats").cloned().unwrap();
        let mut outs = Vec::new();
        for t in 0..10 {
            let vars = Variables::new()
                .with("params", v.params())
                .with("batch_stats", stats.clone());
            let rngs = Rngs::none().with("dropout", random::key(t));
            let (y, upd) = model()
                .apply_mut(&vars, x.clone(), rngs, ["batch_stats"])
                .unwrap();
            stats = upd.collection("batch_stats").cloned().unwrap();
            outs.push((bits(&y), bits(stats.tensor("total").unwrap())));
        }
        outs
    };
    let replayed = run(&|| kept.clone());
    assert!(kept.is_compiled(), "{:?}", kept.eager_reasons());
    // The same calls, each traced by a fresh Jit.
    assert_eq!(replayed, run(&|| Jit::new(Tally)));
    // The total grows: each call's update was applied.
    let totals: Vec<f32> = replayed.iter().map(|(_, t)| f32::from_bits(t[0])).collect();
    assert!(totals.windows(2).all(|w| w[1] > w[0]), "{totals:?}");
}

#[test]
fn a_jit_can_be_shared_between_threads() {
    fn shared<T: Send + Sync>() {}
    shared::<Jit<Body>>();
    shared::<Net>();
}

/// Flax's `static_argnums`: `train` is a plain `bool` inside.
#[derive(Clone)]
struct Foo;

impl Module for Foo {
    type Input = (Tensor, bool);
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, (x, train): (Tensor, bool)) -> Result<Tensor> {
        let y = s.call(Dense::new(3).use_bias(false), x)?;
        Ok(if train { &y * 2.0 } else { y })
    }
}

#[test]
fn static_values_of_the_input_are_part_of_the_signature() {
    let x = Tensor::from_vec((0..8).map(|i| i as f32 - 3.5).collect(), &[2, 4]).unwrap();
    let jit = Jit::new(Foo);
    let v = jit.init(random::key(0), (x.clone(), true)).unwrap();
    for train in [true, false, true, false] {
        let y = jit.apply(&v, (x.clone(), train), ()).unwrap();
        let plain = Foo.apply(&v, (x.clone(), train), ()).unwrap();
        assert_eq!(bits(&y), bits(&plain), "train = {train}");
    }
    assert_eq!(jit.compiled_counts(), (2, 0));
}

/// Dense(8) -> BatchNorm(momentum 0.9) -> relu -> Dense(2) on `[n, 3]`, or
/// BatchNorm -> relu alone on `[n, 5, 3]` (statistics over two axes).
#[derive(Clone, Debug)]
struct BnNet {
    train: bool,
    rank3: bool,
}

impl Module for BnNet {
    type Input = Tensor;
    type Output = Tensor;
    fn type_name(&self) -> &'static str {
        "BnNet"
    }
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let bn = BatchNorm::new()
            .use_running_average(!self.train)
            .momentum(0.9);
        if self.rank3 {
            return Ok(s.call(bn, x)?.relu());
        }
        let h = s.call(Dense::new(8), x)?;
        let h = s.call(bn, h)?.relu();
        s.call(Dense::new(2), h)
    }
}

#[test]
fn batch_norm_is_compiled_and_replays_its_traced_bits() {
    for rank3 in [false, true] {
        let shape: &[usize] = if rank3 { &[4, 5, 3] } else { &[6, 3] };
        let size: usize = shape.iter().product();
        // A new input on every call.
        let xs: Vec<Tensor> = (0..6)
            .map(|t| {
                let v = (0..size)
                    .map(|i| ((i * 7 + t * 13) as f32 * 0.31).sin() * (1.0 + t as f32))
                    .collect();
                Tensor::from_vec(v, shape).unwrap()
            })
            .collect();
        let v = BnNet { train: true, rank3 }
            .init(random::key(0), xs[0].clone())
            .unwrap();
        for train in [true, false] {
            let plain = BnNet { train, rank3 };
            // At the top level, the jitted module's variables are the plain
            // module's. A fresh `Jit` traces on every call: the reference
            // for the replays of the kept one. (Both have XLA's compiled
            // numbers, not the plain module's eager ones.)
            let jit = Jit::new(plain.clone());
            let mut stats = v.collection("batch_stats").unwrap().clone();
            let mut jit_stats = stats.clone();
            for (t, x) in xs.iter().enumerate() {
                let what = format!("rank3 {rank3}, train {train}, call {t}");
                let vars = |s: &Tree| {
                    Variables::new()
                        .with("params", v.params())
                        .with("batch_stats", s.clone())
                };
                let (want, upd) = Jit::new(plain.clone())
                    .apply_mut(&vars(&stats), x.clone(), (), ["batch_stats"])
                    .unwrap();
                let (got, jit_upd) = jit
                    .apply_mut(&vars(&jit_stats), x.clone(), (), ["batch_stats"])
                    .unwrap();
                assert_eq!(bits(&got), bits(&want), "{what}: output");
                stats = upd.collection("batch_stats").unwrap().clone();
                jit_stats = jit_upd.collection("batch_stats").unwrap().clone();
                for ((path, a), b) in stats.paths().into_iter().zip(jit_stats.leaves()) {
                    assert_eq!(bits(b), bits(a), "{what}: batch_stats/{path}");
                }
            }
            if train {
                // The running averages moved.
                let first = v.collection("batch_stats").unwrap();
                assert_ne!(bits(&first.leaves()[0]), bits(&stats.leaves()[0]));
            }
            // One program, replayed on every call after the first.
            assert_eq!(
                jit.compiled_counts(),
                (1, 0),
                "rank3 {rank3}, train {train}: {:?}",
                jit.eager_reasons()
            );
        }
    }
}

/// Dense(8) -> BatchNorm on `[n, 8]`: the same signature wherever it sits.
#[derive(Clone, Debug)]
struct Square;

impl Module for Square {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let h = s.call(Dense::new(8), x)?;
        s.call(BatchNorm::new().momentum(0.9), h)
    }
}

/// One `Jit<Square>` called as two submodules (JitSquare_0, JitSquare_1),
/// or (`second`) another `Jit<Square>` for the second.
#[derive(Clone)]
struct Twice {
    body: Jit<Square>,
    second: Option<Jit<Square>>,
}

impl Module for Twice {
    type Input = Tensor;
    type Output = Tensor;
    fn type_name(&self) -> &'static str {
        "Twice"
    }
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let h = s.call(self.body.clone(), x)?;
        let second = self.second.as_ref().unwrap_or(&self.body);
        s.call(second.clone(), h)
    }
}

#[test]
fn a_program_is_shared_between_paths_and_writes_each_paths_statistics() {
    let x = Tensor::from_vec((0..48).map(|i| (i as f32 * 0.41).cos()).collect(), &[6, 8]).unwrap();
    let kept = Twice {
        body: Jit::new(Square),
        second: None,
    };
    let v = kept.init(init_rngs(), x.clone()).unwrap();
    let run = |model: &dyn Fn() -> Twice| {
        let mut stats = v.collection("batch_stats").unwrap().clone();
        let mut outs = Vec::new();
        for _ in 0..4 {
            let vars = Variables::new()
                .with("params", v.params())
                .with("batch_stats", stats.clone());
            let (y, upd) = model()
                .apply_mut(&vars, x.clone(), (), ["batch_stats"])
                .unwrap();
            stats = upd.collection("batch_stats").unwrap().clone();
            let leaves: Vec<Vec<u32>> = stats.leaves().iter().map(bits).collect();
            outs.push((bits(&y), leaves));
        }
        outs
    };
    let replayed = run(&|| kept.clone());
    // The program traced at JitSquare_0 replays at JitSquare_1, and each
    // path's statistics are its own: the numbers of two Jits tracing on
    // every call.
    let body = &kept.body;
    assert_eq!(body.compiled_counts(), (1, 0), "{:?}", body.eager_reasons());
    let traced = run(&|| Twice {
        body: Jit::new(Square),
        second: Some(Jit::new(Square)),
    });
    assert_eq!(replayed, traced);
    let stats = v.collection("batch_stats").unwrap();
    assert_eq!(stats.paths().len(), 4);
}
