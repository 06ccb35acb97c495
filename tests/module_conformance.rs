//! The module API against Flax 0.12.8 (tools/oracle/generate_modules.py):
//! nesting with explicit and auto names, a child called twice, a stream
//! falling back to `params`, custom initializers, several collections,
//! Dropout masks with `broadcast_dims`, and gradients of an MLP with dropout.

mod common;

use std::collections::BTreeMap;

use common::load_fixture;
use flaxen::core::{value_and_grad, Result, Rngs, Scope, Variables};
use flaxen::init;
use flaxen::nn::{Dense, Dropout, Module};
use flaxen::random;
use flaxen::tensor::Tensor;
use serde::Deserialize;

#[derive(Deserialize)]
struct Leaf {
    shape: Vec<usize>,
    bits: Vec<u32>,
}

#[derive(Deserialize)]
struct Nesting {
    x: Vec<u32>,
    init_out: Vec<u32>,
    variables: BTreeMap<String, BTreeMap<String, Leaf>>,
    order: Vec<String>,
    apply_out: Vec<u32>,
    mutated: BTreeMap<String, BTreeMap<String, Leaf>>,
}

#[derive(Deserialize)]
struct DropoutCase {
    rate: f64,
    shape: Vec<usize>,
    broadcast_dims: Vec<usize>,
    seed: u32,
    x: Vec<u32>,
    out: Vec<u32>,
}

#[derive(Deserialize)]
struct MlpGrads {
    x: Vec<u32>,
    y: Vec<u32>,
    params: BTreeMap<String, Leaf>,
    loss: Vec<u32>,
    grads: BTreeMap<String, Leaf>,
}

#[derive(Deserialize)]
struct Fixture {
    nesting: Nesting,
    dropout_masks: Vec<DropoutCase>,
    mlp_grads: MlpGrads,
}

fn tensor(bits: &[u32], shape: &[usize]) -> Tensor {
    Tensor::from_vec(bits.iter().map(|&b| f32::from_bits(b)).collect(), shape).unwrap()
}

fn bits(t: &Tensor) -> Vec<u32> {
    t.to_vec().iter().map(|v| v.to_bits()).collect()
}

fn assert_collection(what: &str, got: &flaxen::tensor::Tree, want: &BTreeMap<String, Leaf>) {
    assert_eq!(got.paths().len(), want.len(), "{what}: number of variables");
    for (path, leaf) in want {
        let t = got
            .tensor(path)
            .unwrap_or_else(|_| panic!("{what}: missing {path}"));
        assert_eq!(t.shape(), &leaf.shape[..], "{what} {path}");
        assert_eq!(bits(t), leaf.bits, "{what} {path}");
    }
}

struct Inner;

impl Module for Inner {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let k = s.make_rng("noise")?;
        let dense = Dense::new(3)
            .kernel_init(init::glorot_uniform())
            .bias_init(init::normal(0.5));
        let x = s.call(dense, x)?;
        let noise = Tensor::from_array(random::normal(k, x.shape())?);
        Ok(x.add(&noise)?)
    }
}

struct Middle;

impl Module for Middle {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let inner = s.child_named("inner", Inner)?;
        let x = inner.call(x)?;
        let x = inner.call(x)?;
        let x = s.call(Inner, x)?;
        s.call_named("out", Dense::new(3).kernel_init(init::he_normal()), x)
    }
}

struct Top;

impl Module for Top {
    type Input = Tensor;
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let x = s.call_named("mid", Middle, x)?;
        let x = s.call(Middle, x)?;
        let count = s.variable("counter", "n", || Ok(Tensor::zeros(&[])))?;
        let stats = s.variable("stats", "noise", || {
            Ok(Tensor::from_array(random::uniform(
                s.make_rng("stats")?,
                &[3],
            )?))
        })?;
        if s.is_mutable_collection("counter") {
            count.set(count.value().add(&Tensor::scalar(1.0))?)?;
        }
        Ok(x.mul(&stats.value())?)
    }
}

#[test]
fn nesting_names_fallback_and_collections_match_flax() {
    let f: Fixture = load_fixture("modules.json");
    let n = f.nesting;
    let x = tensor(&n.x, &[4, 3]);
    let (out, variables) = Top
        .init_with_output(
            Rngs::from([("params", random::key(0)), ("stats", random::key(7))]),
            x.clone(),
        )
        .unwrap();
    // Same variables, created in the same order.
    let order: Vec<String> = variables.flatten().into_iter().map(|(p, _)| p).collect();
    assert_eq!(order, n.order);
    for (c, want) in &n.variables {
        assert_collection(
            &format!("init {c}"),
            &variables.collection(c).unwrap().clone(),
            want,
        );
    }
    assert_eq!(bits(&out), n.init_out, "init output");
    let (out, mutated) = Top
        .apply_mut(
            &variables,
            x,
            Rngs::none().with("noise", random::key(5)),
            ["counter"],
        )
        .unwrap();
    assert_eq!(bits(&out), n.apply_out, "apply output");
    assert_eq!(mutated.collection_names().collect::<Vec<_>>(), ["counter"]);
    for (c, want) in &n.mutated {
        assert_collection(
            &format!("mutated {c}"),
            &mutated.collection(c).unwrap().clone(),
            want,
        );
    }
}

#[test]
fn dropout_masks_match_flax() {
    let f: Fixture = load_fixture("modules.json");
    for case in &f.dropout_masks {
        let x = tensor(&case.x, &case.shape);
        let out = Dropout::new(case.rate)
            .broadcast_dims(&case.broadcast_dims)
            .apply(
                &Variables::new(),
                x,
                Rngs::none().with("dropout", random::key(case.seed)),
            )
            .unwrap();
        assert_eq!(
            bits(&out),
            case.out,
            "rate {} dims {:?}",
            case.rate,
            case.broadcast_dims
        );
    }
}

struct Mlp;

impl Module for Mlp {
    type Input = (Tensor, bool);
    type Output = Tensor;
    fn call(&self, s: &Scope<'_>, (x, train): (Tensor, bool)) -> Result<Tensor> {
        let x = s.call(Dense::new(4), x)?.relu();
        let x = s.call(Dropout::new(0.25).deterministic(!train), x)?;
        s.call(Dense::new(1), x)
    }
}

#[test]
fn mlp_with_dropout_gradients_match_flax() {
    let f: Fixture = load_fixture("modules.json");
    let g = f.mlp_grads;
    let x = tensor(&g.x, &[5, 3]);
    let y = tensor(&g.y, &[5, 1]);
    let variables = Mlp.init(random::key(1), (x.clone(), false)).unwrap();
    assert_collection("params", &variables.params(), &g.params);
    let (loss, grads) = value_and_grad(
        |params| {
            let v = Variables::new().with("params", params.clone());
            let out = Mlp.apply(
                &v,
                (x.clone(), true),
                Rngs::none().with("dropout", random::key(2)),
            )?;
            Ok(y.sub(&out)?.square().mean_all())
        },
        &variables.params(),
    )
    .unwrap();
    assert_eq!(bits(&loss), g.loss, "loss");
    assert_collection("grads", &grads, &g.grads);
}
