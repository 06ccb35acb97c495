//! optax 0.2.8's losses (tools/oracle/generate_losses.py): values, and the
//! jitted gradient of `sum(loss * c)`, bit for bit. Integer labels
//! (`softmax_cross_entropy_with_integer_labels`) have their own map.

mod common;

use common::F32Array as Array;

use std::collections::BTreeMap;

use flaxen::optim::losses;
use flaxen::tensor::{as_jitted, grad, Tensor, Tree};
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

#[test]
fn classification_losses() {
    check(
        "softmax_cross_entropy_onehot",
        losses::softmax_cross_entropy,
    );
    // Known: with soft labels the jitted gradient differs in two rows of
    // six (up to 13 ulp, on small values). The generator closes over the
    // labels and the weights, so XLA folds the label products and their
    // row sums into constants, and its constant folder (HloEvaluator) sums
    // in double precision (measured on rows of 5 to 100); flaxen sums the
    // cotangent at run time in f32, as a step whose labels are arguments
    // does. The rest of the fused backward (`fma(sum / Σe, e, ct)`) is
    // flaxen's. The values, and the gradient with one-hot labels, are exact.
    check_known(
        "softmax_cross_entropy_soft",
        losses::softmax_cross_entropy,
        13,
    );
    check("kl_divergence", losses::kl_divergence);
    check(
        "sigmoid_binary_cross_entropy",
        losses::sigmoid_binary_cross_entropy,
    );
}
