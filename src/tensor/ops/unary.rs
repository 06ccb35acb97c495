//! Elementwise unary operations and activations.

use ndarray::{ArcArray, ArrayD, IxDyn, Zip};
use smallvec::smallvec;

use crate::tensor::compiled::in_compiled_region;
use crate::tensor::error::{Result, TensorError};
use crate::tensor::forward::linear;
use crate::tensor::tape::{OpKind, TangentRule};
use crate::tensor::Tensor;
use crate::xla::math as xla_math;

/// An elementwise function and its derivative, shared by the eager
/// operations and compiled steps so that both compute the same bits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum UnaryFn {
    Exp,
    Log,
    Tanh,
    Sigmoid,
    Relu,
    Gelu,
    Sqrt,
    Rsqrt,
    Square,
    Abs,
    Powf(f32),
    Clip(f32, f32),
    Log1p,
    Expm1,
    Sin,
    Cos,
}

/// `sqrt(2 / pi)` in f32, as `jax.nn.gelu` computes it.
fn sqrt_2_over_pi() -> f32 {
    (2.0f64 / std::f64::consts::PI).sqrt() as f32
}

/// `tanh(sqrt(2/pi) * (x + 0.044715 x^3))`, the inner part of tanh-GELU.
fn gelu_tanh(x: f32) -> f32 {
    xla_math::tanh(sqrt_2_over_pi() * (x + 0.044715 * (x * x * x)))
}

/// JAX's derivative factor at a bound: 1 on the kept side, 1/2 on it.
fn side(v: f32, bound: f32, above: bool) -> f32 {
    if v == bound {
        0.5
    } else if (v > bound) == above {
        1.0
    } else {
        0.0
    }
}

/// `max(x, 0)`, NaN kept.
#[inline(always)]
fn relu(x: f32) -> f32 {
    if x > 0.0 || x.is_nan() {
        x
    } else {
        0.0
    }
}

impl UnaryFn {
    /// The function.
    #[inline]
    pub(crate) fn f(self, x: f32) -> f32 {
        match self {
            // XLA's own f32 formulas, so that values match JAX bit for bit.
            UnaryFn::Exp => xla_math::exp(x),
            UnaryFn::Log => xla_math::log(x),
            UnaryFn::Tanh => xla_math::tanh(x),
            UnaryFn::Sigmoid => xla_math::logistic(x),
            UnaryFn::Relu => relu(x),
            UnaryFn::Gelu => x * (0.5 * (1.0 + gelu_tanh(x))),
            UnaryFn::Sqrt => x.sqrt(),
            UnaryFn::Rsqrt => xla_math::rsqrt(x),
            UnaryFn::Square => x * x,
            UnaryFn::Abs => x.abs(),
            UnaryFn::Log1p => xla_math::log1p(x),
            UnaryFn::Expm1 => xla_math::expm1(x),
            // XLA:CPU's sine and cosine are glibc's (measured on 27,000
            // arguments, eager and jitted); flaxen carries a port.
            UnaryFn::Sin => crate::random::tf::libm_f32::sincosf(x).0,
            UnaryFn::Cos => crate::random::tf::libm_f32::sincosf(x).1,
            UnaryFn::Powf(p) => x.powf(p),
            UnaryFn::Clip(lo, hi) => {
                if x.is_nan() || lo.is_nan() || hi.is_nan() {
                    // jnp.clip: a NaN bound makes every value NaN.
                    f32::NAN
                } else {
                    x.max(lo).min(hi)
                }
            }
        }
    }

    /// The incoming gradient `g` times the derivative at `x` (given
    /// `o = f(x)`), rounded as JAX's backward rule is: eagerly, or fused as
    /// in a [compiled region](crate::tensor::compiled) when `fused`.
    #[inline]
    pub(crate) fn vjp(self, g: f32, x: f32, o: f32, fused: bool) -> f32 {
        match self {
            // JAX: `t = g * (1 - ans); t + t * ans`, the last two fused.
            UnaryFn::Tanh => {
                let t = g * (1.0 - o);
                if fused {
                    t.mul_add(o, t)
                } else {
                    t + t * o
                }
            }
            // JAX: `g / x`, one rounding.
            UnaryFn::Log => g / x,
            // JAX: `select(x > 0, g, 0)`: +0 where x <= 0, whatever g's sign.
            UnaryFn::Relu => {
                if x > 0.0 {
                    g
                } else {
                    0.0
                }
            }
            // The transposed linearization of `jax.nn.gelu`, run op by op
            // (as JAX's pullback does): `y = x * cdf`,
            // `cdf = 0.5 * (1 + tanh(c * (x + 0.044715 * x^3)))`.
            UnaryFn::Gelu => {
                let t = gelu_tanh(x);
                let cdf = 0.5 * (1.0 + t);
                let k = 0.5 * (x * g);
                let l = k * (1.0 - t);
                let dz = l + l * t;
                let dinner = sqrt_2_over_pi() * dz;
                let dcube = 0.044715 * dinner;
                (g * cdf + dinner) + dcube * (3.0 * (x * x))
            }
            UnaryFn::Exp => g * o,
            // JAX: `g / (x + 1)`.
            UnaryFn::Log1p => g / (x + 1.0),
            // JAX: `g * (ans + 1)`.
            UnaryFn::Expm1 => g * (o + 1.0),
            // JAX: `g * cos(x)` and `-(g * sin(x))`.
            UnaryFn::Sin => g * crate::random::tf::libm_f32::sincosf(x).1,
            UnaryFn::Cos => -(g * crate::random::tf::libm_f32::sincosf(x).0),
            // JAX: `g * (ans * (1 - ans))`.
            UnaryFn::Sigmoid => g * (o * (1.0 - o)),
            // JAX: `g * (0.5 / ans)`.
            UnaryFn::Sqrt => g * (0.5 / o),
            // JAX: `g * (-0.5 * (ans / x))`.
            UnaryFn::Rsqrt => g * (-0.5 * (o / x)),
            // JAX: `g * (2 * x)`.
            UnaryFn::Square => g * (2.0 * x),
            UnaryFn::Abs => {
                if x >= 0.0 {
                    g
                } else {
                    -g
                }
            }
            // JAX: `g * (p * x^(p - 1))`, also for p = 0, so that the
            // gradient of x^0.0 at 0 is NaN (0 * inf) as in JAX.
            UnaryFn::Powf(p) => g * (p * x.powf(p - 1.0)),
            UnaryFn::Clip(lo, hi) => {
                let y = if x.is_nan() { x } else { x.max(lo) };
                g * (side(x, lo, true) * side(y, hi, false))
            }
        }
    }
}

impl UnaryFn {
    /// The tangent `g` pushed through the function at `x` (given
    /// `o = f(x)`), rounded as JAX's jvp rule is, `fused` as under
    /// `jax.jvp` (see `forward::fused`). Most rules are
    /// a product with a factor of `x`, the same as the backward rule's;
    /// `tanh`'s and the compositions (`gelu`, `clip`) run in the other
    /// direction.
    #[inline]
    pub(crate) fn jvp(self, g: f32, x: f32, o: f32, fused: bool) -> f32 {
        match self {
            // JAX: `mul(add(g, mul(g, ans)), sub(1, ans))`, the inner sum
            // fused under `jvp` (see `forward::fused`).
            UnaryFn::Tanh if fused => g.mul_add(o, g) * (1.0 - o),
            UnaryFn::Tanh => (g + g * o) * (1.0 - o),
            // jax.nn.gelu's primitives in order: `x**3` (integer_pow's rule
            // `g * (3 * x**2)`), the scalings, tanh's rule, then the
            // product rule of `x * cdf`.
            UnaryFn::Gelu => {
                let t = gelu_tanh(x);
                let cdf = 0.5 * (1.0 + t);
                let dcube = g * (3.0 * (x * x));
                let dinner = sqrt_2_over_pi() * (g + 0.044715 * dcube);
                if fused {
                    // tanh's and the product's rules fused, as above.
                    let dt = dinner.mul_add(t, dinner) * (1.0 - t);
                    g.mul_add(cdf, x * (0.5 * dt))
                } else {
                    let dt = (dinner + dinner * t) * (1.0 - t);
                    g * cdf + x * (0.5 * dt)
                }
            }
            // `minimum(maximum(x, lo), hi)`: each rule scales in turn.
            UnaryFn::Clip(lo, hi) => {
                let y = if x.is_nan() { x } else { x.max(lo) };
                (g * side(x, lo, true)) * side(y, hi, false)
            }
            _ => self.vjp(g, x, o, false),
        }
    }
}

/// `out[i] = func.f(x[i])`, with FMA instructions when the CPU has them:
/// XLA's formulas (`exp`, `log`, `tanh`, ...) use `mul_add`, which is
/// otherwise a call to libm's `fmaf` per use. Both are exactly rounded, so
/// the bits are the same either way.
#[inline]
pub(crate) fn apply_into(func: UnaryFn, x: &[f32], out: &mut [f32]) {
    match func {
        UnaryFn::Exp
        | UnaryFn::Log
        | UnaryFn::Tanh
        | UnaryFn::Sigmoid
        | UnaryFn::Log1p
        | UnaryFn::Expm1 => {
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("fma") {
                // SAFETY: the CPU supports FMA, checked just above; that is
                // the only requirement of `apply_fma`, whose body is safe
                // code.
                unsafe { apply_fma(func, x, out) };
                return;
            }
            apply_body(func, x, out)
        }
        UnaryFn::Relu => each(x, out, relu),
        _ => each(x, out, |v| func.f(v)),
    }
}

/// `out[i] = f(x[i])`.
#[inline(always)]
fn each(x: &[f32], out: &mut [f32], f: impl Fn(f32) -> f32) {
    out.iter_mut().zip(x).for_each(|(o, &v)| *o = f(v));
}

/// [`apply_body`] compiled with FMA instructions.
///
/// # Safety
///
/// The CPU must support FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
unsafe fn apply_fma(func: UnaryFn, x: &[f32], out: &mut [f32]) {
    apply_body(func, x, out)
}

/// The loop of [`apply_into`] for XLA's formulas, one per function so
/// that each inlines.
#[inline(always)]
fn apply_body(func: UnaryFn, x: &[f32], out: &mut [f32]) {
    match func {
        UnaryFn::Exp => each(x, out, xla_math::exp),
        UnaryFn::Log => each(x, out, xla_math::log),
        UnaryFn::Tanh => each(x, out, xla_math::tanh),
        UnaryFn::Sigmoid => each(x, out, xla_math::logistic),
        UnaryFn::Log1p => each(x, out, xla_math::log1p),
        UnaryFn::Expm1 => each(x, out, xla_math::expm1),
        _ => each(x, out, |v| func.f(v)),
    }
}

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
            let mut out = vec![0.0; s.len()];
            apply_into(func, s, &mut out);
            ArrayD::from_shape_vec(x.data.raw_dim(), out).expect("same length")
        }
        None => map(&x.data, |v| func.f(v)),
    }
    .into_shared();
    let (xd, od) = (x.data.clone(), out.clone());
    let fused = in_compiled_region();
    let (xt, ot) = (x.data.clone(), out.clone());
    let tangent = move || -> TangentRule {
        Box::new(move |t: &[Option<Tensor>]| {
            let Some(g) = &t[0] else { return Ok(None) };
            let fused = crate::tensor::forward::fused();
            let out = Zip::from(&g.data)
                .and(&xt)
                .and(&ot)
                .map_collect(|&g, &x, &o| func.jvp(g, x, o, fused));
            Ok(Some(Tensor::from_array(out)))
        })
    };
    Tensor::record_kind(out, &[x], OpKind::Unary(func, fused), move |mut g, _| {
        if let (Some(gs), Some(xs), Some(os)) = (g.as_slice_mut(), xd.as_slice(), od.as_slice()) {
            if gs.len() == xs.len() {
                for ((g, &x), &o) in gs.iter_mut().zip(xs).zip(os) {
                    *g = func.vjp(*g, x, o, fused);
                }
                return smallvec![Some(g)];
            }
        }
        Zip::from(&mut g)
            .and(&xd)
            .and(&od)
            .for_each(|g, &x, &o| *g = func.vjp(*g, x, o, fused));
        smallvec![Some(g)]
    })
    .with_tangent(tangent)
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
        unary(self, UnaryFn::Square)
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
