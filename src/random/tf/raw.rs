//! TensorFlow's raw V2 stateless kernels (`tf.raw_ops.Stateless*V2`), which
//! take an explicit Philox `key` and `counter` and an algorithm instead of a
//! seed: the layer under both the stateless functions (whose seed becomes a
//! key and counter by [`stateless_random_get_key_counter`]) and the
//! [`Generator`](super::Generator) (whose state is a key and counter).
//!
//! `alg` is checked first, then the shape, then the parameters, as the
//! kernels check them. On CPU TensorFlow runs Philox only (`Philox` and
//! `AutoSelect` give the same numbers); `ThreeFry` is refused with
//! [`TfRandomError::UnsupportedAlgorithm`], as TensorFlow refuses it.
//!
//! ```
//! use flaxen::random::tf::{
//!     stateless_normal, stateless_random_get_key_counter, stateless_random_normal_v2, Algorithm,
//! };
//! let (key, counter) = stateless_random_get_key_counter(&[1, 2])?;
//! let a = stateless_random_normal_v2::<f32>(&[3], key, counter, Algorithm::AutoSelect)?;
//! assert_eq!(a, stateless_normal::<f32, _>(&[3], &[1, 2], 0.0, 1.0)?);
//! # Ok::<(), flaxen::random::tf::TfRandomError>(())
//! ```

use ndarray::ArrayD;

use super::dtype::{SeedInt, TfFloat, TfInt};
use super::error::TfRandomError;
use super::ops;
use super::philox::Philox;
use super::sampler::element_count;
use super::scramble::stateless_key_counter;
use super::Algorithm;

/// `StatelessRandomGetKeyCounter`: the Philox key and counter of a
/// shape-`[2]` seed (the scramble every stateless function starts with).
///
/// ```
/// use flaxen::random::tf::stateless_random_get_key_counter;
/// let (key, counter) = stateless_random_get_key_counter(&[1i64, 2]).unwrap();
/// assert_eq!(key, 10413732777507651514);
/// assert_eq!(counter, [0, 17830669156045600267]);
/// ```
pub fn stateless_random_get_key_counter<S: SeedInt>(
    seed: &[S],
) -> Result<(u64, [u64; 2]), TfRandomError> {
    stateless_key_counter(seed)
}

/// The Philox stream of `key` and `counter` after checking `alg` and the
/// shape, in the kernels' order.
fn stream<T>(
    op: &'static str,
    shape: &[usize],
    key: u64,
    counter: [u64; 2],
    alg: Algorithm,
) -> Result<Philox, TfRandomError> {
    if alg == Algorithm::ThreeFry {
        return Err(TfRandomError::UnsupportedAlgorithm { op, alg });
    }
    element_count::<T>(shape)?;
    Ok(Philox::from_key_counter(key, counter))
}

/// `StatelessRandomUniformV2`: floats uniform in `[0, 1)`.
pub fn stateless_random_uniform_v2<T: TfFloat + Default>(
    shape: &[usize],
    key: u64,
    counter: [u64; 2],
    alg: Algorithm,
) -> Result<ArrayD<T>, TfRandomError> {
    let p = stream::<T>("StatelessRandomUniformV2", shape, key, counter, alg)?;
    Ok(ops::uniform(&p, shape, T::ZERO, T::ONE))
}

/// `StatelessRandomNormalV2`: standard normal floats.
pub fn stateless_random_normal_v2<T: TfFloat + Default>(
    shape: &[usize],
    key: u64,
    counter: [u64; 2],
    alg: Algorithm,
) -> Result<ArrayD<T>, TfRandomError> {
    let p = stream::<T>("StatelessRandomNormalV2", shape, key, counter, alg)?;
    Ok(ops::normal(&p, shape, T::ZERO, T::ONE))
}

/// `StatelessTruncatedNormalV2`: standard normal floats, values beyond two
/// standard deviations drawn again.
pub fn stateless_truncated_normal_v2<T: TfFloat + Default>(
    shape: &[usize],
    key: u64,
    counter: [u64; 2],
    alg: Algorithm,
) -> Result<ArrayD<T>, TfRandomError> {
    let p = stream::<T>("StatelessTruncatedNormalV2", shape, key, counter, alg)?;
    Ok(ops::truncated_normal(&p, shape, T::ZERO, T::ONE))
}

/// `StatelessRandomUniformIntV2`: integers in `[minval, maxval)`, as
/// `minval + bits % (maxval - minval)`. Signed dtypes only (TensorFlow's CPU
/// kernel has `int32` and `int64`), `minval < maxval`.
pub fn stateless_random_uniform_int_v2<T: TfInt + Default>(
    shape: &[usize],
    key: u64,
    counter: [u64; 2],
    alg: Algorithm,
    minval: T,
    maxval: T,
) -> Result<ArrayD<T>, TfRandomError> {
    let p = stream::<T>("StatelessRandomUniformIntV2", shape, key, counter, alg)?;
    ops::check_int_range(minval, maxval)?;
    Ok(ops::range_int(&p, shape, minval, maxval))
}

/// `StatelessRandomUniformFullIntV2`: every bit pattern of the dtype.
pub fn stateless_random_uniform_full_int_v2<T: TfInt + Default>(
    shape: &[usize],
    key: u64,
    counter: [u64; 2],
    alg: Algorithm,
) -> Result<ArrayD<T>, TfRandomError> {
    let p = stream::<T>("StatelessRandomUniformFullIntV2", shape, key, counter, alg)?;
    Ok(ops::full_int(&p, shape))
}
