//! `softmax` and `log_softmax` against JAX (tools/oracle/generate_softmax.py,
//! jax 0.10.2) in the three ways JAX computes them: eagerly, under eager
//! `jax.vjp`, and jitted (`as_jitted`, and a compiled step replaying it),
//! bit for bit — from 4,096 elements on with YNNPACK's sums and, where XLA
//! fuses it into them, YNNPACK's `exp`.

mod common;
use common::{differing, load_fixture, Expected};
use flaxen::tensor::{as_jitted, grad, jit_value_and_grad_with, vjp, Tensor, Tree};
use serde::Deserialize;

#[derive(Deserialize)]
struct Fixture {
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    shape: Vec<usize>,
    softmax: Modes,
    log_softmax: Modes,
}

#[derive(Deserialize)]
struct Modes {
    eager: Expected,
    vjp_y: Expected,
    vjp_dx: Expected,
    jit: Expected,
    jit_dx: Expected,
}

/// The generator's `inputs`: `((i * 2654435761 + seed * 40503) mod 2^32) /
/// 2^32 * 8 - 4`, exact in f64, then f32.
fn inputs(shape: &[usize], seed: u64) -> Tensor {
    let n: usize = shape.iter().product();
    let v = (0..n as u64)
        .map(|i| {
            let h = (i * 2654435761 + seed * 40503) % (1 << 32);
            (h as f64 / 4294967296.0 * 8.0 - 4.0) as f32
        })
        .collect();
    Tensor::from_vec(v, shape).unwrap()
}

type Op = fn(&Tensor) -> flaxen::Result<Tensor>;

fn softmax(x: &Tensor) -> flaxen::Result<Tensor> {
    Ok(x.softmax(-1)?)
}

fn log_softmax(x: &Tensor) -> flaxen::Result<Tensor> {
    Ok(x.log_softmax(-1)?)
}

/// What differs from the fixture in one case and function, each mode
/// named.
fn check(shape: &[usize], name: &str, f: Op, want: &Modes) -> Vec<String> {
    let x = inputs(shape, 1);
    let c = inputs(shape, 2);
    let mut bad = Vec::new();
    let mut note = |what: &str, got: &Tensor, want: &Expected| {
        if let Some(d) = differing(got, want) {
            bad.push(format!("{name} {shape:?} {what}: {d}"));
        }
    };
    note("eager", &f(&x).unwrap(), &want.eager);
    let (y, pull) = vjp(|t| f(t.as_tensor().unwrap()), &Tree::from(x.clone())).unwrap();
    note("vjp value", &y, &want.vjp_y);
    let dx = pull.call(&c).unwrap();
    note("vjp cotangent", dx.as_tensor().unwrap(), &want.vjp_dx);
    note("jit", &as_jitted(|| f(&x)).unwrap(), &want.jit);
    let loss = |p: &Tree, b: &Tree| -> flaxen::Result<Tensor> {
        as_jitted(|| Ok(f(p.as_tensor().unwrap())?.mul(b.tensor("c")?)?.sum_all()))
    };
    let batch = Tree::new().with("c", c.clone());
    let params = Tree::from(x.clone());
    let g = grad(|p| loss(p, &batch), &params).unwrap();
    note("jit grad", g.as_tensor().unwrap(), &want.jit_dx);
    let mut step = jit_value_and_grad_with(loss);
    for call in 0..2 {
        let (_, g) = step.call_with(&params, &batch).unwrap();
        note(
            &format!("compiled grad, call {call}"),
            g.as_tensor().unwrap(),
            &want.jit_dx,
        );
    }
    bad
}

#[test]
fn softmaxes_match_jax_in_each_mode() {
    let f: Fixture = load_fixture("softmax.json");
    let mut bad = Vec::new();
    for case in &f.cases {
        if case.shape.last() > Some(&32768) && !common::ynn_pooled() {
            eprintln!(
                "{:?} not run: one CPU (YNNPACK does not tile without a pool)",
                case.shape
            );
            continue;
        }
        bad.extend(check(&case.shape, "softmax", softmax, &case.softmax));
        bad.extend(check(
            &case.shape,
            "log_softmax",
            log_softmax,
            &case.log_softmax,
        ));
    }
    assert!(bad.is_empty(), "{} differ:\n{}", bad.len(), bad.join("\n"));
}
