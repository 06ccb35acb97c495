//! Shared helpers of the tensor tests: deterministic inputs and a gradient
//! check against central finite differences of an `f64` reference.

#![allow(dead_code)]

use flaxen::tensor::{grad, Tensor, Tree};
use ndarray::{ArrayD, IxDyn};

/// A small deterministic generator (xorshift64*), so tests need no RNG crate.
pub struct Gen(u64);

impl Gen {
    pub fn new(seed: u64) -> Gen {
        Gen(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// Uniform in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let u = (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64;
        lo + (hi - lo) * u
    }

    /// An array of uniform values in `[lo, hi)`, exactly representable in f32.
    pub fn array(&mut self, shape: &[usize], lo: f64, hi: f64) -> ArrayD<f64> {
        ArrayD::from_shape_fn(IxDyn(shape), |_| self.uniform(lo, hi) as f32 as f64)
    }

    /// Values in `[-hi, -lo] ∪ [lo, hi]`: away from the kink at 0.
    pub fn away_from_zero(&mut self, shape: &[usize], lo: f64, hi: f64) -> ArrayD<f64> {
        ArrayD::from_shape_fn(IxDyn(shape), |_| {
            let m = self.uniform(lo, hi);
            let s = if self.uniform(0.0, 1.0) < 0.5 {
                -1.0
            } else {
                1.0
            };
            (s * m) as f32 as f64
        })
    }
}

pub fn to_tensor(a: &ArrayD<f64>) -> Tensor {
    Tensor::from(a.mapv(|v| v as f32))
}

/// Checks `op`'s value and gradient against the `f64` reference `reference`
/// at `inputs`: the gradient of `sum(op(x) * w)` for a random `w` against
/// central differences (step `1e-6`) of the same sum computed in f64.
pub fn check<F, R>(name: &str, inputs: &[ArrayD<f64>], op: F, reference: R)
where
    F: Fn(&[Tensor]) -> Tensor,
    R: Fn(&[ArrayD<f64>]) -> ArrayD<f64>,
{
    check_tol(name, inputs, op, reference, 2e-3)
}

pub fn check_tol<F, R>(name: &str, inputs: &[ArrayD<f64>], op: F, reference: R, tol: f64)
where
    F: Fn(&[Tensor]) -> Tensor,
    R: Fn(&[ArrayD<f64>]) -> ArrayD<f64>,
{
    let expected = reference(inputs);
    let mut gen = Gen::new(name.len() as u64 * 7919 + 17);
    let w = gen.array(expected.shape(), -1.0, 1.0);

    // Forward value.
    let tensors: Vec<Tensor> = inputs.iter().map(to_tensor).collect();
    let value = op(&tensors);
    assert_eq!(value.shape(), expected.shape(), "{name}: output shape");
    for (got, want) in value.to_array().iter().zip(expected.iter()) {
        let ok = (*got as f64 - want).abs() <= 1e-5 + 1e-5 * want.abs()
            || (got.is_nan() && want.is_nan());
        assert!(ok, "{name}: value {got} vs f64 reference {want}");
    }

    // Analytic gradient through the tape.
    let mut params = Tree::new();
    for (i, t) in tensors.iter().enumerate() {
        params.insert(format!("x{i}"), t.clone()).unwrap();
    }
    let w32 = to_tensor(&w);
    let n = inputs.len();
    let g = grad(
        |p| {
            let xs: Vec<Tensor> = (0..n)
                .map(|i| p.tensor(&format!("x{i}")).unwrap().clone())
                .collect();
            Ok((&op(&xs) * &w32).sum_all())
        },
        &params,
    )
    .unwrap();

    // Differentiating one input at a time (the others captured as
    // constants) gives the same bits: operations skip work for inputs that
    // need no gradient without changing the others.
    if n > 1 {
        for i in 0..n {
            let alone = grad(
                |p| {
                    let mut xs = tensors.clone();
                    xs[i] = p.as_tensor().unwrap().clone();
                    Ok((&op(&xs) * &w32).sum_all())
                },
                &Tree::from(tensors[i].clone()),
            )
            .unwrap();
            let bits = |t: &Tensor| t.to_vec().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(alone.as_tensor().unwrap()),
                bits(g.tensor(&format!("x{i}")).unwrap()),
                "{name}: gradient of input {i} alone"
            );
        }
    }

    // Central differences in f64.
    let loss = |xs: &[ArrayD<f64>]| (reference(xs) * &w).sum();
    let h = 1e-6;
    for i in 0..n {
        let gi = g.tensor(&format!("x{i}")).unwrap();
        assert_eq!(
            gi.shape(),
            inputs[i].shape(),
            "{name}: gradient shape of input {i}"
        );
        let gi = gi.to_vec();
        let mut xs: Vec<ArrayD<f64>> = inputs.to_vec();
        for (j, &analytic) in gi.iter().enumerate() {
            let orig = xs[i].as_slice().unwrap()[j];
            xs[i].as_slice_mut().unwrap()[j] = orig + h;
            let plus = loss(&xs);
            xs[i].as_slice_mut().unwrap()[j] = orig - h;
            let minus = loss(&xs);
            xs[i].as_slice_mut().unwrap()[j] = orig;
            let numeric = (plus - minus) / (2.0 * h);
            let analytic = analytic as f64;
            assert!(
                (analytic - numeric).abs() <= tol * (1.0 + numeric.abs()),
                "{name}: d/dx{i}[{j}] analytic {analytic} vs finite difference {numeric}"
            );
        }
    }
}
