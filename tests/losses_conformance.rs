//! optax 0.2.8's losses (tools/oracle/generate_losses.py): values, and the
//! jitted gradient of `sum(loss * c)`, bit for bit. Integer labels
//! (`softmax_cross_entropy_with_integer_labels`) have their own map.

mod common;

use common::F32Array as Array;

use std::collections::BTreeMap;

use flaxen::optim::losses;
use flaxen::tensor::{as_jitted, grad, jit_value_and_grad_with, Tensor, Tree};
use ndarray::{ArrayD, IxDyn};
use serde::Deserialize;

#[derive(Deserialize)]
struct Case {
    x: Array,
    other: Array,
    c: Array,
    value: Array,
    grad: Array,
}

/// An int32 array as the oracle scripts write it.
#[derive(Deserialize)]
struct IntArray {
    shape: Vec<usize>,
    int: Vec<i32>,
}

/// A case whose `other` is integer labels.
#[derive(Deserialize)]
struct IntCase {
    x: Array,
    other: IntArray,
    c: Array,
    value: Array,
    grad: Array,
}

#[derive(Deserialize)]
struct Fixture {
    cases: BTreeMap<String, Case>,
    integer_label_cases: BTreeMap<String, IntCase>,
}

fn bits(t: &Tensor) -> Vec<u32> {
    t.to_vec().iter().map(|v| v.to_bits()).collect()
}

fn want_bits(a: &Array) -> Vec<u32> {
    a.data.iter().map(|v| v.to_bits()).collect()
}

/// Checks `loss(x, other)` and the jitted gradient of `sum(loss * c)`.
fn check(name: &str, loss: impl Fn(&Tensor, &Tensor) -> flaxen::Result<Tensor>) {
    check_known(name, loss, 0);
}

/// [`check`] with a gradient whose worst distance is `known_ulp` (measured,
/// documented at the call).
fn check_known(
    name: &str,
    loss: impl Fn(&Tensor, &Tensor) -> flaxen::Result<Tensor>,
    known_ulp: u64,
) {
    let f: Fixture = common::load_fixture("losses.json");
    let c = &f.cases[name];
    let (x, other, weights) = (c.x.tensor(), c.other.tensor(), c.c.tensor());
    let value = as_jitted(|| loss(&x, &other)).unwrap();
    assert_eq!(value.shape(), c.value.shape.as_slice(), "{name}");
    assert_eq!(bits(&value), want_bits(&c.value), "{name} value");
    let g = as_jitted(|| {
        grad(
            |p| {
                Ok(loss(p.as_tensor().unwrap(), &other)?
                    .mul(&weights)?
                    .sum_all())
            },
            &Tree::from(x.clone()),
        )
    })
    .unwrap();
    let got = g.as_tensor().unwrap().to_vec();
    let worst = got
        .iter()
        .zip(&c.grad.data)
        .map(|(&a, &b)| common::ulp_distance(a, b))
        .max()
        .unwrap_or(0);
    assert_eq!(worst, known_ulp, "{name} gradient: worst {worst} ulp");
}

/// `softmax_cross_entropy_with_integer_labels(x, labels)` and the jitted
/// gradient of `sum(loss * c)`, every bit (signed zeros included).
fn check_integer_labels(name: &str) {
    let f: Fixture = common::load_fixture("losses.json");
    let c = &f.integer_label_cases[name];
    let (x, weights) = (c.x.tensor(), c.c.tensor());
    let labels = ArrayD::from_shape_vec(IxDyn(&c.other.shape), c.other.int.clone()).unwrap();
    let loss = |p: &Tensor| losses::softmax_cross_entropy_with_integer_labels(p, &labels);
    let value = as_jitted(|| loss(&x)).unwrap();
    assert_eq!(value.shape(), c.value.shape.as_slice(), "{name}");
    assert_eq!(bits(&value), want_bits(&c.value), "{name} value");
    let g = as_jitted(|| {
        grad(
            |p| Ok(loss(p.as_tensor().unwrap())?.mul(&weights)?.sum_all()),
            &Tree::from(x.clone()),
        )
    })
    .unwrap();
    let g = g.as_tensor().unwrap();
    assert_eq!(g.shape(), c.grad.shape.as_slice(), "{name} gradient");
    assert_eq!(bits(g), want_bits(&c.grad), "{name} gradient");
}

/// Random logits; the same times 30 (`exp` underflows to 0 away from the
/// maximum); rows offset by up to 1e4; ties at the maximum, constant rows,
/// signed zeros and tiny values; a batch of [2, 3].
const INTEGER_LABEL_CASES: [&str; 5] = [
    "softmax_cross_entropy_with_integer_labels",
    "softmax_cross_entropy_with_integer_labels_wide",
    "softmax_cross_entropy_with_integer_labels_offset",
    "softmax_cross_entropy_with_integer_labels_ties",
    "softmax_cross_entropy_with_integer_labels_3d",
];

#[test]
fn integer_label_cross_entropy() {
    for name in INTEGER_LABEL_CASES {
        check_integer_labels(name);
    }
    let f: Fixture = common::load_fixture("losses.json");
    let mut listed = INTEGER_LABEL_CASES.to_vec();
    listed.sort_unstable();
    assert!(
        f.integer_label_cases.keys().eq(listed),
        "every case is checked"
    );
}

#[test]
fn regression_losses() {
    check("squared_error", |p, t| losses::squared_error(p, Some(t)));
    check("l2_loss", |p, t| losses::l2_loss(p, Some(t)));
    check("huber_loss", |p, t| losses::huber_loss(p, Some(t), 1.0));
    check("huber_loss_delta_0.5", |p, t| {
        losses::huber_loss(p, Some(t), 0.5)
    });
    // Under jit the two terms of logaddexp's derivative (both reach the
    // same error) are summed with one fused multiply-add.
    check("log_cosh", |p, t| losses::log_cosh(p, Some(t)));
}

/// The jitted gradient of `sum(loss * c)` with the labels and weights as
/// inputs of a compiled step (`jit_value_and_grad_with` around
/// `as_jitted`), replayed: the
/// fixture's bits on every call.
fn check_compiled(name: &str) {
    let f: Fixture = common::load_fixture("losses.json");
    let c = &f.cases[name];
    let params = Tree::new().with("x", c.x.tensor());
    let batch = Tree::new()
        .with("labels", c.other.tensor())
        .with("c", c.c.tensor());
    let mut step = jit_value_and_grad_with(|p: &Tree, b: &Tree| {
        as_jitted(|| {
            Ok(
                losses::softmax_cross_entropy(p.tensor("x")?, b.tensor("labels")?)?
                    .mul(b.tensor("c")?)?
                    .sum_all(),
            )
        })
    });
    for call in 0..3 {
        let (_, g) = step.call_with(&params, &batch).unwrap();
        let got = bits(g.tensor("x").unwrap());
        assert_eq!(got, want_bits(&c.grad), "{name} compiled, call {call}");
    }
    assert!(step.is_compiled(), "{name}: replayed");
}

/// The soft-label shapes of the fixture (tools/oracle/generate_losses.py,
/// `soft_label_cases`), random soft labels and smoothed one-hot ones.
const SOFT_LABEL_SHAPES: [&str; 6] = ["1x5", "3x1", "2x32", "5x33", "64x10", "2x3x7"];

#[test]
fn classification_losses() {
    check(
        "softmax_cross_entropy_onehot",
        losses::softmax_cross_entropy,
    );
    // Known: with soft labels closed over by the jitted gradient, XLA
    // folds the label products and their row sums into constants, and its
    // constant folder (HloEvaluator) sums in double precision (measured on
    // rows of 5 to 100): up to 7 ulp. flaxen sums them at run time, as a
    // step whose labels are arguments does (the `_args` cases: exact). The
    // values, and the gradient with one-hot labels, are exact.
    check_known(
        "softmax_cross_entropy_soft",
        losses::softmax_cross_entropy,
        7,
    );
    // The same with the labels and weights as arguments of the jitted
    // gradient, as in a training step: nothing to fold.
    check(
        "softmax_cross_entropy_soft_args",
        losses::softmax_cross_entropy,
    );
    for case in SOFT_LABEL_SHAPES {
        for labels in ["soft", "smoothed"] {
            let name = format!("softmax_cross_entropy_{labels}_args_{case}");
            check(&name, losses::softmax_cross_entropy);
            check_compiled(&name);
        }
    }
    check("kl_divergence", losses::kl_divergence);
    check(
        "sigmoid_binary_cross_entropy",
        losses::sigmoid_binary_cross_entropy,
    );
}
