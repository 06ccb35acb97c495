//! TensorFlow's stateless random functions (`tf.random.stateless_*`).
//!
//! Each function is pure: the same shape, seed and parameters always give
//! the same array. The seed is a shape-`[2]` integer slice (`i32` or `i64`);
//! it is scrambled into a Philox key and counter
//! ([`stateless_key_counter`](super::stateless_key_counter)), and the
//! elements are generated in row-major order from that Philox stream. This
//! is `alg="philox"`, which is also what `alg="auto_select"` (the default)
//! uses on CPU.

use ndarray::{Array2, ArrayD};

use super::dtype::{SeedInt, TfFloat, TfInt};
use super::error::TfRandomError;
use super::ops;
use super::sampler::element_count;
use super::scramble::philox_for_seed;

/// `tf.random.stateless_uniform` for floats: uniform in `[minval, maxval)`.
///
/// The result is `rnd * (maxval - minval) + minval` with `rnd` a multiple of
/// 2^-23 (`f32`) or 2^-52 (`f64`) in `[0, 1)`. Like TensorFlow, float ranges
/// are not checked.
///
/// ```
/// use flaxen::random::tf::stateless_uniform;
/// let x = stateless_uniform::<f32, _>(&[2, 3], &[1, 2], 0.0, 1.0).unwrap();
/// assert_eq!(x.shape(), &[2, 3]);
/// assert!(x.iter().all(|&v| (0.0..1.0).contains(&v)));
/// ```
pub fn stateless_uniform<T: TfFloat + Default, S: SeedInt>(
    shape: &[usize],
    seed: &[S],
    minval: T,
    maxval: T,
) -> Result<ArrayD<T>, TfRandomError> {
    element_count::<T>(shape)?;
    let p = philox_for_seed(seed)?;
    Ok(ops::uniform(&p, shape, minval, maxval))
}

/// `tf.random.stateless_uniform` for integers with `minval` and `maxval`:
/// `minval + bits % (maxval - minval)`, a plain (slightly biased) modulo.
///
/// Errors with [`TfRandomError::UnsignedRange`] for `u32`/`u64` and
/// [`TfRandomError::EmptyRange`] unless `minval < maxval`, as TensorFlow.
///
/// ```
/// use flaxen::random::tf::stateless_uniform_int;
/// let x = stateless_uniform_int::<i32, _>(&[5], &[1, 2], -3, 4).unwrap();
/// assert!(x.iter().all(|&v| (-3..4).contains(&v)));
/// assert!(stateless_uniform_int::<i32, _>(&[5], &[1, 2], 4, 4).is_err());
/// ```
pub fn stateless_uniform_int<T: TfInt + Default, S: SeedInt>(
    shape: &[usize],
    seed: &[S],
    minval: T,
    maxval: T,
) -> Result<ArrayD<T>, TfRandomError> {
    element_count::<T>(shape)?;
    ops::check_int_range(minval, maxval)?;
    let p = philox_for_seed(seed)?;
    Ok(ops::range_int(&p, shape, minval, maxval))
}

/// `tf.random.stateless_uniform` for integers with `minval=maxval=None`:
/// every bit pattern of the dtype.
///
/// ```
/// use flaxen::random::tf::stateless_uniform_full_int;
/// let x = stateless_uniform_full_int::<u32, _>(&[4], &[1, 2]).unwrap();
/// assert_eq!(x.as_slice().unwrap(), &[0x41ec0a2c, 0x679894f1, 0xebff843e, 0x16148793]);
/// ```
pub fn stateless_uniform_full_int<T: TfInt + Default, S: SeedInt>(
    shape: &[usize],
    seed: &[S],
) -> Result<ArrayD<T>, TfRandomError> {
    element_count::<T>(shape)?;
    let p = philox_for_seed(seed)?;
    Ok(ops::full_int(&p, shape))
}

/// `tf.random.stateless_normal`: normal with `mean` and `stddev`
/// (Box–Muller, sine term first).
///
/// ```
/// use flaxen::random::tf::stateless_normal;
/// let x = stateless_normal::<f32, _>(&[2, 3], &[1, 2], 0.0, 1.0).unwrap();
/// // TF 2.21 prints [[0.5441101 0.20738031 0.07356432] [0.04643455 -1.3015898 -0.9538565]].
/// assert_eq!(x[[0, 0]], 0.5441101);
/// assert_eq!(x[[1, 2]], -0.9538565);
/// ```
pub fn stateless_normal<T: TfFloat + Default, S: SeedInt>(
    shape: &[usize],
    seed: &[S],
    mean: T,
    stddev: T,
) -> Result<ArrayD<T>, TfRandomError> {
    element_count::<T>(shape)?;
    let p = philox_for_seed(seed)?;
    Ok(ops::normal(&p, shape, mean, stddev))
}

/// `tf.random.stateless_truncated_normal`: normal values more than two
/// standard deviations from the mean are dropped and drawn again.
///
/// ```
/// use flaxen::random::tf::stateless_truncated_normal;
/// let x = stateless_truncated_normal::<f64, _>(&[100], &[7, 8], 1.0, 0.5).unwrap();
/// assert!(x.iter().all(|&v| (0.0..2.0).contains(&v)));
/// ```
pub fn stateless_truncated_normal<T: TfFloat + Default, S: SeedInt>(
    shape: &[usize],
    seed: &[S],
    mean: T,
    stddev: T,
) -> Result<ArrayD<T>, TfRandomError> {
    element_count::<T>(shape)?;
    let p = philox_for_seed(seed)?;
    Ok(ops::truncated_normal(&p, shape, mean, stddev))
}

/// `tf.random.experimental.stateless_split`: `num` new seeds, one per row,
/// of the seed's dtype.
///
/// ```
/// use flaxen::random::tf::stateless_split;
/// let s = stateless_split(&[1i32, 2], 3).unwrap();
/// assert_eq!(s.row(0).to_vec(), [1105988140, 1738052849]);
/// assert_eq!(s.row(2).to_vec(), [10670227, -246211131]);
/// ```
pub fn stateless_split<S: SeedInt + Default>(
    seed: &[S],
    num: usize,
) -> Result<Array2<S>, TfRandomError> {
    let flat = stateless_uniform_full_int::<S, S>(&[num, 2], seed)?;
    Ok(flat
        .into_dimensionality()
        .expect("stateless_uniform_full_int returns the requested shape"))
}

/// `tf.random.experimental.stateless_fold_in`: a new seed from a seed and an
/// integer, `[first full-range value of data's dtype, data]`, of data's
/// dtype (`int32`, `int64`, `uint32` or `uint64`).
///
/// ```
/// use flaxen::random::tf::stateless_fold_in;
/// assert_eq!(stateless_fold_in(&[1i32, 2], 3i32).unwrap(), [1105988140, 3]);
/// assert_eq!(stateless_fold_in(&[1i32, 2], 3u32).unwrap(), [1105988140, 3]);
/// ```
pub fn stateless_fold_in<S: SeedInt, D: TfInt + Default>(
    seed: &[S],
    data: D,
) -> Result<[D; 2], TfRandomError> {
    let first = stateless_uniform_full_int::<D, S>(&[], seed)?;
    Ok([first[[]], data])
}
