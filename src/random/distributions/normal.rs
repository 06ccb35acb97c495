//! Normal and truncated normal floats, through XLA's `erf_inv`.

use ndarray::ArrayD;

use super::uniform::{check_range, scale_unit, unit_float};
use crate::random::error::RandomError;
use crate::random::key::Key;
use crate::random::sampling::sample;
use crate::xla::math::{erf, erf_inv_slice};

/// `sqrt(2)` rounded to `f32`, as JAX's `np.array(np.sqrt(2), float32)`.
const SQRT2: f32 = std::f32::consts::SQRT_2;

/// Standard normal floats (`jax.random.normal(key, shape)`): a uniform `u`
/// in `(-1, 1)` mapped through `sqrt(2) * erf_inv(u)`.
///
/// ```
/// use flaxen::random;
/// let x = random::normal(random::key(0), &[2, 3]).unwrap();
/// assert_eq!(x.shape(), &[2, 3]);
/// ```
pub fn normal(key: Key, shape: &[usize]) -> Result<ArrayD<f32>, RandomError> {
    // The smallest float above -1, so that erf_inv stays finite.
    let lo = -1.0f32 + f32::EPSILON / 2.0;
    let hi = 1.0f32;
    sample(
        "normal",
        &key,
        shape,
        #[inline(always)]
        |words, out| {
            for (o, &w) in out.iter_mut().zip(words) {
                *o = scale_unit(unit_float(w), lo, hi);
            }
            erf_inv_slice(out);
            for o in out {
                *o *= SQRT2;
            }
        },
    )
}

/// Normal floats truncated to `(lower, upper)`
/// (`jax.random.truncated_normal(key, lower, upper, shape)`): a uniform
/// between `erf(lower/√2)` and `erf(upper/√2)` mapped through
/// `√2·erf_inv`, then clipped to the open interval.
///
/// `lower >= upper` (or a NaN bound) is an error.
pub fn truncated_normal(
    key: Key,
    lower: f32,
    upper: f32,
    shape: &[usize],
) -> Result<ArrayD<f32>, RandomError> {
    check_range("truncated_normal", lower, upper)?;
    // XLA rewrites JAX's `lower / sqrt2` as a multiply by the rounded
    // reciprocal 0.707106769, which differs in the last bit for some
    // bounds (e.g. -7.31e-3).
    let a = erf(lower * (1.0 / SQRT2));
    let b = erf(upper * (1.0 / SQRT2));
    let clip_lo = next_up(lower);
    let clip_hi = next_down(upper);
    sample(
        "truncated_normal",
        &key,
        shape,
        #[inline(always)]
        |words, out| {
            for (o, &w) in out.iter_mut().zip(words) {
                *o = scale_unit(unit_float(w), a, b);
            }
            erf_inv_slice(out);
            for o in out {
                let x = *o * SQRT2;
                // jnp.clip: maximum then minimum, NaN propagating.
                let x = if x < clip_lo { clip_lo } else { x };
                *o = if x > clip_hi { clip_hi } else { x };
            }
        },
    )
}

/// The next float towards +inf (`nextafter(x, inf)`).
pub(crate) fn next_up(x: f32) -> f32 {
    if x.is_nan() || x == f32::INFINITY {
        x
    } else if x == 0.0 {
        f32::from_bits(1)
    } else if x > 0.0 {
        f32::from_bits(x.to_bits() + 1)
    } else {
        f32::from_bits(x.to_bits() - 1)
    }
}

/// The next float towards -inf (`nextafter(x, -inf)`).
pub(crate) fn next_down(x: f32) -> f32 {
    -next_up(-x)
}
