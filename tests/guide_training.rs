//! The training loop of the Flax randomness guide: the ten printed losses,
//! and every intermediate value (initial variables, dropout outputs,
//! gradients, parameters) against Flax 0.12.8 (tools/oracle/generate_modules.py).

mod common;

#[allow(dead_code)]
#[path = "../examples/guide_training.rs"]
mod example;

use common::{load_fixture, ulp_distance};
use example::Model;
use flaxen::core::{grad, Rngs, Variables};
use flaxen::nn::Module;
use flaxen::optim::Sgd;
use flaxen::random;
use flaxen::tensor::Tensor;
use serde::Deserialize;
use std::collections::BTreeMap;

#[derive(Deserialize)]
struct Leaf {
    shape: Vec<usize>,
    bits: Vec<u32>,
}

#[derive(Deserialize)]
struct Step {
    train_out: Vec<u32>,
    train_loss: Vec<u32>,
    grads: BTreeMap<String, Leaf>,
    params: BTreeMap<String, Leaf>,
    eval_out: Vec<u32>,
    eval_loss: Vec<u32>,
}

#[derive(Deserialize)]
struct Training {
    init: BTreeMap<String, Leaf>,
    steps: Vec<Step>,
}

#[derive(Deserialize)]
struct Fixture {
    guide_training: Training,
}

// Every value is bit-exact: XLA's small-dot summation order, its
// reciprocal for constant divisors outside `grad`, and the true division
// inside it are all reproduced.

fn assert_bits(what: &str, got: &[f32], want: &[u32]) {
    let want: Vec<f32> = want.iter().map(|&b| f32::from_bits(b)).collect();
    let d: Vec<u64> = got
        .iter()
        .zip(&want)
        .map(|(&g, &w)| ulp_distance(g, w))
        .collect();
    assert!(
        d.iter().all(|&d| d == 0) && got.len() == want.len(),
        "{what}: got {got:?}, want {want:?} (ulps {d:?})"
    );
}

fn assert_tree(what: &str, got: &flaxen::tensor::Tree, want: &BTreeMap<String, Leaf>) {
    for (path, leaf) in want {
        let t = got
            .tensor(path)
            .unwrap_or_else(|_| panic!("{what}: missing {path}"));
        assert_eq!(t.shape(), &leaf.shape[..], "{what} {path}");
        assert_bits(&format!("{what} {path}"), &t.to_vec(), &leaf.bits);
    }
}

#[test]
fn every_step_matches_flax() {
    let fixture: Fixture = load_fixture("modules.json");
    let fx = fixture.guide_training;
    let [params_rng, other_rng, mut train_rng] = random::split_n(random::key(0));
    let x = Tensor::ones(&[1, 3]);
    let y = Tensor::ones(&[1, 2]);
    let module = Model;
    let mut variables = module
        .init(
            Rngs::from([("params", params_rng), ("other", other_rng)]),
            (x.clone(), false),
        )
        .unwrap();
    for (path, leaf) in &fx.init {
        let t = variables
            .tensor(path)
            .unwrap_or_else(|| panic!("init: missing {path}"));
        assert_bits(&format!("init {path}"), &t.to_vec(), &leaf.bits);
    }
    for (i, step) in fx.steps.iter().enumerate() {
        let [dropout_rng, next_rng] = random::split_n(train_rng);
        let rngs = || Rngs::none().with("dropout", random::clone(&dropout_rng));
        let train_out = module.apply(&variables, (x.clone(), true), rngs()).unwrap();
        assert_bits(
            &format!("step {i} train_out"),
            &train_out.to_vec(),
            &step.train_out,
        );
        let other = variables.collection("other_collection").cloned().unwrap();
        let loss = |params: &flaxen::tensor::Tree| {
            let v = Variables::new()
                .with("params", params.clone())
                .with("other_collection", other.clone());
            let out = module.apply(&v, (x.clone(), true), rngs())?;
            Ok(y.sub(&out)?.square().mean_all())
        };
        let (l, grads) = flaxen::core::value_and_grad(loss, &variables.params()).unwrap();
        assert_bits(&format!("step {i} loss"), &l.to_vec(), &step.train_loss);
        assert_tree(&format!("step {i} grads"), &grads, &step.grads);
        let params = Sgd::new(1e-3).update(&variables.params(), &grads).unwrap();
        assert_tree(&format!("step {i} params"), &params, &step.params);
        variables = Variables::new()
            .with("params", params)
            .with("other_collection", other);
        train_rng = next_rng;
        let out = module.apply(&variables, (x.clone(), false), ()).unwrap();
        assert_bits(&format!("step {i} eval_out"), &out.to_vec(), &step.eval_out);
        let eval_loss = y.sub(&out).unwrap().square().mean_all();
        assert_bits(
            &format!("step {i} eval_loss"),
            &eval_loss.to_vec(),
            &step.eval_loss,
        );
    }
}

#[test]
fn printed_losses_match_the_guide() {
    let [params_rng, other_rng, mut train_rng] = random::split_n(random::key(0));
    let x = Tensor::ones(&[1, 3]);
    let y = Tensor::ones(&[1, 2]);
    let module = Model;
    let mut variables = module
        .init(
            Rngs::from([("params", params_rng), ("other", other_rng)]),
            (x.clone(), false),
        )
        .unwrap();
    let mut printed = Vec::new();
    for _ in 0..10 {
        let [dropout_rng, next_rng] = random::split_n(train_rng);
        let other = variables.collection("other_collection").cloned().unwrap();
        let loss = |params: &flaxen::tensor::Tree| {
            let v = Variables::new()
                .with("params", params.clone())
                .with("other_collection", other.clone());
            let out = module.apply(
                &v,
                (x.clone(), true),
                Rngs::none().with("dropout", random::clone(&dropout_rng)),
            )?;
            Ok(y.sub(&out)?.square().mean_all())
        };
        let grads = grad(loss, &variables.params()).unwrap();
        let params = Sgd::new(1e-3).update(&variables.params(), &grads).unwrap();
        variables = Variables::new()
            .with("params", params)
            .with("other_collection", other);
        train_rng = next_rng;
        let out = module.apply(&variables, (x.clone(), false), ()).unwrap();
        printed.push(y.sub(&out).unwrap().square().mean_all().item().unwrap());
    }
    let guide = [
        "2.518454",
        "2.4859657",
        "2.4171872",
        "2.412684",
        "2.3435805",
        "2.2773488",
        "2.2592616",
        "2.2009292",
        "2.1839895",
        "2.1707344",
    ];
    let printed: Vec<String> = printed.iter().map(|l| l.to_string()).collect();
    assert_eq!(printed, guide);
}
