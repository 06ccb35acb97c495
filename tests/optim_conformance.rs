//! `flaxen::optim` against optax 0.2.8 stepped under `jax.jit`
//! (tools/oracle/generate_optim.py): updates, parameters and every state
//! leaf after each step, and schedule values, bit for bit.

mod common;

use std::collections::BTreeMap;

use flaxen::optim::{
    adam, adamw, apply_updates, warmup_cosine_decay_schedule, GradientTransformation, Schedule,
};
use flaxen::tensor::{LeafRef, Tensor, Tree};
use serde::Deserialize;

#[derive(Deserialize)]
struct Leaf {
    shape: Vec<usize>,
    #[serde(default)]
    data: Vec<f32>,
    #[serde(default)]
    int: Vec<i32>,
}

#[derive(Deserialize)]
struct Step {
    grads: Vec<(String, Leaf)>,
    updates: Vec<(String, Leaf)>,
    params: Vec<(String, Leaf)>,
    state: Vec<(String, Leaf)>,
}

#[derive(Deserialize)]
struct Run {
    params: Vec<(String, Leaf)>,
    steps: Vec<Step>,
}

#[derive(Deserialize)]
struct Fixture {
    optimizers: BTreeMap<String, Run>,
    schedules: BTreeMap<String, Vec<f32>>,
}

/// `['w']` → `w`; `[0].mu['w']` → `0/mu/w`.
fn path(keystr: &str) -> String {
    keystr
        .replace("']", "")
        .replace("['", "/")
        .replace('[', "/")
        .replace(']', "")
        .replace('.', "/")
        .trim_start_matches('/')
        .to_string()
}

fn tree(leaves: &[(String, Leaf)]) -> Tree {
    let mut t = Tree::new();
    for (k, l) in leaves {
        t.insert(path(k), Tensor::from_vec(l.data.clone(), &l.shape).unwrap())
            .unwrap();
    }
    t
}

/// Compares every leaf bit for bit.
fn check(got: &Tree, want: &[(String, Leaf)], what: &str) {
    let got: BTreeMap<String, LeafRef<'_>> = got.leaf_paths().into_iter().collect();
    assert_eq!(
        got.len(),
        want.len(),
        "{what}: {:?}",
        got.keys().collect::<Vec<_>>()
    );
    for (k, l) in want {
        let p = path(k);
        match got.get(&p) {
            Some(LeafRef::Tensor(t)) => {
                let bits: Vec<u32> = t.to_vec().iter().map(|v| v.to_bits()).collect();
                let want: Vec<u32> = l.data.iter().map(|v| v.to_bits()).collect();
                assert_eq!(bits, want, "{what} {p}");
            }
            Some(LeafRef::Array(a)) => {
                let v: Vec<i32> = a.as_i32().unwrap().iter().copied().collect();
                assert_eq!(v, l.int, "{what} {p}");
            }
            None => panic!("{what}: missing {p}"),
        }
    }
}

fn run(name: &str, tx: &dyn GradientTransformation) {
    let f: Fixture = common::load_fixture("optim.json");
    let r = &f.optimizers[name];
    let mut params = tree(&r.params);
    let mut state = tx.init(&params).unwrap();
    for (i, s) in r.steps.iter().enumerate() {
        let g = tree(&s.grads);
        let (updates, next) = tx.update(&g, &state, Some(&params)).unwrap();
        check(&updates, &s.updates, &format!("{name} step {i} updates"));
        params = apply_updates(&params, &updates).unwrap();
        check(&params, &s.params, &format!("{name} step {i} params"));
        check(&next, &s.state, &format!("{name} step {i} state"));
        state = next;
    }
}

#[test]
fn adam_steps() {
    run("adam", &adam(1e-2));
}

#[test]
fn adamw_steps() {
    run("adamw", &adamw(1e-2, 1e-2));
}

#[test]
fn adamw_with_a_schedule() {
    run(
        "adamw_schedule",
        &adamw(warmup_cosine_decay_schedule(0.0, 3e-3, 2, 10, 1e-5), 1e-4),
    );
}

fn values(s: &Schedule, n: usize) -> Vec<u32> {
    (0..n as i32).map(|t| s.value(t).to_bits()).collect()
}

#[test]
fn warmup_cosine_decay_under_jit() {
    let f: Fixture = common::load_fixture("optim.json");
    let want: Vec<u32> = f.schedules["warmup_cosine_decay(0,3e-3,50,450,1e-5)"]
        .iter()
        .map(|v| v.to_bits())
        .collect();
    let s = warmup_cosine_decay_schedule(0.0, 3e-3, 50, 450, 1e-5);
    assert_eq!(values(&s, want.len()), want);
}

#[test]
fn sgd_steps() {
    run("sgd", &flaxen::optim::sgd(0.1, None, false));
    run("sgd_momentum", &flaxen::optim::sgd(0.1, Some(0.9), false));
    run("sgd_nesterov", &flaxen::optim::sgd(0.1, Some(0.9), true));
}

#[test]
fn rmsprop_adagrad_lion_steps() {
    common::require_rsqrt_as_recorded!();
    run("rmsprop", &flaxen::optim::rmsprop(1e-2, 0.9, 1e-8));
    run("adagrad", &flaxen::optim::adagrad(1e-1, 0.1, 1e-7));
    run("lion", &flaxen::optim::lion(1e-3, 0.9, 0.99, 1e-3));
}

#[test]
fn clip_by_global_norm_then_adam() {
    let tx = flaxen::optim::chain(vec![
        Box::new(flaxen::optim::clip_by_global_norm(0.5)),
        Box::new(adam(1e-2)),
    ]);
    // After clipping, the gradient reaches Adam's moments as a `select`
    // (clipped or not), and LLVM contracts the decayed moment's product
    // instead of the gradient's in `nu`, and in `mu` of the one-element
    // leaf: `fma(nu, b2, round(g² * (1 - b2)))` (read off the kernels).
    run("clip_adam", &tx);
}

#[test]
fn schedules_under_jit() {
    use flaxen::optim::{
        constant_schedule, cosine_decay_schedule, exponential_decay, linear_schedule,
        piecewise_constant_schedule,
    };
    let f: Fixture = common::load_fixture("optim.json");
    let cases: Vec<(&str, Schedule)> = vec![
        (
            "exponential_decay(0.1,7,0.9)",
            exponential_decay(0.1, 7, 0.9, 0, false, None),
        ),
        (
            "exponential_decay(0.1,7,0.9,begin=5,staircase)",
            exponential_decay(0.1, 7, 0.9, 5, true, None),
        ),
        (
            "exponential_decay(0.1,3,0.5,end=0.01)",
            exponential_decay(0.1, 3, 0.5, 0, false, Some(0.01)),
        ),
        (
            "piecewise_constant(0.1,{10:0.5,30:0.1})",
            piecewise_constant_schedule(0.1, &[(10, 0.5), (30, 0.1)]),
        ),
        (
            "linear(1.0,0.1,20,begin=3)",
            linear_schedule(1.0, 0.1, 20, 3),
        ),
        (
            "cosine_decay(0.5,37,0.1)",
            cosine_decay_schedule(0.5, 37, 0.1),
        ),
        ("constant(0.3)", constant_schedule(0.3)),
    ];
    for (name, s) in cases {
        let want: Vec<u32> = f.schedules[name].iter().map(|v| v.to_bits()).collect();
        let got = values(&s, want.len());
        let bad: Vec<usize> = (0..want.len()).filter(|&i| got[i] != want[i]).collect();
        assert!(bad.is_empty(), "{name}: counts {bad:?} differ");
    }
}
