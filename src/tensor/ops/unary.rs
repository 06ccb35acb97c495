//! Elementwise unary operations and activations.

use ndarray::{ArcArray, ArrayD, IxDyn, Zip};
use smallvec::smallvec;

use crate::tensor::error::{Result, TensorError};
use crate::tensor::Tensor;

/// `f` applied to every element, keeping the memory order.
fn map(x: &ArcArray<f32, IxDyn>, f: impl Fn(f32) -> f32) -> ArrayD<f32> {
    match x.as_slice() {
        Some(s) => ArrayD::from_shape_vec(x.raw_dim(), s.iter().map(|&v| f(v)).collect())
            .expect("same length"),
        None => x.map(|&v| f(v)),
    }
}

/// A differentiable elementwise function with derivative `df(x, f(x))`;
/// the backward pass scales the incoming gradient in place.
fn unary<F, D>(x: &Tensor, f: F, df: D) -> Tensor
where
    F: Fn(f32) -> f32,
    D: Fn(f32, f32) -> f32 + Send + Sync + 'static,
{
    let out = map(&x.data, f).into_shared();
    let (xd, od) = (x.data.clone(), out.clone());
    Tensor::record(out, &[x], move |mut g, _| {
        if let (Some(gs), Some(xs), Some(os)) = (g.as_slice_mut(), xd.as_slice(), od.as_slice()) {
            if gs.len() == xs.len() {
                for ((g, &x), &o) in gs.iter_mut().zip(xs).zip(os) {
                    *g *= df(x, o);
                }
                return smallvec![Some(g)];
            }
        }
        Zip::from(&mut g)
            .and(&xd)
            .and(&od)
            .for_each(|g, &x, &o| *g *= df(x, o));
        smallvec![Some(g)]
    })
}

/// `tanh(sqrt(2/pi) * (x + 0.044715 x^3))`, the inner part of tanh-GELU.
fn gelu_tanh(x: f32) -> f32 {
    let sqrt_2_over_pi = (2.0f64 / std::f64::consts::PI).sqrt() as f32;
    (sqrt_2_over_pi * (x + 0.044715 * (x * x * x))).tanh()
}

impl Tensor {
    /// `-self`.
    pub fn neg(&self) -> Tensor {
        let out = map(&self.data, |v| -v).into_shared();
        Tensor::record(out, &[self], |g, _| smallvec![Some(-g)])
    }

    /// `e^x` elementwise.
    pub fn exp(&self) -> Tensor {
        unary(self, f32::exp, |_, o| o)
    }

    /// The natural logarithm; `log(0) = -inf`, negative inputs give NaN.
    pub fn log(&self) -> Tensor {
        unary(self, f32::ln, |x, _| 1.0 / x)
    }

    /// The hyperbolic tangent.
    pub fn tanh(&self) -> Tensor {
        unary(self, f32::tanh, |_, o| 1.0 - o * o)
    }

    /// The logistic sigmoid `1 / (1 + e^-x)` (`jax.nn.sigmoid`).
    pub fn sigmoid(&self) -> Tensor {
        unary(self, |x| 1.0 / (1.0 + (-x).exp()), |_, o| o * (1.0 - o))
    }

    /// `max(x, 0)` (`jax.nn.relu`); the gradient at 0 is 0, as in JAX.
    pub fn relu(&self) -> Tensor {
        unary(
            self,
            |x| if x > 0.0 || x.is_nan() { x } else { 0.0 },
            |x, _| if x > 0.0 { 1.0 } else { 0.0 },
        )
    }

    /// GELU with the tanh approximation, `jax.nn.gelu`'s default
    /// (`approximate=True`):
    /// `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`.
    pub fn gelu(&self) -> Tensor {
        unary(
            self,
            |x| x * (0.5 * (1.0 + gelu_tanh(x))),
            |x, _| {
                let t = gelu_tanh(x);
                let sqrt_2_over_pi = (2.0f64 / std::f64::consts::PI).sqrt() as f32;
                0.5 * (1.0 + t)
                    + 0.5 * x * (1.0 - t * t) * sqrt_2_over_pi * (1.0 + 3.0 * 0.044715 * x * x)
            },
        )
    }

    /// The square root; negative inputs give NaN.
    pub fn sqrt(&self) -> Tensor {
        unary(self, f32::sqrt, |_, o| 0.5 / o)
    }

    /// `1 / sqrt(x)` (`lax.rsqrt`).
    pub fn rsqrt(&self) -> Tensor {
        unary(self, |x| 1.0 / x.sqrt(), |x, o| -0.5 * o / x)
    }

    /// `x * x`.
    pub fn square(&self) -> Tensor {
        unary(self, |x| x * x, |x, _| 2.0 * x)
    }

    /// `|x|`; the gradient at 0 is 1 (JAX differentiates `abs` as
    /// `select(x >= 0, g, -g)`).
    pub fn abs(&self) -> Tensor {
        unary(self, f32::abs, |x, _| if x >= 0.0 { 1.0 } else { -1.0 })
    }

    /// `x ** p` for a constant exponent.
    pub fn powf(&self, p: f32) -> Tensor {
        unary(
            self,
            move |x| x.powf(p),
            move |x, _| if p == 0.0 { 0.0 } else { p * x.powf(p - 1.0) },
        )
    }

    /// `jnp.clip(x, lo, hi)`, i.e. `minimum(maximum(x, lo), hi)`, with
    /// JAX's gradient (halved exactly at a bound). NaN stays NaN.
    ///
    /// Fails with [`TensorError::Argument`] when `lo > hi`.
    pub fn clip(&self, lo: f32, hi: f32) -> Result<Tensor> {
        if lo > hi {
            return Err(TensorError::Argument {
                op: "clip",
                message: format!("lower bound {lo} is above upper bound {hi}"),
            });
        }
        let side = |v: f32, bound: f32, above: bool| {
            if v == bound {
                0.5
            } else if (v > bound) == above {
                1.0
            } else {
                0.0
            }
        };
        Ok(unary(
            self,
            move |x| {
                if x.is_nan() {
                    x
                } else {
                    x.max(lo).min(hi)
                }
            },
            move |x, _| {
                let y = if x.is_nan() { x } else { x.max(lo) };
                side(x, lo, true) * side(y, hi, false)
            },
        ))
    }
}
