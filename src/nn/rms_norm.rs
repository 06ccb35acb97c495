//! `RMSNorm` (`flax.linen.RMSNorm`).

use ndarray::ArrayD;

use crate::core::{Result, Scope};
use crate::init::{self, Initializer};
use crate::tensor::Tensor;

use super::module::Module;
use super::normalization::{canonical_axis, mask_tensor, masked_mean, normalize, Mask};

/// Root-mean-square layer normalization (Flax's `nn.RMSNorm`): divides by
/// `sqrt(mean(x²) + epsilon)` over `reduction_axes` — no mean is
/// subtracted — and multiplies by a learned `scale` over `feature_axes`.
///
/// ```
/// use flaxen::nn::{Module, RMSNorm};
/// use flaxen::{random, tensor::Tensor};
///
/// let x = Tensor::from_vec(vec![3.0, 4.0], &[1, 2])?;
/// let v = RMSNorm::new().init(random::key(0), x.clone())?;
/// let y = RMSNorm::new().apply(&v, x, ())?;
/// // mean(x²) = 12.5: y = x / sqrt(12.5 + 1e-6).
/// assert!((y.to_vec()[1] - 4.0 / 12.5f32.sqrt()).abs() < 1e-6);
/// # Ok::<(), flaxen::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct RMSNorm {
    /// Added to the mean square (default 1e-6).
    pub epsilon: f32,
    /// Axes of the statistics (default `[-1]`).
    pub reduction_axes: Vec<isize>,
    /// Axes of the learned scale (default `[-1]`).
    pub feature_axes: Vec<isize>,
    /// Learn a scale (default true).
    pub use_scale: bool,
    /// Scale initializer (ones).
    pub scale_init: Initializer,
    /// Where the statistics are computed (Flax's `mask=`); `None` for
    /// everywhere.
    pub mask: Option<ArrayD<bool>>,
}

impl Default for RMSNorm {
    fn default() -> Self {
        RMSNorm {
            epsilon: 1e-6,
            reduction_axes: vec![-1],
            feature_axes: vec![-1],
            use_scale: true,
            scale_init: init::ones(),
            mask: None,
        }
    }
}

impl RMSNorm {
    /// Flax's defaults.
    pub fn new() -> RMSNorm {
        RMSNorm::default()
    }

    /// Sets epsilon.
    pub fn epsilon(mut self, epsilon: f32) -> RMSNorm {
        self.epsilon = epsilon;
        self
    }

    /// Sets the axes of the statistics.
    pub fn reduction_axes(mut self, axes: &[isize]) -> RMSNorm {
        self.reduction_axes = axes.to_vec();
        self
    }

    /// Sets the axes of the learned scale.
    pub fn feature_axes(mut self, axes: &[isize]) -> RMSNorm {
        self.feature_axes = axes.to_vec();
        self
    }

    /// Sets `use_scale`.
    pub fn use_scale(mut self, on: bool) -> RMSNorm {
        self.use_scale = on;
        self
    }

    /// Computes the statistics only where `mask` is true.
    pub fn mask(mut self, mask: ArrayD<bool>) -> RMSNorm {
        self.mask = Some(mask);
        self
    }
}

/// Sorted, deduplicated, in-range axes.
pub(super) fn axes(s: &Scope<'_>, axes: &[isize], ndim: usize, what: &str) -> Result<Vec<usize>> {
    let mut out: Vec<usize> = axes
        .iter()
        .map(|&a| canonical_axis(s, a, ndim, what))
        .collect::<Result<_>>()?;
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// `mean(x², axes)`, masked as `jnp.mean(..., where=mask)`.
pub(super) fn mean_square(x: &Tensor, axes: &[usize], mask: Option<&Mask>) -> Result<Tensor> {
    let axes: Vec<isize> = axes.iter().map(|&a| a as isize).collect();
    let x2 = x.square();
    match mask {
        None => Ok(x2.mean(&axes, false)?),
        Some(m) => masked_mean(&x2, m, &axes),
    }
}

impl Module for RMSNorm {
    type Input = Tensor;
    type Output = Tensor;

    fn tabulate_input(&self, x: &Tensor) -> String {
        super::Shapes::shapes(x)
    }

    fn tabulate_output(&self, y: &Tensor) -> String {
        super::Shapes::shapes(y)
    }

    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let reduction = axes(s, &self.reduction_axes, x.ndim(), "RMSNorm reduction")?;
        let features = axes(s, &self.feature_axes, x.ndim(), "RMSNorm feature")?;
        let mask = mask_tensor(s, self.mask.as_ref(), &x)?;
        let var = mean_square(&x, &reduction, mask.as_ref())?;
        // Flax's mean is `zeros_like(var)`; `x - 0` is `x`.
        let mean = Tensor::zeros(var.shape());
        normalize(
            s,
            &x,
            &mean,
            &var,
            &reduction,
            &features,
            self.epsilon,
            self.use_scale,
            false,
            &self.scale_init,
            &init::zeros(),
        )
    }
}
