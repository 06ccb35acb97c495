//! Data operations against JAX 0.10.2 run eagerly
//! (tools/oracle/generate_data_ops.py): values and vector-Jacobian
//! products, bit for bit; integer results exactly.

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
    // Known: jax.nn.silu is itself jitted, so XLA fuses its backward
    // (`g * s + (g * x) * (s * (1 - s))`) with contracted multiply-adds;
    // flaxen rounds each product (1 ulp, measured).
    check_known("silu", |x| Ok(x.silu()), 1);
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
    // Known: jax.nn.standardize is jitted too; its fused backward differs
    // by up to 16 ulp (measured); the values are exact.
    check_known("standardize", |x| Ok(x.standardize(-1, 1e-5)?), 16);
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
