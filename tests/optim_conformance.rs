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
