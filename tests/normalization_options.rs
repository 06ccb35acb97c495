//! `LayerNorm`'s `reduction_axes`/`feature_axes`/`use_fast_variance`, and
//! `mask` for `LayerNorm` and `BatchNorm`, against flax 0.12.8
//! (tools/oracle/generate_api.py, "norms"): outputs, updated statistics and
//! the jitted gradient of `sum(y * c)` with respect to the parameters and
//! the input.
//!
//! Not yet bit-exact (measured worst distance asserted exactly, so that a
//! fix or a regression shows): the forward values are exact but for 1–2
//! ulp in `y` of the two-axis LayerNorm (`reduction_axes=(1, 2)`: a sum
//! over two axes, whose XLA:CPU order flaxen does not emulate yet — the
//! open "exact and fast" issue) and of the jitted slow-variance LayerNorm
//! (JAX's own eager run gives flaxen's bits; jit fuses `x - mean` into the
//! variance reduction). The gradients differ by 2–8 ulp: JAX's backward of
//! these reductions is fused by XLA in an order flaxen does not reproduce.
//! The masked mean's forward is exact (sum times the f32 reciprocal of the
//! count, as XLA computes `sum / count`).

mod common;

use common::F32Array as Array;

use std::collections::BTreeMap;

use flaxen::core::{Filter, Variables};
use flaxen::nn::{BatchNorm, LayerNorm, Module};
use flaxen::random;
use flaxen::tensor::{value_and_grad, Tensor, Tree};
use ndarray::{ArrayD, IxDyn};
use serde::Deserialize;

#[derive(Deserialize)]
struct Mask {
    shape: Vec<usize>,
    data: Vec<bool>,
}

#[derive(Deserialize)]
struct Case {
    x: Array,
    c: Array,
    variables: BTreeMap<String, Array>,
    y: Array,
    updated: BTreeMap<String, Array>,
    grad_params: BTreeMap<String, Array>,
    grad_x: Array,
    mask: Option<Mask>,
}

#[derive(Deserialize)]
struct Fixture {
    norms: BTreeMap<String, Case>,
}

thread_local! {
    /// The worst ulp distance seen in the running case, and where.
    static WORST: std::cell::RefCell<(u64, String)> =
        const { std::cell::RefCell::new((0, String::new())) };
}

/// Compares shapes exactly and values by ulp distance, keeping the worst.
fn assert_same(got: &Tensor, want: &Array, what: &str) {
    assert_eq!(got.shape(), want.shape.as_slice(), "{what}");
    let worst = got
        .to_vec()
        .iter()
        .zip(&want.data)
        .map(|(&a, &b)| common::ulp_distance(a, b))
        .max()
        .unwrap_or(0);
    WORST.with(|w| {
        let mut w = w.borrow_mut();
        if worst > w.0 {
            *w = (worst, what.to_string());
        }
    });
}

fn assert_flat(got: &[(String, &Tensor)], want: &BTreeMap<String, Array>, prefix: &str) {
    assert_eq!(got.len(), want.len(), "{prefix}");
    for (path, t) in got {
        let key = format!("{prefix}{path}");
        assert_same(t, &want[&key], &key);
    }
}

fn mask(m: &Option<Mask>) -> Option<ArrayD<bool>> {
    m.as_ref()
        .map(|m| ArrayD::from_shape_vec(IxDyn(&m.shape), m.data.clone()).unwrap())
}

/// Runs `module` as the oracle did: init, then the gradient of
/// `sum(y * c)` with the statistics mutable where `mutable`.
/// `known_ulp`: 0 where flaxen is bit-exact; otherwise the measured worst
/// distance of a difference that is understood and documented at the call.
fn check<M>(name: &str, module: M, mutable: bool, known_ulp: u64)
where
    M: Module<Input = Tensor, Output = Tensor>,
{
    WORST.with(|w| *w.borrow_mut() = (0, String::new()));
    let mut f: Fixture = common::load_fixture("api.json");
    let case = f.norms.remove(name).unwrap();
    let x = case.x.tensor();
    let c = case.c.tensor();
    let v = module.init(random::key(0), x.clone()).unwrap();
    assert_flat(&v.flatten(), &case.variables, "");
    let filter = if mutable {
        Filter::from("batch_stats")
    } else {
        Filter::Nothing
    };
    let both = Tree::new().with("params", v.params()).with("x", x.clone());
    let mut updated = Variables::new();
    let (_, grads) = value_and_grad(
        |p| {
            let mut vs = v.clone();
            vs.insert("params", p.subtree("params").unwrap());
            let (y, upd) = module.apply_mut(&vs, p.tensor("x")?.clone(), (), filter.clone())?;
            assert_same(&y.stop_gradient(), &case.y, "y");
            updated = upd;
            Ok(y.mul(&c)?.sum_all())
        },
        &both,
    )
    .unwrap();
    assert_flat(&updated.flatten(), &case.updated, "");
    let gp = grads.subtree("params").unwrap();
    assert_flat(&gp.paths(), &case.grad_params, "");
    assert_same(grads.tensor("x").unwrap(), &case.grad_x, "grad x");
    let (worst, at) = WORST.with(|w| w.borrow().clone());
    assert_eq!(worst, known_ulp, "{name}: worst {worst} ulp at {at}");
}

fn fixture_mask(name: &str) -> ArrayD<bool> {
    let f: Fixture = common::load_fixture("api.json");
    mask(&f.norms[name].mask).unwrap()
}

#[test]
fn layernorm_reduction_axes() {
    common::require_rsqrt_as_recorded!();
    // The known distance depends on the CPU's rsqrt (measured).
    let Some(ulp) = common::per_cpu(&[(common::RECORDING_CPU, 3), (common::INTEL_XEON, 11)]) else {
        eprintln!("not run: no known distance for this CPU");
        return;
    };
    check(
        "layernorm_axes",
        LayerNorm::new().reduction_axes(&[1, 2]),
        false,
        ulp,
    );
}

#[test]
fn layernorm_feature_axes() {
    check(
        "layernorm_features_2d",
        LayerNorm::new()
            .reduction_axes(&[1, 2])
            .feature_axes(&[1, 2]),
        false,
        6,
    );
}

#[test]
fn layernorm_without_fast_variance() {
    check(
        "layernorm_slow_variance",
        LayerNorm::new().use_fast_variance(false),
        false,
        8,
    );
}

#[test]
fn layernorm_with_a_mask() {
    common::require_rsqrt_as_recorded!();
    let m = fixture_mask("layernorm_mask");
    check("layernorm_mask", LayerNorm::new().mask(m), false, 2);
}

#[test]
fn batchnorm_with_a_mask() {
    let m = fixture_mask("batchnorm_mask");
    check("batchnorm_mask", BatchNorm::new().mask(m), true, 5);
}

#[test]
fn batchnorm_without_fast_variance() {
    common::require_rsqrt_as_recorded!();
    // The known distance depends on the CPU's rsqrt (measured).
    let Some(ulp) = common::per_cpu(&[(common::RECORDING_CPU, 3), (common::INTEL_XEON, 2)]) else {
        eprintln!("not run: no known distance for this CPU");
        return;
    };
    check(
        "batchnorm_slow_variance",
        BatchNorm::new().use_fast_variance(false),
        true,
        ulp,
    );
}

#[test]
fn bad_axes_and_masks_are_typed_errors() {
    let x = Tensor::ones(&[2, 3]);
    let err = LayerNorm::new()
        .reduction_axes(&[2])
        .init(random::key(0), x.clone())
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("LayerNorm reduction axis 2 is out of range"),
        "{err}"
    );
    let bad = ArrayD::from_elem(IxDyn(&[4]), true);
    let err = LayerNorm::new()
        .mask(bad.clone())
        .init(random::key(0), x.clone())
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("mask of shape [4] does not broadcast"),
        "{err}"
    );
    let err = BatchNorm::new()
        .mask(bad)
        .init(random::key(0), x)
        .unwrap_err();
    assert!(err.to_string().contains("does not broadcast"), "{err}");
}
