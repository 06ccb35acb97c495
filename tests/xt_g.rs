//! `x.T @ g` with one column (`x: [k, f]`, `g: [k, 1]`) against JAX
//! (tools/oracle/generate_xt_g.py, jax 0.10.2), bit for bit: written out
//! eagerly (JAX copies the transpose, then its row-major GEMV), written out
//! jitted (`as_jitted`: XLA's fused loop as LLVM vectorizes it, the GEMV
//! from 4,096 rows), and as the weight gradient of a `Dense(1)` head
//! (XLA's column-major GEMV), eagerly, under `as_jitted` and in a compiled
//! step.

mod common;

use common::{differing, uniform_inputs, Expected};
use flaxen::tensor::{as_jitted, grad, jit_value_and_grad_with, Tensor, Tree};
use serde::Deserialize;

#[derive(Deserialize)]
struct Case {
    k: usize,
    f: usize,
    eager: Expected,
    jit: Expected,
    grad: Expected,
}

#[derive(Deserialize)]
struct More {
    k: usize,
    f: usize,
    jit: Expected,
}

#[derive(Deserialize)]
struct Fixture {
    cases: Vec<Case>,
    more_jit: Vec<More>,
}

/// The oracle's inputs for `k` rows and `f` features.
fn operands(k: usize, f: usize) -> (Tensor, Tensor) {
    let seed = (31 * f + k) as u64;
    (
        uniform_inputs(&[k, f], seed, 2.0),
        uniform_inputs(&[k, 1], seed + 1, 2.0),
    )
}

#[test]
fn written_out_eagerly_copies_then_gemv() {
    let fixture: Fixture = common::load_fixture("xt_g.json");
    let mut bad = Vec::new();
    for c in &fixture.cases {
        let (x, g) = operands(c.k, c.f);
        let y = x.transpose().matmul(&g).unwrap();
        if let Some(d) = differing(&y, &c.eager) {
            bad.push(format!("k {} f {}: {d}", c.k, c.f));
        }
    }
    assert!(bad.is_empty(), "{bad:#?}");
    assert_eq!(fixture.cases.len(), 539);
}

#[test]
fn written_out_jitted_as_xla_fuses_it() {
    let fixture: Fixture = common::load_fixture("xt_g.json");
    let mut bad = Vec::new();
    let all = fixture
        .cases
        .iter()
        .map(|c| (c.k, c.f, &c.jit))
        .chain(fixture.more_jit.iter().map(|c| (c.k, c.f, &c.jit)));
    for (k, f, want) in all {
        let (x, g) = operands(k, f);
        let y = as_jitted(|| x.transpose().matmul(&g).unwrap());
        if let Some(d) = differing(&y, want) {
            bad.push(format!("k {k} f {f}: {d}"));
        }
    }
    assert!(bad.is_empty(), "{bad:#?}");
    assert_eq!(fixture.cases.len() + fixture.more_jit.len(), 770);
}

#[test]
fn dense_head_weight_gradients_match_xla() {
    let fixture: Fixture = common::load_fixture("xt_g.json");
    let loss = |t: &Tree, b: &Tree| -> flaxen::Result<Tensor> {
        let y = b.tensor("x")?.matmul(t.tensor("w")?)?;
        Ok(y.mul(b.tensor("c")?)?.sum_all())
    };
    let mut bad = Vec::new();
    for c in &fixture.cases {
        let (x, g) = operands(c.k, c.f);
        let params = Tree::new().with("w", Tensor::zeros(&[c.f, 1]));
        let batch = Tree::new().with("x", x).with("c", g);
        let eager = grad(|t: &Tree| loss(t, &batch), &params).unwrap();
        let jitted = as_jitted(|| grad(|t: &Tree| loss(t, &batch), &params).unwrap());
        let mut step = jit_value_and_grad_with(loss);
        let mut got = vec![("eager", eager), ("as_jitted", jitted)];
        for call in ["compiled trace", "compiled replay"] {
            got.push((call, step.call_with(&params, &batch).unwrap().1));
        }
        for (how, grads) in got {
            if let Some(d) = differing(grads.tensor("w").unwrap(), &c.grad) {
                bad.push(format!("{how} k {} f {}: {d}", c.k, c.f));
            }
        }
    }
    assert!(bad.is_empty(), "{bad:#?}");
}
