//! Data operations against JAX 0.10.2 run eagerly
//! (tools/oracle/generate_data_ops.py): values and vector-Jacobian
//! products, bit for bit; integer results exactly. The comparisons,
//! `select` (`jnp.where`), `stack` and `concatenate` are stored as bit
//! patterns and checked to the bit, signed zeros and NaNs included.

mod common;

use std::collections::BTreeMap;

use flaxen::tensor::{one_hot, vjp, Tensor, Tree};
use ndarray::{ArrayD, IxDyn};
use serde::Deserialize;

#[derive(Deserialize)]
struct Array {
    shape: Vec<usize>,
    #[serde(default)]
    data: Vec<Option<f32>>,
    #[serde(default)]
    int: Vec<i32>,
}

impl Array {
    fn tensor(&self) -> Tensor {
        let v = self.data.iter().map(|v| v.unwrap_or(f32::NAN)).collect();
        Tensor::from_vec(v, &self.shape).unwrap()
    }
    fn ints(&self) -> ArrayD<i32> {
        ArrayD::from_shape_vec(IxDyn(&self.shape), self.int.clone()).unwrap()
    }
    fn bits(&self) -> Vec<u32> {
        self.data
            .iter()
            .map(|v| v.unwrap_or(f32::NAN).to_bits())
            .collect()
    }
}

/// An f32 array as its bit patterns (`fixture_io.enc_bits`).
#[derive(Deserialize)]
struct BitArray {
    shape: Vec<usize>,
    bits: Vec<u32>,
}

impl BitArray {
    fn tensor(&self) -> Tensor {
        let v = self.bits.iter().map(|&b| f32::from_bits(b)).collect();
        Tensor::from_vec(v, &self.shape).unwrap()
    }
}

/// The masks of the five comparisons of `x` with `y`.
#[derive(Deserialize)]
struct Compare {
    x: BitArray,
    y: BitArray,
    greater: BitArray,
    greater_equal: BitArray,
    less: BitArray,
    less_equal: BitArray,
    equal: BitArray,
}

/// `f(*xs)` and its VJP with respect to every input.
#[derive(Deserialize)]
struct VjpNCase {
    xs: Vec<BitArray>,
    y: BitArray,
    ct: BitArray,
    grads: Vec<BitArray>,
}

#[derive(Deserialize)]
struct VjpCase {
    x: Array,
    y: Array,
    ct: Array,
    grad: Array,
}

#[derive(Deserialize)]
struct OneHot {
    labels: Array,
    out: Array,
}

#[derive(Deserialize)]
struct ArgMax {
    x: Array,
    out: Array,
    min: Array,
}

#[derive(Deserialize)]
struct Split {
    x: Array,
    parts: Vec<Array>,
}

#[derive(Deserialize)]
struct Fixture {
    vjp: BTreeMap<String, VjpCase>,
    one_hot: OneHot,
    argmax: ArgMax,
    split: Split,
    compare: BTreeMap<String, Compare>,
    vjp_n: BTreeMap<String, VjpNCase>,
}

fn bits(t: &Tensor) -> Vec<u32> {
    t.to_vec().iter().map(|v| v.to_bits()).collect()
}

fn check(name: &str, f: impl Fn(&Tensor) -> flaxen::Result<Tensor>) {
    check_known(name, f, 0);
}

/// [`check`] with a VJP whose worst distance is `known_ulp` (measured,
/// documented at the call).
fn check_known(name: &str, f: impl Fn(&Tensor) -> flaxen::Result<Tensor>, known_ulp: u64) {
    let fx: Fixture = common::load_fixture("data_ops.json");
    let c = &fx.vjp[name];
    let (y, pull) = vjp(|p| f(p.as_tensor().unwrap()), &Tree::from(c.x.tensor())).unwrap();
    assert_eq!(y.shape(), c.y.shape.as_slice(), "{name}");
    assert_eq!(bits(&y), c.y.bits(), "{name} value");
    let g = pull.call(&c.ct.tensor()).unwrap();
    let worst = g
        .as_tensor()
        .unwrap()
        .to_vec()
        .iter()
        .zip(&c.grad.data)
        .map(|(&a, b)| common::ulp_distance(a, b.unwrap_or(f32::NAN)))
        .max()
        .unwrap_or(0);
    assert_eq!(worst, known_ulp, "{name} vjp: worst {worst} ulp");
}

#[test]
fn activations() {
    common::require_rsqrt_as_recorded!();
    // jax.nn.silu is itself jitted: its backward is one fusion,
    // `fma(g, s, (g * x) * (s * (1 - s)))`.
    check("silu", |x| Ok(x.silu()));
    check("leaky_relu", |x| Ok(x.leaky_relu(0.01)));
    check("softplus", |x| Ok(x.softplus()));
    check("log_sigmoid", |x| Ok(x.log_sigmoid()));
    check("elu", |x| Ok(x.elu(1.0)));
    check("log1p", |x| Ok(x.log1p()));
    check("sin", |x| Ok(x.sin()));
    check("cos", |x| Ok(x.cos()));
    check("expm1", |x| Ok(x.expm1()));
    check("logaddexp", |x| {
        let n = x.shape()[0];
        let parts: Vec<Tensor> = (0..n)
            .rev()
            .map(|i| x.slice(0, i, i + 1).unwrap())
            .collect();
        let reversed = Tensor::concatenate(&parts, 0)?;
        Ok(x.logaddexp(&(&reversed * 0.5))?)
    });
    check("leaky_relu_0.2", |x| Ok(x.leaky_relu(0.2)));
    // jax.nn.standardize is jitted too: its backward is one fusion over
    // two fused row sums (the Intel Xeon's fixture follows the same
    // formulas with its own rsqrt).
    check("standardize", |x| Ok(x.standardize(-1, 1e-5)?));
}

#[test]
fn reductions_and_gathers() {
    check("min_axis1", |x| Ok(x.min(&[1], false)?));
    check("min_ties", |x| Ok(x.min(&[1], false)?));
    let idx = ArrayD::from_shape_vec(IxDyn(&[4, 1]), vec![5, 0, 2, 3]).unwrap();
    check("take_along_axis", |x| Ok(x.take_along_axis(&idx, 1)?));
    let rows = ArrayD::from_shape_vec(IxDyn(&[2, 2]), vec![3, 0, -1, 3]).unwrap();
    check("take_rows", |x| Ok(x.take(&rows, 0)?));
    // Column 7 is out of range: NaN, as JAX's mode="fill".
    let cols = ArrayD::from_shape_vec(IxDyn(&[4]), vec![5, 5, 1, 7]).unwrap();
    check("take_cols", |x| Ok(x.take(&cols, 1)?));
}

#[test]
fn one_hot_argmax_split() {
    let fx: Fixture = common::load_fixture("data_ops.json");
    let t = one_hot(&fx.one_hot.labels.ints(), 6);
    assert_eq!(t.shape(), fx.one_hot.out.shape.as_slice());
    assert_eq!(bits(&t), fx.one_hot.out.bits());
    let x = fx.argmax.x.tensor();
    assert_eq!(x.argmax(1).unwrap(), fx.argmax.out.ints());
    assert_eq!(x.argmin(1).unwrap(), fx.argmax.min.ints());
    let parts = fx.split.x.tensor().split(3, 1).unwrap();
    assert_eq!(parts.len(), fx.split.parts.len());
    for (p, w) in parts.iter().zip(&fx.split.parts) {
        assert_eq!(bits(p), w.bits());
    }
    // Bad splits and empty argmax axes are typed errors.
    assert!(fx.split.x.tensor().split(4, 1).is_err());
    assert!(fx.split.x.tensor().split_at(&[4, 2], 1).is_err());
    assert!(Tensor::zeros(&[2, 0]).argmax(1).is_err());
}

/// `got`'s shape and bits against `want`'s, every bit.
fn assert_bits(got: &Tensor, want: &BitArray, what: &str) {
    assert_eq!(got.shape(), want.shape.as_slice(), "{what} shape");
    assert_eq!(bits(got), want.bits, "{what}");
}

/// The key of input `i` in the tree [`check_n`] differentiates.
fn key(i: usize) -> String {
    format!("x{i}")
}

/// `f(xs)` and its VJP with respect to every input, every bit.
fn check_n(fx: &Fixture, name: &str, f: impl Fn(&[Tensor]) -> flaxen::Result<Tensor>) {
    let c = &fx.vjp_n[name];
    let params = Tree::from_entries(
        c.xs.iter()
            .enumerate()
            .map(|(i, x)| (key(i), Tree::from(x.tensor()))),
    );
    let (y, pull) = vjp(
        |p| {
            let xs: Vec<Tensor> = (0..c.xs.len())
                .map(|i| p.tensor(&key(i)).unwrap().clone())
                .collect();
            f(&xs)
        },
        &params,
    )
    .unwrap();
    assert_bits(&y, &c.y, &format!("{name} value"));
    let g = pull.call(&c.ct.tensor()).unwrap();
    for (i, want) in c.grads.iter().enumerate() {
        assert_bits(
            g.tensor(&key(i)).unwrap(),
            want,
            &format!("{name} vjp of input {i}"),
        );
    }
}

type CompareFn = fn(&Tensor, &Tensor) -> flaxen::Result<Tensor>;

/// The five comparisons, by their JAX names.
const COMPARISONS: [(&str, CompareFn); 5] = [
    ("greater", |x, y| Ok(x.greater(y)?)),
    ("greater_equal", |x, y| Ok(x.greater_equal(y)?)),
    ("less", |x, y| Ok(x.less(y)?)),
    ("less_equal", |x, y| Ok(x.less_equal(y)?)),
    ("equal", |x, y| Ok(x.equal(y)?)),
];

/// The masks compared: every pair of infinities, the largest finite values,
/// +-1, the smallest normals, both zeros and NaN (`table`); random values
/// with ties, signed zeros, infinities and NaN; each value against 0 and NaN.
const COMPARE_CASES: [&str; 5] = [
    "table",
    "same_shape",
    "scalar",
    "scalar_nan",
    "table_subnormal",
];

/// `jnp.where(mask, on_true, on_false)` with an f32 mask (NaN, infinities,
/// signed zeros), broadcast in every position, and a cotangent holding NaN,
/// infinity, signed zeros and a subnormal.
const SELECT_CASES: [&str; 10] = [
    "where",
    "where_subnormal_mask",
    "where_special_ct",
    "where_broadcast_false",
    "where_broadcast_mask",
    "where_broadcast_all",
    "where_broadcast_rows",
    "where_scalar_branch",
    "where_scalar_mask",
    "where_zero_mask",
];

const STACK_CASES: [(&str, isize); 7] = [
    ("stack_axis0", 0),
    ("stack_axis1", 1),
    ("stack_axis2", 2),
    ("stack_axis-2", -2),
    ("stack_one", -1),
    ("stack_scalars", 0),
    ("stack_special_ct", 1),
];

const CONCATENATE_CASES: [(&str, isize); 6] = [
    ("concatenate_axis0", 0),
    ("concatenate_axis1", 1),
    ("concatenate_axis-1_3d", -1),
    ("concatenate_axis1_3d", 1),
    ("concatenate_one", 0),
    ("concatenate_special_ct", 0),
];

#[test]
fn comparisons() {
    let fx: Fixture = common::load_fixture("data_ops.json");
    for case in COMPARE_CASES {
        let c = &fx.compare[case];
        let (x, y) = (c.x.tensor(), c.y.tensor());
        let want = [
            &c.greater,
            &c.greater_equal,
            &c.less,
            &c.less_equal,
            &c.equal,
        ];
        for ((op, f), want) in COMPARISONS.iter().zip(want) {
            assert_bits(&f(&x, &y).unwrap(), want, &format!("{case} {op}"));
        }
    }
    for (op, f) in COMPARISONS {
        // The masks are not differentiated: zero cotangents.
        check_n(&fx, &format!("{op}_mask"), |xs| f(&xs[0], &xs[1]));
        // A comparison picking a side: random values with ties, and every
        // pair of the table.
        // Subnormals compare as zero (XLA:CPU's denormals-are-zero); a
        // broadcast side's cotangent is summed along rows in XLA's order.
        let mut cases = vec![
            format!("where_{op}"),
            format!("where_{op}_table"),
            format!("where_{op}_table_broadcast"),
        ];
        if op == "greater" {
            cases.push("where_greater_subnormal_table".into());
        }
        for case in cases {
            check_n(&fx, &case, |xs| {
                Ok(Tensor::select(&f(&xs[0], &xs[1])?, &xs[0], &xs[1])?)
            });
        }
    }
}

#[test]
fn select() {
    let fx: Fixture = common::load_fixture("data_ops.json");
    for case in SELECT_CASES {
        // The mask is an input too: its cotangent is zero.
        check_n(&fx, case, |xs| Ok(Tensor::select(&xs[0], &xs[1], &xs[2])?));
    }
}

#[test]
fn stack_and_concatenate() {
    let fx: Fixture = common::load_fixture("data_ops.json");
    for (case, axis) in STACK_CASES {
        check_n(&fx, case, |xs| Ok(Tensor::stack(xs, axis)?));
    }
    for (case, axis) in CONCATENATE_CASES {
        check_n(&fx, case, |xs| Ok(Tensor::concatenate(xs, axis)?));
    }
}

/// Every comparison and `vjp_n` case of the fixture is asserted above.
#[test]
fn every_case_is_checked_or_known() {
    let fx: Fixture = common::load_fixture("data_ops.json");
    let mut checked: Vec<String> = COMPARE_CASES.iter().map(|c| c.to_string()).collect();
    for (op, _) in COMPARISONS {
        checked.extend([
            format!("{op}_mask"),
            format!("where_{op}"),
            format!("where_{op}_table"),
            format!("where_{op}_table_broadcast"),
        ]);
    }
    checked.push("where_greater_subnormal_table".into());
    checked.extend(SELECT_CASES.iter().map(|c| c.to_string()));
    checked.extend(STACK_CASES.iter().map(|(c, _)| c.to_string()));
    checked.extend(CONCATENATE_CASES.iter().map(|(c, _)| c.to_string()));
    checked.sort();
    checked.dedup();
    let mut cases: Vec<String> = fx.compare.keys().chain(fx.vjp_n.keys()).cloned().collect();
    cases.sort();
    assert_eq!(checked, cases);
}

/// `standardize` in a compiled step gives the eager numbers on every call,
/// whatever the batch: compiled steps do not replay it (its fused variance
/// is computed outside the recorded operations, and before that change it
/// was not replayed either), so the step runs eagerly (`is_compiled()` is
/// `false`) rather than replay a variance of the first batch.
#[test]
fn standardize_in_a_compiled_step_follows_each_batch() {
    use flaxen::tensor::{as_jitted, jit_value_and_grad_with, value_and_grad};
    let loss = |p: &Tree, b: &Tree| -> flaxen::Result<Tensor> {
        let y = b.tensor("x")?.mul(p.tensor("w")?)?.standardize(-1, 1e-5)?;
        Ok(y.mul(b.tensor("c")?)?.sum_all())
    };
    let mut step = jit_value_and_grad_with(loss);
    let params = Tree::new().with("w", Tensor::from_vec(vec![0.5, -1.5, 2.0], &[3]).unwrap());
    for i in 0..3 {
        let x: Vec<f32> = (0..6).map(|j| ((i * 7 + j * 3) % 5) as f32 - 1.7).collect();
        let batch = Tree::new()
            .with("x", Tensor::from_vec(x, &[2, 3]).unwrap())
            .with(
                "c",
                Tensor::from_vec(vec![1.0, -2.0, 0.5, 3.0, 1.0, -1.0], &[2, 3]).unwrap(),
            );
        let (got, got_grads) = step.call_with(&params, &batch).unwrap();
        let (want, want_grads) =
            as_jitted(|| value_and_grad(|p| loss(p, &batch), &params)).unwrap();
        assert_eq!(got.to_vec(), want.to_vec(), "call {i}");
        assert_eq!(
            bits(got_grads.tensor("w").unwrap()),
            bits(want_grads.tensor("w").unwrap()),
            "call {i}"
        );
    }
    assert!(!step.is_compiled());
}
