//! A constant of an eager scan: a value its body closes over (Flax's
//! broadcast parameters, the cell's weights in `nn.RNN`), whose cotangent
//! eager JAX accumulates from zero.
//!
//! `lax.scan`'s transpose carries one accumulator per constant, starts it
//! at zeros and adds each step's cotangent into it (`acc + ct`, from the
//! last step to the first). Eagerly those zeros are an argument of the
//! compiled backward loop, so the first addition is real: a step's `-0`
//! becomes `+0` (a one-step scan over one row whose recurrent kernels'
//! cotangents are products with the zero initial carry). Jitted, XLA
//! folds the zeros of a loop it removes (one step) and the sign stays.
//! Any other sum is unchanged by a `+0` in front (`±0 + y = y` for
//! `y != 0`, and a sum of nonzero terms reaching zero is `+0`), so adding
//! `+0` once to the accumulated total gives JAX's bits.

use std::sync::Arc;

use crate::tensor::forward::linear;
use crate::tensor::kernel::Kernel;
use crate::tensor::Tensor;

/// The kernel: the identity forward, `g + 0` backward.
struct ScanConst {
    shape: Vec<usize>,
}

impl Kernel for ScanConst {
    fn name(&self) -> &'static str {
        "scan_const"
    }

    fn shape(&self) -> &[usize] {
        &self.shape
    }

    fn forward_into(&self, ins: &[&[f32]], out: &mut [f32], _: &mut [f32]) {
        out.copy_from_slice(ins[0]);
    }

    fn backward_into(&self, _: usize, g: &[f32], _: &[&[f32]], dst: &mut [f32], _: &mut [f32]) {
        // The accumulator's zeros, added once (see the module).
        for (d, g) in dst.iter_mut().zip(g) {
            *d = g + 0.0;
        }
    }
}

impl Tensor {
    /// This tensor as a constant of an eager scan's body: the same values,
    /// its cotangent (the sum of the steps') added to `+0` as JAX's scan
    /// transpose accumulates it (see the module).
    pub(crate) fn scan_const(&self) -> Tensor {
        let kernel = ScanConst {
            shape: self.shape().to_vec(),
        };
        Tensor::record_kernel(Arc::new(kernel), &[self]).with_tangent(|| linear(|t| Ok(t.clone())))
    }
}

#[cfg(test)]
mod tests {
    use crate::tensor::{grad, Tensor, Tree};

    /// The gradient of `sum(f(x) * w * 0)` (with `f` the identity or a
    /// scan constant) and of `sum(f(x) * w)`, as bits.
    fn grads(w: &Tensor, zero: bool, scan_const: bool) -> Vec<u32> {
        let x = Tensor::from_vec(vec![0.0, 2.0, 3.0], &[3]).unwrap();
        let g = grad(
            |t: &Tree| {
                let x = t.tensor("x")?;
                let x = if scan_const {
                    x.scan_const()
                } else {
                    x.clone()
                };
                let y = x.mul(w)?;
                let y = if zero {
                    y.mul(&Tensor::zeros(&[3]))?
                } else {
                    y
                };
                Ok(y.sum_all())
            },
            &Tree::new().with("x", x),
        )
        .unwrap();
        let g = g.tensor("x").unwrap().to_vec();
        g.iter().map(|v| v.to_bits()).collect()
    }

    /// A negative zero cotangent comes back `+0`; other values unchanged.
    #[test]
    fn zeros_accumulate_from_plus_zero() {
        let w = Tensor::from_vec(vec![-1.0, -1.5, 0.25], &[3]).unwrap();
        let minus_zero = (-0.0f32).to_bits();
        assert_eq!(grads(&w, true, false), [minus_zero, minus_zero, 0]);
        assert_eq!(grads(&w, true, true), [0, 0, 0]);
        let bits: Vec<u32> = w.to_vec().iter().map(|v| v.to_bits()).collect();
        assert_eq!(grads(&w, false, true), bits);
    }
}
