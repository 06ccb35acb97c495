//! `GroupNorm` (`flax.linen.GroupNorm`).

use crate::core::{Result, Scope};
use crate::init::{self, Initializer};
use crate::tensor::Tensor;

use super::module::{config_error, Module};
use super::normalization::{compute_stats, normalize};
use super::rms_norm::axes;

/// Group normalization (Flax's `nn.GroupNorm`): the channels (last axis)
/// are split into groups, and each example is normalized per group over
/// the group's channels and every axis but the first (or
/// `reduction_axes`), with a learned `scale` and `bias` per channel.
///
/// ```
/// use flaxen::nn::{GroupNorm, Module};
/// use flaxen::{random, tensor::Tensor};
///
/// let x = Tensor::ones(&[2, 3, 3, 8]);
/// let gn = GroupNorm::new().num_groups(4);
/// let v = gn.init(random::key(0), x.clone())?;
/// assert_eq!(v.tensor("params/scale").unwrap().shape(), &[8]);
/// # Ok::<(), flaxen::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct GroupNorm {
    /// Number of groups (default 32); exclusive with `group_size`.
    pub num_groups: Option<usize>,
    /// Channels per group; exclusive with `num_groups`.
    pub group_size: Option<usize>,
    /// Added to the variance (default 1e-6).
    pub epsilon: f32,
    /// Axes of the statistics, ending with the last; default: all but the
    /// first.
    pub reduction_axes: Option<Vec<isize>>,
    /// `var = mean(x²) - mean(x)²` (default true).
    pub use_fast_variance: bool,
    /// Learn a scale (default true).
    pub use_scale: bool,
    /// Learn a bias (default true).
    pub use_bias: bool,
    /// Scale initializer (ones).
    pub scale_init: Initializer,
    /// Bias initializer (zeros).
    pub bias_init: Initializer,
}

impl Default for GroupNorm {
    fn default() -> Self {
        GroupNorm {
            num_groups: Some(32),
            group_size: None,
            epsilon: 1e-6,
            reduction_axes: None,
            use_fast_variance: true,
            use_scale: true,
            use_bias: true,
            scale_init: init::ones(),
            bias_init: init::zeros(),
        }
    }
}

impl GroupNorm {
    /// Flax's defaults (32 groups).
    pub fn new() -> GroupNorm {
        GroupNorm::default()
    }

    /// Sets the number of groups (and clears `group_size`).
    pub fn num_groups(mut self, n: usize) -> GroupNorm {
        self.num_groups = Some(n);
        self.group_size = None;
        self
    }

    /// Sets the channels per group (and clears `num_groups`, as Flax's
    /// `num_groups=None, group_size=n`).
    pub fn group_size(mut self, n: usize) -> GroupNorm {
        self.group_size = Some(n);
        self.num_groups = None;
        self
    }

    /// Sets epsilon.
    pub fn epsilon(mut self, epsilon: f32) -> GroupNorm {
        self.epsilon = epsilon;
        self
    }

    /// Sets the axes of the statistics (the last axis must be among them).
    pub fn reduction_axes(mut self, axes: &[isize]) -> GroupNorm {
        self.reduction_axes = Some(axes.to_vec());
        self
    }

    /// Sets `use_fast_variance`.
    pub fn use_fast_variance(mut self, on: bool) -> GroupNorm {
        self.use_fast_variance = on;
        self
    }
}

impl Module for GroupNorm {
    type Input = Tensor;
    type Output = Tensor;

    fn tabulate_input(&self, x: &Tensor) -> String {
        super::Shapes::shapes(x)
    }

    fn tabulate_output(&self, y: &Tensor) -> String {
        super::Shapes::shapes(y)
    }

    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let nd = x.ndim();
        if nd == 0 {
            return Err(config_error(
                s,
                "GroupNorm needs an input with a channel axis".into(),
            ));
        }
        let requested: Vec<isize> = match &self.reduction_axes {
            Some(a) => a.clone(),
            None => (1..nd as isize - 1).chain([-1]).collect(),
        };
        let reduction = axes(s, &requested, nd, "GroupNorm reduction")?;
        if reduction.last() != Some(&(nd - 1)) {
            return Err(config_error(
                s,
                format!(
                    "the reduction axes {requested:?} must include the last axis, the channels"
                ),
            ));
        }
        let channels = x.shape()[nd - 1];
        let groups = match (self.num_groups, self.group_size) {
            (Some(g), None) => g,
            (None, Some(size)) => {
                if size == 0 || !channels.is_multiple_of(size) {
                    return Err(config_error(
                        s,
                        format!("number of channels ({channels}) is not a multiple of the group size ({size})"),
                    ));
                }
                channels / size
            }
            _ => {
                return Err(config_error(
                    s,
                    "either num_groups or group_size must be set, not both".into(),
                ))
            }
        };
        if groups == 0 || !channels.is_multiple_of(groups) {
            return Err(config_error(
                s,
                format!("number of groups ({groups}) does not divide the number of channels ({channels})"),
            ));
        }
        let size = channels / groups;
        let mut group_shape: Vec<isize> = x.shape()[..nd - 1].iter().map(|&d| d as isize).collect();
        group_shape.extend([groups as isize, size as isize]);
        let grouped = x.reshape(&group_shape)?;
        // The statistics over the reduction axes (without the channels)
        // and the position within each group.
        let mut stat_axes: Vec<usize> = reduction[..reduction.len() - 1].to_vec();
        stat_axes.push(nd);
        let (mean, var) = compute_stats(&grouped, &stat_axes, self.use_fast_variance, None)?;
        // jnp.repeat(stats, size, axis=-1): each group's value per channel.
        let repeat = |t: &Tensor| -> Result<Tensor> {
            let mut with_one: Vec<isize> = t.shape().iter().map(|&d| d as isize).collect();
            with_one.push(1);
            let mut spread: Vec<usize> = t.shape().to_vec();
            spread.push(size);
            let mut out: Vec<isize> = t.shape().iter().map(|&d| d as isize).collect();
            let last = out.len() - 1;
            out[last] *= size as isize;
            Ok(t.reshape(&with_one)?.broadcast_to(&spread)?.reshape(&out)?)
        };
        let (mean, var) = (repeat(&mean)?, repeat(&var)?);
        normalize(
            s,
            &x,
            &mean,
            &var,
            &reduction[..reduction.len() - 1],
            &[nd - 1],
            self.epsilon,
            self.use_scale,
            self.use_bias,
            &self.scale_init,
            &self.bias_init,
        )
    }
}
