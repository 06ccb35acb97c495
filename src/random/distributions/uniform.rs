//! Raw bits and uniform floats.

use ndarray::ArrayD;

use crate::random::error::RandomError;
use crate::random::key::Key;
use crate::random::sampling::sample;

/// Random 32-bit words (`jax.random.bits(key, shape)` with `dtype=uint32`).
///
/// ```
/// use flaxen::random;
/// let b = random::bits(random::key(1), &[4]).unwrap();
/// assert_eq!(b.as_slice().unwrap(), &[1883912375, 2292451390, 1915204986, 1882898417]);
/// ```
pub fn bits(key: Key, shape: &[usize]) -> Result<ArrayD<u32>, RandomError> {
    sample(
        "bits",
        &key,
        shape,
        #[inline(always)]
        |words, out| out.copy_from_slice(words),
    )
}

/// A float in `[0, 1)` from 32 random bits: the top 23 bits become the
/// mantissa of a number in `[1, 2)`, from which 1 is subtracted.
#[inline(always)]
pub(crate) fn unit_float(word: u32) -> f32 {
    f32::from_bits((word >> 9) | 0x3F80_0000) - 1.0
}

/// `max(minval, u * (maxval - minval) + minval)` as JAX computes it on CPU:
/// XLA fuses the multiply-add into one rounding, and its `max` propagates
/// NaN.
#[inline(always)]
pub(crate) fn scale_unit(u: f32, minval: f32, maxval: f32) -> f32 {
    let x = u.mul_add(maxval - minval, minval);
    if x.is_nan() || x > minval {
        x
    } else {
        minval
    }
}

/// Uniform floats in `[0, 1)` (`jax.random.uniform(key, shape)`).
pub fn uniform(key: Key, shape: &[usize]) -> Result<ArrayD<f32>, RandomError> {
    sample(
        "uniform",
        &key,
        shape,
        #[inline(always)]
        |words, out| {
            for (o, &w) in out.iter_mut().zip(words) {
                *o = unit_float(w);
            }
        },
    )
}

/// Uniform floats in `[minval, maxval)`
/// (`jax.random.uniform(key, shape, minval=minval, maxval=maxval)`).
///
/// Unlike JAX, which silently returns `minval` everywhere for an empty or
/// reversed range, `minval >= maxval` (or a NaN bound) is an error.
pub fn uniform_range(
    key: Key,
    shape: &[usize],
    minval: f32,
    maxval: f32,
) -> Result<ArrayD<f32>, RandomError> {
    check_range("uniform", minval, maxval)?;
    uniform_unchecked(key, shape, minval, maxval, "uniform")
}

/// Uniform floats without checking the range, for samplers whose bounds are
/// known to be valid.
pub(crate) fn uniform_unchecked(
    key: Key,
    shape: &[usize],
    minval: f32,
    maxval: f32,
    function: &'static str,
) -> Result<ArrayD<f32>, RandomError> {
    sample(
        function,
        &key,
        shape,
        #[inline(always)]
        |words, out| {
            for (o, &w) in out.iter_mut().zip(words) {
                *o = scale_unit(unit_float(w), minval, maxval);
            }
        },
    )
}

/// An error unless `low < high` (which also rules out NaN).
pub(crate) fn check_range<T: PartialOrd + std::fmt::Display>(
    function: &'static str,
    low: T,
    high: T,
) -> Result<(), RandomError> {
    if low < high {
        Ok(())
    } else {
        Err(RandomError::EmptyRange {
            function,
            low: low.to_string(),
            high: high.to_string(),
        })
    }
}
