//! `Tensor::matmul` against `jnp.matmul` (jax 0.10.2, CPU), bit for bit:
//! products and both cotangents of `jax.vjp`, eager and through a compiled
//! step (tools/oracle/generate_matmul.py writes tests/fixtures/matmul.json;
//! both sides make the inputs with [`inputs`], so it holds expected results
//! only: bits, or for more than 4,096 elements the SHA-1 of the bits).

mod common;

use common::{assert_only_known, differing, hashed_inputs, load_fixture, Expected};
use flaxen::tensor::{jit_value_and_grad, vjp, Tensor, Tree};
use serde::Deserialize;

#[derive(Deserialize)]
struct Case {
    a_shape: Vec<usize>,
    b_shape: Vec<usize>,
    y: Expected,
    da: Expected,
    db: Expected,
    jit_y: Option<Expected>,
    jit_da: Option<Expected>,
    jit_db: Option<Expected>,
}

#[derive(Deserialize)]
struct Fixture {
    cases: Vec<Case>,
}

/// Case `i`'s operands `a`, `b` and cotangent `g`.
fn operands(i: usize, case: &Case, y_shape: &[usize]) -> (Tensor, Tensor, Tensor) {
    let i = i as u64;
    (
        hashed_inputs(&case.a_shape, 3 * i),
        hashed_inputs(&case.b_shape, 3 * i + 1),
        hashed_inputs(y_shape, 3 * i + 2),
    )
}

/// Products not yet in XLA's order (none now: the one-row cotangents run
/// XLA's row-major GEMV, batched and broadcast products its folded
/// `dot_general`; see tests/batched_matmul.rs). An entry names a case and
/// output, e.g. `"[1, 16] @ [16, 8] da"`.
const KNOWN: [&str; 0] = [];

#[test]
fn eager_products_and_cotangents_are_bit_exact() {
    let fixture: Fixture = load_fixture("matmul.json");
    let mut bad = Vec::new();
    let mut still_known = Vec::new();
    for (i, case) in fixture.cases.iter().enumerate() {
        // Eager and jitted JAX agree on every recorded case.
        assert!(case.jit_y.is_none() && case.jit_da.is_none() && case.jit_db.is_none());
        let y_shape = Tensor::zeros(&case.a_shape)
            .matmul(&Tensor::zeros(&case.b_shape))
            .unwrap()
            .shape()
            .to_vec();
        let (a, b, g) = operands(i, case, &y_shape);
        let params = Tree::new().with("a", a).with("b", b);
        let (y, pullback) = vjp(|p| Ok(p.tensor("a")?.matmul(p.tensor("b")?)?), &params).unwrap();
        let grads = pullback.call(&g).unwrap();
        let name = format!("{:?} @ {:?}", case.a_shape, case.b_shape);
        for (what, got, want) in [
            ("y", &y, &case.y),
            ("da", grads.tensor("a").unwrap(), &case.da),
            ("db", grads.tensor("b").unwrap(), &case.db),
        ] {
            let Some(diff) = differing(got, want) else {
                continue;
            };
            let label = format!("{name} {what}");
            if KNOWN.contains(&label.as_str()) {
                still_known.push(label);
            } else {
                bad.push(format!("{label}: {diff}"));
            }
        }
    }
    assert_only_known(&bad, &still_known, &KNOWN);
}

/// The 2-D cases through a compiled step: loss `sum(a @ b * g)`, whose
/// cotangent of `a @ b` is `g` exactly, so the gradients are the matmul
/// VJPs of the compiled replay.
#[test]
fn compiled_cotangents_are_bit_exact() {
    let fixture: Fixture = load_fixture("matmul.json");
    let mut bad = Vec::new();
    for (i, case) in fixture
        .cases
        .iter()
        .enumerate()
        .filter(|(_, c)| c.a_shape.len() == 2 && c.b_shape.len() == 2)
    {
        let (a, b, g) = operands(i, case, &[case.a_shape[0], case.b_shape[1]]);
        let params = Tree::new().with("a", a).with("b", b);
        let mut step = jit_value_and_grad(|p: &Tree| {
            Ok(p.tensor("a")?.matmul(p.tensor("b")?)?.mul(&g)?.sum_all())
        });
        step.call(&params).unwrap();
        let (_, grads) = step.call(&params).unwrap();
        let name = format!("{:?} @ {:?}", case.a_shape, case.b_shape);
        for (what, got, want) in [
            ("da", grads.tensor("a").unwrap(), &case.da),
            ("db", grads.tensor("b").unwrap(), &case.db),
        ] {
            if let Some(diff) = differing(got, want) {
                if !KNOWN.contains(&format!("{name} {what}").as_str()) {
                    bad.push(format!("{name} {what}: {diff}"));
                }
            }
        }
    }
    assert!(
        bad.is_empty(),
        "compiled gradients that differ from JAX's:\n{}",
        bad.join("\n")
    );
}
