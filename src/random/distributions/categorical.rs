//! Gumbel and exponential floats, and categorical draws by the Gumbel-max
//! trick.

use ndarray::{ArrayD, ArrayViewD, Axis, IxDyn};

use super::uniform::{scale_unit, unit_float};
use crate::random::error::RandomError;
use crate::random::key::Key;
use crate::random::sampling::sample;
use crate::xla::math::{log, log1p};

/// Standard Gumbel floats (`jax.random.gumbel(key, shape)`, the default
/// `mode="low"`): `-log(-log(u))` for `u` uniform in `[tiny, 1)`.
pub fn gumbel(key: Key, shape: &[usize]) -> Result<ArrayD<f32>, RandomError> {
    gumbel_named("gumbel", key, shape)
}

pub(crate) fn gumbel_named(
    function: &'static str,
    key: Key,
    shape: &[usize],
) -> Result<ArrayD<f32>, RandomError> {
    sample(
        function,
        &key,
        shape,
        #[inline(always)]
        |words, out| {
            for (o, &w) in out.iter_mut().zip(words) {
                let u = scale_unit(unit_float(w), f32::MIN_POSITIVE, 1.0);
                *o = -log(-log(u));
            }
        },
    )
}

/// Standard exponential floats (`jax.random.exponential(key, shape)`):
/// `-log1p(-u)` for `u` uniform in `[0, 1)`.
pub fn exponential(key: Key, shape: &[usize]) -> Result<ArrayD<f32>, RandomError> {
    sample(
        "exponential",
        &key,
        shape,
        #[inline(always)]
        |words, out| {
            for (o, &w) in out.iter_mut().zip(words) {
                *o = -log1p(-unit_float(w));
            }
        },
    )
}

/// Draws category indices from unnormalized log-probabilities
/// (`jax.random.categorical(key, logits, axis, shape)`, with replacement):
/// `argmax(gumbel + logits)` along `axis`.
///
/// The result has shape `shape`, which must end with the batch shape (the
/// logits' shape without `axis`); its leading dimensions are independent
/// draws. `None` means the batch shape itself.
///
/// ```
/// use flaxen::random;
/// use ndarray::array;
/// let logits = array![[0.0f32, 10.0, 0.0], [10.0, 0.0, 0.0]].into_dyn();
/// let c = random::categorical(random::key(0), &logits.view(), -1, None).unwrap();
/// assert_eq!(c.shape(), &[2]);
/// ```
pub fn categorical(
    key: Key,
    logits: &ArrayViewD<'_, f32>,
    axis: isize,
    shape: Option<&[usize]>,
) -> Result<ArrayD<i32>, RandomError> {
    let ndim = logits.ndim();
    let ax = normalize_axis("categorical", axis, ndim)?;
    let mut batch = logits.shape().to_vec();
    batch.remove(ax);
    let shape = shape.unwrap_or(&batch);
    if shape.len() < batch.len() || shape[shape.len() - batch.len()..] != batch[..] {
        return Err(RandomError::Shape {
            function: "categorical",
            message: format!(
                "shape {shape:?} must end with the logits' batch shape {batch:?} \
                 (logits shape {:?} without axis {axis})",
                logits.shape()
            ),
        });
    }
    // jnp.argmax refuses an empty axis ("attempt to get argmax of an empty
    // sequence"), whatever the other dimensions.
    if logits.shape()[ax] == 0 {
        return Err(RandomError::Shape {
            function: "categorical",
            message: format!(
                "the logits have no categories: axis {axis} of shape {:?} is empty",
                logits.shape()
            ),
        });
    }
    // The result's size, checked before anything is drawn; an empty result
    // is returned at once (its draws may be a huge count of nothing).
    if crate::random::error::checked_alloc::<i32>("categorical", shape)? == 0 {
        return Ok(ArrayD::from_shape_vec(IxDyn(shape), Vec::new()).expect("empty"));
    }
    let prefix = &shape[..shape.len() - batch.len()];
    let draws: usize = prefix.iter().product();
    let mut gshape = prefix.to_vec();
    gshape.extend_from_slice(logits.shape());
    let g = gumbel_named("categorical", key, &gshape)?;
    let logits = flushed(logits);
    let out = argmax_of_scores(g, &logits.view(), ax, draws);
    Ok(ArrayD::from_shape_vec(IxDyn(shape), out).expect("element count matches the shape"))
}

/// The logits as XLA's CPU reads them: subnormals as zero
/// (denormals-are-zero).
pub(crate) fn flushed(logits: &ArrayViewD<'_, f32>) -> ArrayD<f32> {
    logits.mapv(|l| {
        if l.abs() < f32::MIN_POSITIVE {
            0.0f32.copysign(l)
        } else {
            l
        }
    })
}

/// For each of `draws` blocks of Gumbel noise `g` (each of the logits'
/// shape), the index of the largest `noise + logit` along axis `ax`, in
/// row-major order of the other axes.
pub(crate) fn argmax_of_scores(
    g: ArrayD<f32>,
    logits: &ArrayViewD<'_, f32>,
    ax: usize,
    draws: usize,
) -> Vec<i32> {
    let g = g
        .into_shape_with_order(IxDyn(&[&[draws][..], logits.shape()].concat()))
        .expect("one block of noise per draw");
    let lanes = logits.len() / logits.shape()[ax].max(1);
    let mut out = Vec::with_capacity(draws * lanes);
    for d in 0..draws {
        let scores = &g.index_axis(Axis(0), d) + logits;
        out.extend(
            scores
                .lanes(Axis(ax))
                .into_iter()
                .map(|lane| argmax(lane.iter().copied())),
        );
    }
    out
}

/// Index of the first maximum, a NaN counting as larger than everything
/// (XLA's argmax).
pub(crate) fn argmax(values: impl Iterator<Item = f32>) -> i32 {
    let mut best: Option<(usize, f32)> = None;
    for (i, v) in values.enumerate() {
        best = match best {
            None => Some((i, v)),
            Some((_, b)) if b.is_nan() => best,
            Some(_) if v.is_nan() => Some((i, v)),
            Some((_, b)) if v > b => Some((i, v)),
            _ => best,
        };
    }
    best.map_or(0, |(i, _)| i as i32)
}

/// `axis` in `-ndim..ndim` as a non-negative axis.
pub(crate) fn normalize_axis(
    function: &'static str,
    axis: isize,
    ndim: usize,
) -> Result<usize, RandomError> {
    let n = ndim as isize;
    if (-n..n).contains(&axis) {
        Ok(axis.rem_euclid(n) as usize)
    } else {
        Err(RandomError::Shape {
            function,
            message: format!("axis {axis} is out of range for an array of rank {ndim}"),
        })
    }
}
