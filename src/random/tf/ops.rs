//! The V2 kernels with TensorFlow's Python post-processing (spec §3.4):
//! shared by the stateless functions and the [`Generator`](super::Generator).

use ndarray::ArrayD;

use super::dtype::{TfFloat, TfInt};
use super::error::TfRandomError;
use super::sampler::{self, shaped, BlockSource};

/// `rnd * (maxval - minval) + minval`, with `maxval - minval` computed first.
pub(crate) fn uniform<T, S>(src: &S, shape: &[usize], minval: T, maxval: T) -> ArrayD<T>
where
    T: TfFloat + Default,
    S: BlockSource + ?Sized,
{
    let n = shape.iter().product();
    let mut v = sampler::uniform::<T, S>(src, n);
    let width = maxval - minval;
    v.iter_mut().for_each(|x| *x = *x * width + minval);
    shaped(shape, v)
}

/// `rnd * stddev + mean`, as two operations.
fn affine<T: TfFloat>(v: &mut [T], mean: T, stddev: T) {
    v.iter_mut().for_each(|x| *x = *x * stddev + mean);
}

/// Normal floats with `mean` and `stddev`.
pub(crate) fn normal<T, S>(src: &S, shape: &[usize], mean: T, stddev: T) -> ArrayD<T>
where
    T: TfFloat + Default,
    S: BlockSource + ?Sized,
{
    let mut v = sampler::normal::<T, S>(src, shape.iter().product());
    affine(&mut v, mean, stddev);
    shaped(shape, v)
}

/// Truncated normal floats with `mean` and `stddev`.
pub(crate) fn truncated_normal<T, S>(src: &S, shape: &[usize], mean: T, stddev: T) -> ArrayD<T>
where
    T: TfFloat + Default,
    S: BlockSource + ?Sized,
{
    let mut v = sampler::truncated_normal::<T, S>(src, shape.iter().product());
    affine(&mut v, mean, stddev);
    shaped(shape, v)
}

/// Full-range integers.
pub(crate) fn full_int<T, S>(src: &S, shape: &[usize]) -> ArrayD<T>
where
    T: TfInt + Default,
    S: BlockSource + ?Sized,
{
    shaped(
        shape,
        sampler::full_int::<T, S>(src, shape.iter().product()),
    )
}

/// Checks a bounded integer range as TensorFlow does: a signed dtype and
/// `minval < maxval`.
pub(crate) fn check_int_range<T: TfInt>(minval: T, maxval: T) -> Result<(), TfRandomError> {
    if !T::SIGNED {
        return Err(TfRandomError::UnsignedRange { dtype: T::NAME });
    }
    if minval >= maxval {
        return Err(TfRandomError::EmptyRange {
            minval: minval.to_string(),
            maxval: maxval.to_string(),
        });
    }
    Ok(())
}

/// Integers in `[minval, maxval)`; [`check_int_range`] must have passed.
pub(crate) fn range_int<T, S>(src: &S, shape: &[usize], minval: T, maxval: T) -> ArrayD<T>
where
    T: TfInt + Default,
    S: BlockSource + ?Sized,
{
    let n = shape.iter().product();
    shaped(shape, sampler::range_int::<T, S>(src, n, minval, maxval))
}
