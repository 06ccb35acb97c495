//! Parameter initializers, as `jax.nn.initializers`.
//!
//! An [`Initializer`] is a function of a key and a shape that returns an
//! `f32` array; the constructors here build JAX's initializers with the same
//! formulas, so that they return the same numbers:
//!
//! ```
//! use flaxen::{init, random};
//!
//! let kernel = init::lecun_normal().init(random::key(0), &[3, 4]).unwrap();
//! assert_eq!(kernel.shape(), &[3, 4]);
//! // Any sampler of the right signature is an initializer too, as
//! // `kernel_init=jax.random.normal` in Flax:
//! let normal = init::Initializer::from_fn("normal", random::normal);
//! assert_eq!(normal.init(random::key(0), &[2]).unwrap().len(), 2);
//! ```

mod orthogonal;

use std::fmt;
use std::sync::Arc;

use ndarray::{ArrayD, IxDyn};

use crate::random::{self, Key, RandomError};

type InitFn = dyn Fn(Key, &[usize]) -> Result<ArrayD<f32>, RandomError> + Send + Sync;

/// A parameter initializer: `(key, shape) -> array`, as JAX's
/// `init(key, shape, dtype)` with `dtype=float32`. Cheap to clone.
#[derive(Clone)]
pub struct Initializer {
    name: Arc<str>,
    f: Arc<InitFn>,
}

impl Initializer {
    /// Wraps any function of a key and a shape, under a name for `Debug`.
    pub fn from_fn<F>(name: &str, f: F) -> Initializer
    where
        F: Fn(Key, &[usize]) -> Result<ArrayD<f32>, RandomError> + Send + Sync + 'static,
    {
        Initializer {
            name: name.into(),
            f: Arc::new(f),
        }
    }

    /// Draws an initial value of `shape` from `key`.
    pub fn init(&self, key: Key, shape: &[usize]) -> Result<ArrayD<f32>, RandomError> {
        (self.f)(key, shape)
    }

    /// The initializer's name, e.g. `"lecun_normal"`.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl fmt::Debug for Initializer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Initializer({})", self.name)
    }
}

fn checked_full(
    function: &'static str,
    shape: &[usize],
    v: f32,
) -> Result<ArrayD<f32>, RandomError> {
    random::element_count(function, shape)?;
    Ok(ArrayD::from_elem(IxDyn(shape), v))
}

/// All zeros; the key is ignored (`jax.nn.initializers.zeros`).
pub fn zeros() -> Initializer {
    Initializer::from_fn("zeros", |_, shape| checked_full("zeros", shape, 0.0))
}

/// All ones; the key is ignored (`jax.nn.initializers.ones`).
pub fn ones() -> Initializer {
    Initializer::from_fn("ones", |_, shape| checked_full("ones", shape, 1.0))
}

/// All `value`; the key is ignored (`jax.nn.initializers.constant(value)`).
pub fn constant(value: f32) -> Initializer {
    Initializer::from_fn("constant", move |_, shape| {
        checked_full("constant", shape, value)
    })
}

/// Normal with mean 0 and standard deviation `stddev`
/// (`jax.nn.initializers.normal(stddev)`; JAX's default stddev is 0.01).
pub fn normal(stddev: f32) -> Initializer {
    Initializer::from_fn("normal", move |key, shape| {
        Ok(random::normal(key, shape)? * stddev)
    })
}

/// Uniform in `[0, scale)` (`jax.nn.initializers.uniform(scale)`; JAX's
/// default scale is 0.01).
pub fn uniform(scale: f32) -> Initializer {
    Initializer::from_fn("uniform", move |key, shape| {
        Ok(random::uniform(key, shape)? * scale)
    })
}

/// Normal truncated to `(-2, 2)`, then scaled by `stddev`
/// (`jax.nn.initializers.truncated_normal(stddev)`). No variance correction
/// is applied, as in JAX.
pub fn truncated_normal(stddev: f32) -> Initializer {
    truncated_normal_between(stddev, -2.0, 2.0)
}

/// Normal truncated to `(lower, upper)`, then scaled by `stddev`
/// (`jax.nn.initializers.truncated_normal(stddev, lower=, upper=)`).
pub fn truncated_normal_between(stddev: f32, lower: f32, upper: f32) -> Initializer {
    Initializer::from_fn("truncated_normal", move |key, shape| {
        Ok(random::truncated_normal(key, lower, upper, shape)? * stddev)
    })
}

/// Which fan [`variance_scaling`] divides the scale by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FanMode {
    /// The number of inputs.
    FanIn,
    /// The number of outputs.
    FanOut,
    /// The arithmetic mean of inputs and outputs.
    FanAvg,
    /// The geometric mean of inputs and outputs.
    FanGeoAvg,
}

/// The distribution [`variance_scaling`] draws from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Distribution {
    /// Normal truncated to two standard deviations, rescaled to the variance.
    TruncatedNormal,
    /// Normal.
    Normal,
    /// Uniform in `[-limit, limit)`.
    Uniform,
}

/// Which axes of a weight shape are inputs, outputs and batch (ignored);
/// every other axis is "receptive field" (a convolution's spatial axes).
/// Negative axes count from the end, as in JAX.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FanAxes {
    /// Input axes (JAX default: `-2`).
    pub in_axis: Vec<isize>,
    /// Output axes (JAX default: `-1`).
    pub out_axis: Vec<isize>,
    /// Batch axes (JAX default: none).
    pub batch_axis: Vec<isize>,
}

impl Default for FanAxes {
    fn default() -> Self {
        FanAxes {
            in_axis: vec![-2],
            out_axis: vec![-1],
            batch_axis: vec![],
        }
    }
}

/// JAX's `_compute_fans`: `(fan_in, fan_out)` of a weight shape.
///
/// ```
/// use flaxen::init::{compute_fans, FanAxes};
/// // A 3x3 convolution from 16 to 32 channels: receptive field 9.
/// assert_eq!(compute_fans(&[3, 3, 16, 32], &FanAxes::default()).unwrap(), (144.0, 288.0));
/// ```
pub fn compute_fans(shape: &[usize], axes: &FanAxes) -> Result<(f64, f64), RandomError> {
    let err = |message: String| RandomError::Parameter {
        function: "variance_scaling",
        message,
    };
    if shape.len() < 2 && axes.in_axis == [-2] {
        return Err(err(format!(
            "can't compute input and output sizes of a {}-dimensional weights shape {shape:?} \
             with the default in_axis; it must be at least 2-D or name in_axis explicitly",
            shape.len()
        )));
    }
    let size = |axis_list: &[isize]| -> Result<f64, RandomError> {
        axis_list.iter().try_fold(1.0f64, |acc, &a| {
            let n = shape.len() as isize;
            let i = if a < 0 { a + n } else { a };
            if (0..n).contains(&i) {
                Ok(acc * shape[i as usize] as f64)
            } else {
                Err(err(format!("axis {a} is out of range for shape {shape:?}")))
            }
        })
    };
    let in_size = size(&axes.in_axis)?;
    let out_size = size(&axes.out_axis)?;
    let batch_size = size(&axes.batch_axis)?;
    let total: f64 = shape.iter().map(|&d| d as f64).product();
    let receptive_field = total / in_size / out_size / batch_size;
    Ok((in_size * receptive_field, out_size * receptive_field))
}

/// `jax.nn.initializers.variance_scaling(scale, mode, distribution)` with
/// the default axes: values with standard deviation `sqrt(scale / n)`, `n`
/// the fan chosen by `mode`.
pub fn variance_scaling(scale: f64, mode: FanMode, distribution: Distribution) -> Initializer {
    variance_scaling_with_axes(scale, mode, distribution, FanAxes::default())
}

/// [`variance_scaling`] with explicit input, output and batch axes.
pub fn variance_scaling_with_axes(
    scale: f64,
    mode: FanMode,
    distribution: Distribution,
    axes: FanAxes,
) -> Initializer {
    Initializer::from_fn("variance_scaling", move |key, shape| {
        let (fan_in, fan_out) = compute_fans(shape, &axes)?;
        let denominator = match mode {
            FanMode::FanIn => fan_in,
            FanMode::FanOut => fan_out,
            FanMode::FanAvg => (fan_in + fan_out) / 2.0,
            FanMode::FanGeoAvg => (fan_in * fan_out).sqrt(),
        };
        // As JAX: the ratio in f64, everything after it in f32.
        let variance = (scale / denominator) as f32;
        Ok(match distribution {
            Distribution::TruncatedNormal => {
                let stddev = variance.sqrt() / TRUNCATED_STDDEV;
                random::truncated_normal(key, -2.0, 2.0, shape)? * stddev
            }
            Distribution::Normal => random::normal(key, shape)? * variance.sqrt(),
            Distribution::Uniform => {
                random::uniform_range(key, shape, -1.0, 1.0)? * (3.0 * variance).sqrt()
            }
        })
    })
}

/// LeCun normal: `variance_scaling(1, fan_in, truncated_normal)`; Flax's
/// default kernel initializer.
pub fn lecun_normal() -> Initializer {
    named(
        "lecun_normal",
        1.0,
        FanMode::FanIn,
        Distribution::TruncatedNormal,
    )
}

/// LeCun uniform: `variance_scaling(1, fan_in, uniform)`.
pub fn lecun_uniform() -> Initializer {
    named("lecun_uniform", 1.0, FanMode::FanIn, Distribution::Uniform)
}

/// Glorot (Xavier) normal: `variance_scaling(1, fan_avg, truncated_normal)`.
pub fn glorot_normal() -> Initializer {
    named(
        "glorot_normal",
        1.0,
        FanMode::FanAvg,
        Distribution::TruncatedNormal,
    )
}

/// Glorot (Xavier) uniform: `variance_scaling(1, fan_avg, uniform)`.
pub fn glorot_uniform() -> Initializer {
    named(
        "glorot_uniform",
        1.0,
        FanMode::FanAvg,
        Distribution::Uniform,
    )
}

/// He (Kaiming) normal: `variance_scaling(2, fan_in, truncated_normal)`.
pub fn he_normal() -> Initializer {
    named(
        "he_normal",
        2.0,
        FanMode::FanIn,
        Distribution::TruncatedNormal,
    )
}

/// He (Kaiming) uniform: `variance_scaling(2, fan_in, uniform)`.
pub fn he_uniform() -> Initializer {
    named("he_uniform", 2.0, FanMode::FanIn, Distribution::Uniform)
}

/// Standard deviation of a unit normal truncated to (-2, 2), as JAX writes
/// it (`.87962566103423978`, rounded to f32).
const TRUNCATED_STDDEV: f32 = 0.879_625_7;

fn named(name: &str, scale: f64, mode: FanMode, distribution: Distribution) -> Initializer {
    let inner = variance_scaling(scale, mode, distribution);
    Initializer {
        name: name.into(),
        f: inner.f,
    }
}

pub use orthogonal::{orthogonal, orthogonal_with_axis};
