//! Elementwise unary operations and activations.

use ndarray::{ArcArray, ArrayD, IxDyn, Zip};
use smallvec::smallvec;

use crate::tensor::compiled::in_compiled_region;
use crate::tensor::error::{Result, TensorError};
use crate::tensor::forward::linear;
use crate::tensor::shape::{array_from_vec, zeros_vec};
use crate::tensor::tape::{Backward, InputGrads, OpKind, UnaryRule};
use crate::tensor::unary_fn::{self, apply_into, UnaryFn};
use crate::tensor::Tensor;

/// `f` applied to every element, keeping the memory order.
fn map(x: &ArcArray<f32, IxDyn>, f: impl Fn(f32) -> f32) -> ArrayD<f32> {
    match x.as_slice() {
        Some(s) => ArrayD::from_shape_vec(x.raw_dim(), s.iter().map(|&v| f(v)).collect())
            .expect("same length"),
        None => x.map(|&v| f(v)),
    }
}

/// A differentiable elementwise function; the backward pass scales the
/// incoming gradient in place.
fn unary(x: &Tensor, func: UnaryFn) -> Tensor {
    let out = match x.data.as_slice() {
        Some(s) => {
            let mut out = zeros_vec(s.len());
            apply_into(func, s, &mut out);
            array_from_vec(x.data.raw_dim(), out)
        }
        None => map(&x.data, |v| func.f(v)),
    }
    .into_shared();
    let fused = in_compiled_region();
    let backward = Backward::Unary(Box::new(UnaryRule {
        func,
        fused,
        x: x.data.clone(),
        out: out.clone(),
    }));
    let keep = fused && func == UnaryFn::Sigmoid;
    let s = keep.then(|| out.clone());
    let y = Tensor::record_builtin(out, &[x], OpKind::Unary(func, fused), backward);
    // Compiled, the cotangent `g * (s (1 - s))` stays a product up to
    // where XLA accumulates it (a scan's bias: see `ProductCotangents`).
    let y = match s {
        Some(s) => y.keep_products(Box::new(move |g, _| (g.clone(), s.mapv(sigmoid_slope)))),
        None => y,
    };
    y.with_tangent_of(|y| {
        let (xt, ot) = (x.data.clone(), y.data.clone());
        Box::new(move |t: &[Option<Tensor>]| {
            let Some(g) = &t[0] else { return Ok(None) };
            let fused = crate::tensor::forward::fused();
            let out = Zip::from(&g.data)
                .and(&xt)
                .and(&ot)
                .map_collect(|&g, &x, &o| func.jvp(g, x, o, fused));
            Ok(Some(Tensor::from_array(out)))
        })
    })
}

/// A sigmoid's derivative from its output `s`: `s (1 - s)`, the factor of
/// its cotangent that XLA keeps unrounded in a compiled region (eager
/// backpropagation and the compiled replay compute it here, so that both
/// fuse the same factor).
#[inline(always)]
pub(crate) fn sigmoid_slope(s: f32) -> f32 {
    s * (1.0 - s)
}

/// [`Backward::Unary`]: the gradient of `func` at `x` (output `out`) for
/// the output's gradient `g`, computed in `g`'s buffer.
pub(crate) fn unary_backward(
    func: UnaryFn,
    fused: bool,
    x: &ArcArray<f32, IxDyn>,
    out: &ArcArray<f32, IxDyn>,
    mut g: ArrayD<f32>,
) -> InputGrads {
    if let (Some(gs), Some(xs), Some(os)) = (g.as_slice_mut(), x.as_slice(), out.as_slice()) {
        if gs.len() == xs.len() {
            unary_fn::vjp_in_place(func, gs, xs, os, fused);
            return smallvec![Some(g)];
        }
    }
    Zip::from(&mut g)
        .and(x)
        .and(out)
        .for_each(|g, &x, &o| *g = func.vjp(*g, x, o, fused));
    smallvec![Some(g)]
}

impl Tensor {
    /// `-self`.
    pub fn neg(&self) -> Tensor {
        let out = map(&self.data, |v| -v).into_shared();
        Tensor::record_kind(out, &[self], OpKind::Neg, |g, _| smallvec![Some(-g)])
            .with_tangent(|| linear(|t| Ok(t.neg())))
    }

    /// `e^x` elementwise.
    pub fn exp(&self) -> Tensor {
        unary(self, UnaryFn::Exp)
    }

    /// The natural logarithm; `log(0) = -inf`, negative inputs give NaN.
    pub fn log(&self) -> Tensor {
        unary(self, UnaryFn::Log)
    }

    /// The natural logarithm as YNNPACK computes it: jitted, XLA hands the
    /// log of a reduction's 4,096 or more results to YNNPACK with the
    /// reduction ([`crate::xla::ynn_log`]).
    pub(crate) fn ynn_log(&self) -> Tensor {
        unary(self, UnaryFn::YnnLog)
    }

    /// `log(1 + x)`, accurate near 0 (`jnp.log1p`, XLA's formula).
    pub fn log1p(&self) -> Tensor {
        unary(self, UnaryFn::Log1p)
    }

    /// `e^x - 1`, accurate near 0 (`jnp.expm1`, XLA's formula).
    pub fn expm1(&self) -> Tensor {
        unary(self, UnaryFn::Expm1)
    }

    /// The sine (`jnp.sin`; glibc's `sinf`, as XLA:CPU computes it).
    pub fn sin(&self) -> Tensor {
        unary(self, UnaryFn::Sin)
    }

    /// The cosine (`jnp.cos`; glibc's `cosf`, as XLA:CPU computes it).
    pub fn cos(&self) -> Tensor {
        unary(self, UnaryFn::Cos)
    }

    /// The hyperbolic tangent.
    pub fn tanh(&self) -> Tensor {
        unary(self, UnaryFn::Tanh)
    }

    /// The logistic sigmoid `1 / (1 + e^-x)` (`jax.nn.sigmoid`).
    pub fn sigmoid(&self) -> Tensor {
        unary(self, UnaryFn::Sigmoid)
    }

    /// `jax.nn.silu(x)`: `x * sigmoid(x)`. `jax.nn.silu` is jitted, so its
    /// derivatives are those of one XLA fusion, eagerly too: each is one
    /// fused multiply-add over rounded products (see `UnaryFn::Silu`).
    pub fn silu(&self) -> Tensor {
        unary(self, UnaryFn::Silu)
    }

    /// `max(x, 0)` (`jax.nn.relu`); the gradient at 0 is 0, as in JAX.
    pub fn relu(&self) -> Tensor {
        unary(self, UnaryFn::Relu)
    }

    /// GELU with the tanh approximation, `jax.nn.gelu`'s default
    /// (`approximate=True`):
    /// `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`.
    pub fn gelu(&self) -> Tensor {
        unary(self, UnaryFn::Gelu)
    }

    /// The square root; negative inputs give NaN.
    pub fn sqrt(&self) -> Tensor {
        unary(self, UnaryFn::Sqrt)
    }

    /// `1 / sqrt(x)` (`lax.rsqrt`).
    pub fn rsqrt(&self) -> Tensor {
        unary(self, UnaryFn::Rsqrt)
    }

    /// `x * x`.
    pub fn square(&self) -> Tensor {
        // Kept in a compiled region for a sum XLA fuses with it.
        unary(self, UnaryFn::Square).with_factors(self, self)
    }

    /// `|x|`; the gradient at 0 is 1 (JAX differentiates `abs` as
    /// `select(x >= 0, g, -g)`).
    pub fn abs(&self) -> Tensor {
        unary(self, UnaryFn::Abs)
    }

    /// `x ** p` for a constant exponent.
    pub fn powf(&self, p: f32) -> Tensor {
        unary(self, UnaryFn::Powf(p))
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
        Ok(unary(self, UnaryFn::Clip(lo, hi)))
    }
}
