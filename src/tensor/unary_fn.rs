//! The elementwise functions themselves: each function's value and its
//! derivative's rules on single `f32`s, and the loop over a slice, as JAX
//! computes them.
//!
//! A leaf of the tensor modules, so that the tape (which names a function
//! in [`OpKind::Unary`](super::tape::OpKind)), the eager operations
//! (`ops::unary`) and compiled replay (`jit`) share it without depending on
//! one another.

use crate::xla::math as xla_math;

/// An elementwise function and its derivative, shared by the eager
/// operations and compiled steps so that both compute the same bits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum UnaryFn {
    Exp,
    Log,
    /// `log` as YNNPACK computes it, where XLA hands it one inside a fused
    /// reduction ([`crate::xla::ynn_log`]); its derivative is `log`'s.
    YnnLog,
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
    Silu,
}

/// Runs `$body` with `$f` bound to `$func` as a constant of its variant:
/// each variant's loop is then compiled on its own (and vectorized where
/// its arithmetic allows) instead of matching on the function per element.
macro_rules! each_variant {
    ($func:expr, |$f:ident| $body:expr) => {
        match $func {
            UnaryFn::Exp => {
                let $f = UnaryFn::Exp;
                $body
            }
            UnaryFn::Log => {
                let $f = UnaryFn::Log;
                $body
            }
            UnaryFn::YnnLog => {
                let $f = UnaryFn::YnnLog;
                $body
            }
            UnaryFn::Tanh => {
                let $f = UnaryFn::Tanh;
                $body
            }
            UnaryFn::Sigmoid => {
                let $f = UnaryFn::Sigmoid;
                $body
            }
            UnaryFn::Relu => {
                let $f = UnaryFn::Relu;
                $body
            }
            UnaryFn::Gelu => {
                let $f = UnaryFn::Gelu;
                $body
            }
            UnaryFn::Sqrt => {
                let $f = UnaryFn::Sqrt;
                $body
            }
            UnaryFn::Rsqrt => {
                let $f = UnaryFn::Rsqrt;
                $body
            }
            UnaryFn::Square => {
                let $f = UnaryFn::Square;
                $body
            }
            UnaryFn::Abs => {
                let $f = UnaryFn::Abs;
                $body
            }
            UnaryFn::Powf(p) => {
                let $f = UnaryFn::Powf(p);
                $body
            }
            UnaryFn::Clip(lo, hi) => {
                let $f = UnaryFn::Clip(lo, hi);
                $body
            }
            UnaryFn::Log1p => {
                let $f = UnaryFn::Log1p;
                $body
            }
            UnaryFn::Expm1 => {
                let $f = UnaryFn::Expm1;
                $body
            }
            UnaryFn::Sin => {
                let $f = UnaryFn::Sin;
                $body
            }
            UnaryFn::Cos => {
                let $f = UnaryFn::Cos;
                $body
            }
            UnaryFn::Silu => {
                let $f = UnaryFn::Silu;
                $body
            }
        }
    };
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
    // Always inlined: the loops of `each_variant!` then see a constant
    // variant and keep only its arm.
    #[inline(always)]
    pub(crate) fn f(self, x: f32) -> f32 {
        match self {
            // XLA's own f32 formulas, so that values match JAX bit for bit.
            UnaryFn::Exp => xla_math::exp(x),
            UnaryFn::Log => xla_math::log(x),
            UnaryFn::YnnLog => crate::xla::ynn_log::ynn_log(x),
            UnaryFn::Tanh => xla_math::tanh(x),
            UnaryFn::Sigmoid => xla_math::logistic(x),
            UnaryFn::Silu => x * xla_math::logistic(x),
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
            UnaryFn::Sin => crate::xla::libm_f32::sincosf(x).0,
            UnaryFn::Cos => crate::xla::libm_f32::sincosf(x).1,
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
    // Always inlined: the loops of `each_variant!` then see a constant
    // variant and keep only its arm.
    #[inline(always)]
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
            UnaryFn::Log | UnaryFn::YnnLog => g / x,
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
            UnaryFn::Sin => g * crate::xla::libm_f32::sincosf(x).1,
            UnaryFn::Cos => -(g * crate::xla::libm_f32::sincosf(x).0),
            // JAX: `g * (ans * (1 - ans))`.
            UnaryFn::Sigmoid => g * (o * (1.0 - o)),
            // `jax.nn.silu` is jitted, so its backward is always one XLA
            // fusion: `g * s + (g * x) * (s * (1 - s))` with `s =
            // sigmoid(x)`, where LLVM contracts the first product into the
            // sum (read off the compiled kernel, checked on the values).
            UnaryFn::Silu => {
                let s = xla_math::logistic(x);
                g.mul_add(s, (g * x) * (s * (1.0 - s)))
            }
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
            // The jitted jvp of `jax.nn.silu` (one fusion, under `jax.jvp`
            // and `jax.linearize` alike): `t * s + x * (t * (s * (1 - s)))`,
            // the first product contracted into the sum (measured).
            UnaryFn::Silu => {
                let s = xla_math::logistic(x);
                g.mul_add(s, x * (g * (s * (1.0 - s))))
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
        | UnaryFn::YnnLog
        | UnaryFn::Tanh
        | UnaryFn::Sigmoid
        | UnaryFn::Silu
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
        _ => each_variant!(func, |f| each(x, out, |v| f.f(v))),
    }
}

/// `g[i] = func.vjp(g[i], x[i], o[i], fused)`: the backward rule over
/// slices of one length, in place.
pub(crate) fn vjp_in_place(func: UnaryFn, g: &mut [f32], x: &[f32], o: &[f32], fused: bool) {
    each_variant!(func, |f| {
        for ((g, &x), &o) in g.iter_mut().zip(x).zip(o) {
            *g = f.vjp(*g, x, o, fused);
        }
    })
}

/// `d[i] = func.vjp(g[i], x[i], o[i], fused)` over slices of one length.
pub(crate) fn vjp_into(func: UnaryFn, d: &mut [f32], g: &[f32], x: &[f32], o: &[f32], fused: bool) {
    each_variant!(func, |f| {
        for (((d, &g), &x), &o) in d.iter_mut().zip(g).zip(x).zip(o) {
            *d = f.vjp(g, x, o, fused);
        }
    })
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
        UnaryFn::YnnLog => each(x, out, crate::xla::ynn_log::ynn_log),
        UnaryFn::Tanh => each(x, out, xla_math::tanh),
        UnaryFn::Sigmoid => each(x, out, xla_math::logistic),
        UnaryFn::Silu => each(x, out, |v| v * xla_math::logistic(v)),
        UnaryFn::Log1p => each(x, out, xla_math::log1p),
        UnaryFn::Expm1 => each(x, out, xla_math::expm1),
        _ => each(x, out, |v| func.f(v)),
    }
}
