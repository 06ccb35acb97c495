//! Permutations and choices.

use ndarray::{ArrayD, ArrayViewD, Axis, IxDyn};

use super::categorical::gumbel_named;
use super::discrete::{randint, rename};
use super::uniform::uniform_unchecked;
use crate::random::error::RandomError;
use crate::random::key::{split_n, Key};
use crate::xla::math::log;

/// A random permutation of `0..n` (`jax.random.permutation(key, n)`).
///
/// JAX shuffles by sorting on random 32-bit keys, repeated
/// `ceil(3 ln n / ln(2^32 - 1))` times (once up to n = 1625) so that ties
/// are rare; the result is identical.
///
/// ```
/// use flaxen::random;
/// let p = random::permutation(random::key(0), 5).unwrap();
/// let mut sorted = p.iter().copied().collect::<Vec<_>>();
/// sorted.sort();
/// assert_eq!(sorted, vec![0, 1, 2, 3, 4]);
/// ```
pub fn permutation(key: Key, n: usize) -> Result<ArrayD<i32>, RandomError> {
    let n32 = index_count("permutation", n)?;
    let x = ArrayD::from_shape_vec(IxDyn(&[n]), (0..n32).collect()).expect("1-D");
    shuffle("permutation", key, x, 0)
}

/// A permutation of the array `x` along `axis`
/// (`jax.random.permutation(key, x, axis, independent)`): whole slices are
/// permuted, unless `independent`, in which case each 1-D lane along `axis`
/// is shuffled on its own.
pub fn permutation_along<T: Clone>(
    key: Key,
    x: &ArrayViewD<'_, T>,
    axis: usize,
    independent: bool,
) -> Result<ArrayD<T>, RandomError> {
    if axis >= x.ndim() {
        return Err(RandomError::Shape {
            function: "permutation",
            message: format!("axis {axis} is out of range for shape {:?}", x.shape()),
        });
    }
    if independent || x.ndim() == 1 {
        return shuffle("permutation", key, x.to_owned(), axis);
    }
    let order = permutation(key, x.shape()[axis])?;
    let order: Vec<usize> = order.iter().map(|&i| i as usize).collect();
    Ok(x.select(Axis(axis), &order))
}

/// JAX's `_shuffle`: rounds of a stable sort of each lane along `axis` by
/// random 32-bit keys drawn for the whole array.
fn shuffle<T: Clone>(
    function: &'static str,
    mut key: Key,
    mut x: ArrayD<T>,
    axis: usize,
) -> Result<ArrayD<T>, RandomError> {
    let size = x.len().max(1) as f64;
    let rounds = (3.0 * size.ln() / (u32::MAX as f64).ln()).ceil() as usize;
    for _ in 0..rounds {
        let [next, subkey] = split_n(key);
        key = next;
        let sort_keys = super::bits(subkey, x.shape()).map_err(|e| rename(e, function))?;
        let mut sorted = x.clone();
        for (mut lane, (keys, values)) in sorted.lanes_mut(Axis(axis)).into_iter().zip(
            sort_keys
                .lanes(Axis(axis))
                .into_iter()
                .zip(x.lanes(Axis(axis))),
        ) {
            let mut order: Vec<usize> = (0..keys.len()).collect();
            order.sort_by_key(|&i| keys[i]); // stable, as lax.sort_key_val
            for (dst, &src) in lane.iter_mut().zip(&order) {
                *dst = values[src].clone();
            }
        }
        x = sorted;
    }
    Ok(x)
}

/// Draws indices from `0..n` (`jax.random.choice(key, n, shape, replace, p)`),
/// uniformly or with probabilities `p`, with or without replacement.
///
/// Errors: `n == 0` with draws to make, more draws than items without
/// replacement, `p` of the wrong length, negative or NaN probabilities, or
/// probabilities that sum to zero.
///
/// ```
/// use flaxen::random;
/// let picks = random::choice(random::key(0), 10, &[3], false, None).unwrap();
/// assert_eq!(picks.len(), 3);
/// assert!(random::choice(random::key(0), 2, &[3], false, None).is_err());
/// ```
pub fn choice(
    key: Key,
    n: usize,
    shape: &[usize],
    replace: bool,
    p: Option<&[f32]>,
) -> Result<ArrayD<i32>, RandomError> {
    let draws = crate::random::error::checked_alloc::<i32>("choice", shape)?;
    if draws == 0 {
        return Ok(ArrayD::zeros(IxDyn(shape)));
    }
    let n32 = index_count("choice", n)?;
    if n == 0 {
        return Err(RandomError::Parameter {
            function: "choice",
            message: format!("cannot draw {draws} samples from 0 items"),
        });
    }
    if !replace && draws > n {
        return Err(RandomError::TooManyDraws {
            function: "choice",
            draws,
            items: n,
        });
    }
    let Some(p) = p else {
        return if replace {
            randint(key, shape, 0, n32).map_err(|e| rename(e, "choice"))
        } else {
            let perm = permutation(key, n)?;
            let picked: Vec<i32> = perm.iter().take(draws).copied().collect();
            Ok(ArrayD::from_shape_vec(IxDyn(shape), picked).expect("draws elements"))
        };
    };
    check_probabilities(p, n)?;
    if replace {
        // XLA reads subnormal probabilities as zero (DAZ), and flushes a
        // subnormal product (FTZ).
        let flushed: Vec<f32> = p.iter().map(|&v| flush(v)).collect();
        let cumulative = cumsum(&flushed);
        let total = cumulative[n - 1];
        let u = uniform_unchecked(key, shape, 0.0, 1.0, "choice")?;
        Ok(u.mapv(|u| {
            let r = flush(total * (1.0 - u));
            // searchsorted, side='left': the first index with cumulative >= r.
            cumulative.partition_point(|&c| c < r) as i32
        }))
    } else {
        let g = gumbel_named("choice", key, &[n])?;
        let scores: Vec<f32> = g
            .iter()
            .zip(p)
            .map(|(&g, &p)| g + standalone_log(p, n))
            .collect();
        let mut order: Vec<usize> = (0..n).collect();
        // lax.top_k: largest first, ties by lower index (stable sort).
        order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
        let picked: Vec<i32> = order.iter().take(draws).map(|&i| i as i32).collect();
        Ok(ArrayD::from_shape_vec(IxDyn(shape), picked).expect("draws elements"))
    }
}

/// A subnormal as XLA's CPU kernels read it (denormals are zero).
fn flush(x: f32) -> f32 {
    if x.abs() < f32::MIN_POSITIVE {
        0.0f32.copysign(x)
    } else {
        x
    }
}

/// `jnp.log(p)` of a stand-alone array of `n` floats as XLA's CPU runs it:
/// for 3, 5, 6 or 7 elements it calls the C library's `logf` (measured
/// with jaxlib 0.10.2; `f32::ln` is that `logf` on Linux), which under the
/// kernels' denormals-are-zero mode maps every subnormal to
/// `-103.97208` (`0xC2CF_F1B4`); for other lengths it uses its own
/// polynomial, which flushes subnormals to zero (`-inf`).
fn standalone_log(p: f32, n: usize) -> f32 {
    if matches!(n, 3 | 5 | 6 | 7) {
        if p != 0.0 && p.abs() < f32::MIN_POSITIVE {
            f32::from_bits(0xC2CF_F1B4)
        } else {
            p.ln()
        }
    } else {
        log(p)
    }
}

/// Errors for probabilities JAX would silently accept. Subnormal
/// probabilities count as zero, as XLA's CPU computes with them, so all
/// zero or subnormal is the "sum to zero" error.
fn check_probabilities(p: &[f32], n: usize) -> Result<(), RandomError> {
    if p.len() != n {
        return Err(RandomError::Shape {
            function: "choice",
            message: format!("p has {} probabilities for {n} items", p.len()),
        });
    }
    if let Some(&bad) = p
        .iter()
        .find(|v| v.is_nan() || **v < 0.0 || v.is_infinite())
    {
        return Err(RandomError::Probability {
            function: "choice",
            p: bad,
        });
    }
    if p.iter().all(|&v| flush(v) == 0.0) {
        return Err(RandomError::Parameter {
            function: "choice",
            message: "the probabilities p sum to zero (subnormal values count as zero, \
                      as XLA's CPU flushes them)"
                .to_string(),
        });
    }
    Ok(())
}

/// `n` as an `i32` index bound, as JAX's 32-bit indices require.
fn index_count(function: &'static str, n: usize) -> Result<i32, RandomError> {
    i32::try_from(n).map_err(|_| RandomError::Parameter {
        function,
        message: format!("{n} items do not fit 32-bit indices"),
    })
}

/// `jnp.cumsum` of `f32` as XLA on CPU computes it: sequential sums within
/// blocks of 16, with the inclusive scan of the block totals (computed the
/// same way, recursively) added to every later block.
pub(crate) fn cumsum(x: &[f32]) -> Vec<f32> {
    const B: usize = 16;
    let mut out: Vec<f32> = Vec::with_capacity(x.len());
    for block in x.chunks(B) {
        let mut acc = 0.0f32;
        out.extend(block.iter().map(|&v| {
            acc += v;
            acc
        }));
    }
    if x.len() > B {
        let totals: Vec<f32> = out.chunks(B).map(|b| b[b.len() - 1]).collect();
        let carries = cumsum(&totals);
        for (block, &carry) in out.chunks_mut(B).skip(1).zip(&carries) {
            for v in block {
                *v += carry;
            }
        }
    }
    out
}
