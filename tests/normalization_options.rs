//! `LayerNorm`'s `reduction_axes`/`feature_axes`/`use_fast_variance`, and
//! `mask` for `LayerNorm`, `RMSNorm` and `BatchNorm`, against flax 0.12.8
//! (tools/oracle/generate_api.py, "norms" and "norms_eager"): outputs,
//! updated statistics and the gradient of `sum(y * c)` with respect to the
//! parameters and the input.
//!
//! flaxen's `value_and_grad` computes what JAX's computes eagerly, each
//! operation its own XLA program: bit for bit ("norms_eager", every case).
//! Against the jitted gradient ("norms") the measured worst distance is
//! asserted exactly, so that a change shows. It is the distance between
//! JAX's own eager and jitted results, quantity by quantity (measured):
//! XLA fuses the jitted program and LLVM contracts products into the adds
//! of the fused kernels (`vfmadd`: the input cotangent's fusion, the sums
//! of products that give `scale`'s cotangent, the slow variance's sum of
//! squares, the running averages' update; 1–8 ulp), and XLA's constant
//! folding sums the constant `c` into the bias cotangent in `f64` (1 ulp).
//! flaxen models such fusions only inside `nn::Jit`, for a plain
//! `BatchNorm`.

mod common;

use common::F32Array as Array;

use std::collections::BTreeMap;

use flaxen::core::{Filter, Variables};
use flaxen::nn::{BatchNorm, LayerNorm, Module, RMSNorm};
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
    /// Jitted gradients.
    norms: BTreeMap<String, Case>,
    /// Eager gradients (absent from fixtures recorded before them).
    #[serde(default)]
    norms_eager: BTreeMap<String, Case>,
}

/// Which of the oracle's gradients a case is checked against.
#[derive(Clone, Copy)]
enum Oracle {
    /// `jax.value_and_grad`, each operation its own program.
    Eager,
    /// `jax.jit(jax.value_and_grad)`.
    Jitted,
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
/// `sum(y * c)` with the statistics mutable where `mutable`. `known_ulp`:
/// the expected worst distance (0 against eager JAX; see the module
/// comment for the jitted one). Against eager JAX on a CPU whose fixtures
/// predate the eager gradients, says so and checks nothing.
fn check<M>(name: &str, oracle: Oracle, module: &M, mutable: bool, known_ulp: u64)
where
    M: Module<Input = Tensor, Output = Tensor>,
{
    WORST.with(|w| *w.borrow_mut() = (0, String::new()));
    let mut f: Fixture = common::load_fixture("api.json");
    let cases = match oracle {
        Oracle::Eager => &mut f.norms_eager,
        Oracle::Jitted => &mut f.norms,
    };
    let Some(case) = cases.remove(name) else {
        eprintln!("{name}: not run: this CPU's api.json has no eager gradients");
        return;
    };
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

/// [`check`] against eager JAX (exact) and, where this CPU has a measured
/// distance (`jitted_ulp`), against jitted JAX.
fn check_both<M>(name: &str, module: M, mutable: bool, jitted_ulp: Option<u64>)
where
    M: Module<Input = Tensor, Output = Tensor>,
{
    check(name, Oracle::Eager, &module, mutable, 0);
    match jitted_ulp {
        Some(ulp) => check(name, Oracle::Jitted, &module, mutable, ulp),
        None => eprintln!("{name} jitted: not run: no known distance for this CPU"),
    }
}

/// The mask of case `name`, or `None` (saying so) where this CPU's
/// fixtures predate the case.
fn fixture_mask(name: &str) -> Option<ArrayD<bool>> {
    let f: Fixture = common::load_fixture("api.json");
    let m = f.norms.get(name).map(|c| mask(&c.mask).unwrap());
    if m.is_none() {
        eprintln!("{name}: not run: not in this CPU's api.json");
    }
    m
}

#[test]
fn layernorm_reduction_axes() {
    common::require_rsqrt_as_recorded!();
    check_both(
        "layernorm_axes",
        LayerNorm::new().reduction_axes(&[1, 2]),
        false,
        // Measured on this CPU only since flaxen's eager gradient became
        // exact (the input's cotangent changed; on the Intel Xeon it was
        // 11 ulp before).
        common::per_cpu(&[(common::RECORDING_CPU, 4)]),
    );
}

#[test]
fn layernorm_feature_axes() {
    check_both(
        "layernorm_features_2d",
        LayerNorm::new()
            .reduction_axes(&[1, 2])
            .feature_axes(&[1, 2]),
        false,
        common::per_cpu(&[(common::RECORDING_CPU, 4)]),
    );
}

#[test]
fn layernorm_without_fast_variance() {
    check_both(
        "layernorm_slow_variance",
        LayerNorm::new().use_fast_variance(false),
        false,
        Some(8),
    );
}

#[test]
fn layernorm_with_a_mask() {
    common::require_rsqrt_as_recorded!();
    let Some(m) = fixture_mask("layernorm_mask") else {
        return;
    };
    check_both(
        "layernorm_mask",
        LayerNorm::new().mask(m),
        false,
        common::per_cpu(&[(common::RECORDING_CPU, 4)]),
    );
}

#[test]
fn layernorm_with_a_mask_of_the_input_shape() {
    common::require_rsqrt_as_recorded!();
    let Some(m) = fixture_mask("layernorm_full_mask") else {
        return;
    };
    check_both(
        "layernorm_full_mask",
        LayerNorm::new().mask(m),
        false,
        // The jitted program's `y` is 13 ulp from the eager one here.
        common::per_cpu(&[(common::RECORDING_CPU, 25)]),
    );
}

#[test]
fn rmsnorm_with_a_mask() {
    common::require_rsqrt_as_recorded!();
    let Some(m) = fixture_mask("rmsnorm_mask") else {
        return;
    };
    check_both(
        "rmsnorm_mask",
        RMSNorm::new().mask(m),
        false,
        // The jitted backward's fusions (see the module comment).
        common::per_cpu(&[(common::RECORDING_CPU, 11)]),
    );
}

#[test]
fn rmsnorm_with_a_mask_of_the_input_shape() {
    common::require_rsqrt_as_recorded!();
    let Some(m) = fixture_mask("rmsnorm_full_mask") else {
        return;
    };
    check_both(
        "rmsnorm_full_mask",
        RMSNorm::new().mask(m),
        false,
        common::per_cpu(&[(common::RECORDING_CPU, 29)]),
    );
}

#[test]
fn batchnorm_with_a_mask() {
    let Some(m) = fixture_mask("batchnorm_mask") else {
        return;
    };
    check_both("batchnorm_mask", BatchNorm::new().mask(m), true, Some(5));
}

#[test]
fn batchnorm_without_fast_variance() {
    common::require_rsqrt_as_recorded!();
    // The jitted distance depends on the CPU's rsqrt (measured).
    check_both(
        "batchnorm_slow_variance",
        BatchNorm::new().use_fast_variance(false),
        true,
        common::per_cpu(&[(common::RECORDING_CPU, 3), (common::INTEL_XEON, 2)]),
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
