//! Batched products against JAX (jax 0.10.2, CPU), bit for bit: 3-D and
//! 4-D `jnp.matmul` (both operands batched, one broadcast, 1-D operands,
//! batch axes of length 1) and the two `jnp.einsum` forms of
//! `flax.linen.dot_product_attention`, forward and both cotangents of
//! `jax.vjp`, computed eagerly (tools/oracle/generate_batched_matmul.py
//! writes tests/fixtures/batched_matmul.json; both sides draw the inputs
//! with `random::normal`, so it holds expected bits only), and NaN,
//! infinities and zeros set into some of them, compared NaN for NaN.

mod common;

use common::{assert_only_known, differing, load_fixture, Expected};
use flaxen::random;
use flaxen::tensor::{jit_value_and_grad, set_exact_matmul_limit, vjp, Tensor, Tree};
use serde::Deserialize;

#[derive(Deserialize)]
struct Case {
    kind: String,
    a_shape: Vec<usize>,
    b_shape: Vec<usize>,
    seeds: [u32; 3],
    /// Elements of a, b and g set to these bits ([row-major index, bits]).
    #[serde(default)]
    edits: [Vec<(usize, u32)>; 3],
    y: Expected,
    da: Expected,
    db: Expected,
    /// Jitted JAX's bits where they differ from eager JAX's (only in
    /// cotangents); flaxen mirrors the eager ones.
    jit_y: Option<Expected>,
}

#[derive(Deserialize)]
struct Fixture {
    cases: Vec<Case>,
}

/// Case `case`'s operand `which` (0: a, 1: b, 2: g) of `shape`: drawn from
/// its seed, then the oracle's edits.
fn operand(case: &Case, which: usize, shape: &[usize]) -> Tensor {
    let mut v = random::normal(random::key(case.seeds[which]), shape).unwrap();
    let flat = v.as_slice_mut().expect("row-major");
    for &(i, bits) in &case.edits[which] {
        flat[i] = f32::from_bits(bits);
    }
    Tensor::from_array(v)
}

/// The case's product as flaxen computes it (attention's einsums as
/// `src/nn/attention.rs` makes them: one `dot_general` each, as
/// `jnp.einsum` does).
fn product(kind: &str, a: &Tensor, b: &Tensor) -> flaxen::Result<Tensor> {
    if kind == "matmul" {
        return Ok(a.matmul(b)?);
    }
    let nd = a.ndim();
    // The `...` axes and the heads.
    let mut batch: Vec<usize> = (0..nd - 3).collect();
    Ok(match kind {
        // '...qhd,...khd->...hqk': q . k over the depth.
        "scores" => {
            batch.push(nd - 2);
            a.dot_general(b, (&[nd - 1], &[nd - 1]), (&batch, &batch))?
        }
        // '...hqk,...khd->...qhd': v . w over the keys ([..., h, d, q]),
        // then [..., q, h, d].
        "values" => {
            let wb: Vec<usize> = (0..nd - 2).collect();
            batch.push(nd - 2);
            let out = b.dot_general(a, (&[nd - 3], &[nd - 1]), (&batch, &wb))?;
            let mut perm: Vec<usize> = (0..nd - 3).collect();
            perm.extend([nd - 1, nd - 3, nd - 2]);
            out.permute(&perm)?
        }
        other => panic!("unknown kind {other}"),
    })
}

/// Outputs not yet in XLA's order (case, then `y`, `da` or `db`).
const KNOWN: [&str; 0] = [];

#[test]
fn eager_batched_products_and_cotangents_are_bit_exact() {
    // Every product in XLA's order, however large.
    set_exact_matmul_limit(usize::MAX);
    let fixture: Fixture = load_fixture("batched_matmul.json");
    let mut bad = Vec::new();
    let mut still_known = Vec::new();
    for case in &fixture.cases {
        let a = operand(case, 0, &case.a_shape);
        let b = operand(case, 1, &case.b_shape);
        let params = Tree::new().with("a", a).with("b", b);
        let kind = case.kind.as_str();
        let (y, pullback) =
            vjp(|p| product(kind, p.tensor("a")?, p.tensor("b")?), &params).unwrap();
        let g = operand(case, 2, y.shape());
        let grads = pullback.call(&g).unwrap();
        let name = format!("{kind} {:?} {:?}", case.a_shape, case.b_shape);
        for (what, got, want) in [
            ("y", &y, &case.y),
            ("da", grads.tensor("a").unwrap(), &case.da),
            ("db", grads.tensor("b").unwrap(), &case.db),
        ] {
            let label = format!("{name} {what}");
            match differing(got, want) {
                Some(_) if KNOWN.contains(&label.as_str()) => still_known.push(label),
                Some(how) => bad.push(format!("{label}: {how}")),
                None => {}
            }
        }
    }
    assert_only_known(&bad, &still_known, &KNOWN);
}

/// Eager and jitted JAX give the same forward products (they differ only
/// in seven cotangents, which XLA fuses differently under `jit`; flaxen's
/// compiled steps mirror the eager ones, see below).
#[test]
fn jitted_jax_forward_equals_eager() {
    let fixture: Fixture = load_fixture("batched_matmul.json");
    for case in &fixture.cases {
        assert!(
            case.jit_y.is_none(),
            "{} {:?} {:?}",
            case.kind,
            case.a_shape,
            case.b_shape
        );
    }
}

/// The same cotangents through a compiled step: loss `sum(product * g)`,
/// whose cotangent of the product is `g` exactly.
#[test]
fn compiled_cotangents_match_the_eager_oracle() {
    set_exact_matmul_limit(usize::MAX);
    let fixture: Fixture = load_fixture("batched_matmul.json");
    let mut bad = Vec::new();
    for case in &fixture.cases {
        let a = operand(case, 0, &case.a_shape);
        let b = operand(case, 1, &case.b_shape);
        let kind = case.kind.clone();
        let y_shape = product(&kind, &a, &b).unwrap().shape().to_vec();
        let g = operand(case, 2, &y_shape);
        let params = Tree::new().with("a", a).with("b", b);
        let mut step = jit_value_and_grad(move |p: &Tree| {
            Ok(product(&kind, p.tensor("a")?, p.tensor("b")?)?
                .mul(&g)?
                .sum_all())
        });
        step.call(&params).unwrap();
        let (_, grads) = step.call(&params).unwrap();
        let name = format!("{} {:?} {:?}", case.kind, case.a_shape, case.b_shape);
        for (what, got, want) in [
            ("da", grads.tensor("a").unwrap(), &case.da),
            ("db", grads.tensor("b").unwrap(), &case.db),
        ] {
            let label = format!("{name} {what}");
            if let Some(how) = differing(got, want) {
                if !KNOWN.contains(&label.as_str()) {
                    bad.push(format!("{label}: {how}"));
                }
            }
        }
    }
    assert!(
        bad.is_empty(),
        "compiled cotangents differ:\n{}",
        bad.join("\n")
    );
}

/// Bad dimension numbers are typed errors naming the shapes and axes;
/// empty axes give empty or all-zero results, as `lax.dot_general` does.
#[test]
fn dot_general_bad_input() {
    let a = Tensor::zeros(&[2, 3, 4]);
    let b = Tensor::zeros(&[2, 4, 5]);
    for (lc, rc, lb, rb) in [
        (&[3][..], &[1][..], &[0][..], &[0][..]),
        (&[2], &[1], &[0, 0], &[0, 0]),
        (&[2], &[1], &[0], &[]),
        (&[1], &[1], &[0], &[0]),
        (&[2, 2], &[1, 1], &[], &[]),
    ] {
        let err = a.dot_general(&b, (lc, rc), (lb, rb)).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("[2, 3, 4]") && msg.contains("[2, 4, 5]"),
            "{msg}"
        );
    }
    assert!(a.matmul(&Tensor::zeros(&[3, 4, 5])).is_err());
    // Zero-length axes: batch, free and contracting.
    let cases: [(&[usize], &[usize], &[usize]); 4] = [
        (&[0, 3, 4], &[4, 5], &[0, 3, 5]),
        (&[2, 3, 0], &[0, 5], &[2, 3, 5]),
        (&[3, 0], &[2, 0, 5], &[2, 3, 5]),
        (&[2, 0, 4], &[4, 5], &[2, 0, 5]),
    ];
    for (sa, sb, want) in cases {
        let y = Tensor::zeros(sa).matmul(&Tensor::zeros(sb)).unwrap();
        assert_eq!(y.shape(), want);
        assert!(y.to_vec().iter().all(|&v| v == 0.0));
    }
}
