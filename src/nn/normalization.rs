//! `BatchNorm` and `LayerNorm` (`flax.linen.normalization`).

use std::sync::Arc;

use crate::core::lift::BatchedFn;
use crate::core::{Result, Scope};
use crate::init::{self, Initializer};
use ndarray::ArrayD;

use crate::tensor::Tensor;

use super::module::{config_error, Module};

/// A normalization's `mask` (Flax's `mask=` argument): 1 where an element
/// counts, 0 where not, broadcast to the input's shape.
pub(super) struct Mask {
    /// The mask as 1/0 of the input's shape.
    ones: Tensor,
    /// Whether the mask, aligned to the input's axes from the last, has
    /// length 1 on an axis the input is longer on. XLA then computes the
    /// count from the smaller mask (a broadcast, or a product with the
    /// axis's length) and divides by it as a multiply by its `f32`
    /// reciprocal; a count summed from a mask of the input's own shape it
    /// divides by (measured: `jnp.mean(x, where=mask)` with masks of
    /// `[7]`, `[30, 7]`, `[10, 1, 7]`, `[10, 30, 1]` and `[10, 30, 7]` for
    /// an `x` of `[10, 30, 7]`).
    by_reciprocal: bool,
}

/// `jnp.mean(t, axes, where=mask)`: the masked sum divided by the count,
/// as XLA divides it (see [`Mask`]). The division's cotangent divides by
/// the count (eager JAX's transposed `div`, a program of its own).
pub(super) fn masked_mean(t: &Tensor, mask: &Mask, axes: &[isize]) -> Result<Tensor> {
    let sum = Tensor::select(&mask.ones, t, &Tensor::zeros(&[]))?.sum(axes, false)?;
    let count = mask.ones.sum(axes, false)?;
    Ok(sum.div_by_count(&count, mask.by_reciprocal)?)
}

/// Mean and variance over `axes`, as Flax's `_compute_stats`. With
/// `use_fast_variance`, `var = max(0, mean(x²) - mean(x)²)`, `x²` computed
/// before either mean (so that under `grad` the cotangents of `x` add up in
/// JAX's order); otherwise `var = mean((x - mean(x))²)`. A `mask` makes
/// every mean `jnp.mean(..., where=mask)` ([`masked_mean`]). (With an axis
/// name, see `BatchNorm::call_batched`.)
pub(super) fn compute_stats(
    x: &Tensor,
    axes: &[usize],
    use_fast_variance: bool,
    mask: Option<&Mask>,
) -> Result<(Tensor, Tensor)> {
    let axes: Vec<isize> = axes.iter().map(|&a| a as isize).collect();
    let mean_of = |t: &Tensor| -> Result<Tensor> {
        match mask {
            None => Ok(t.mean(&axes, false)?),
            Some(m) => masked_mean(t, m, &axes),
        }
    };
    if use_fast_variance {
        let x2 = x.square();
        let mu = mean_of(x)?;
        let mu2 = mean_of(&x2)?;
        let var = mu2.sub(&mu.square())?.maximum(&Tensor::scalar(0.0))?;
        Ok((mu, var))
    } else {
        let mu = mean_of(x)?;
        let mut kept = x.shape().to_vec();
        for &a in &axes {
            kept[a as usize] = 1;
        }
        let kept: Vec<isize> = kept.iter().map(|&d| d as isize).collect();
        let var = mean_of(&x.sub(&mu.reshape(&kept)?)?.square())?;
        Ok((mu, var))
    }
}

/// A boolean `mask` as a [`Mask`] for `x`, or a typed error when it does
/// not broadcast.
pub(super) fn mask_tensor(
    s: &Scope<'_>,
    mask: Option<&ArrayD<bool>>,
    x: &Tensor,
) -> Result<Option<Mask>> {
    let Some(mask) = mask else { return Ok(None) };
    let Some(view) = mask.broadcast(x.shape()) else {
        return Err(config_error(
            s,
            format!(
                "mask of shape {:?} does not broadcast to the input's shape {:?}",
                mask.shape(),
                x.shape()
            ),
        ));
    };
    // The mask's axes, aligned from the last (missing leading ones: 1).
    let lead = x.ndim() - mask.ndim();
    let by_reciprocal = x
        .shape()
        .iter()
        .enumerate()
        .any(|(a, &d)| d > 1 && (a < lead || mask.shape()[a - lead] == 1));
    let ones = Tensor::from_array(view.mapv(|m| if m { 1.0f32 } else { 0.0 }));
    Ok(Some(Mask {
        ones,
        by_reciprocal,
    }))
}

/// Flax's `_normalize`: `(x - mean) * rsqrt(var + eps) * scale + bias`, with
/// `scale` (created first) and `bias` as parameters over the feature axes.
#[allow(clippy::too_many_arguments)]
pub(super) fn normalize(
    s: &Scope<'_>,
    x: &Tensor,
    mean: &Tensor,
    var: &Tensor,
    reduction_axes: &[usize],
    feature_axes: &[usize],
    epsilon: f32,
    use_scale: bool,
    use_bias: bool,
    scale_init: &Initializer,
    bias_init: &Initializer,
) -> Result<Tensor> {
    let mut feature_shape = vec![1usize; x.ndim()];
    let mut reduced: Vec<usize> = Vec::new();
    for &a in feature_axes {
        feature_shape[a] = x.shape()[a];
        reduced.push(x.shape()[a]);
    }
    let as_isize = |v: &[usize]| v.iter().map(|&d| d as isize).collect::<Vec<_>>();
    // expand_dims(mean, reduction_axes)
    let mut stats_shape = x.shape().to_vec();
    for &a in reduction_axes {
        stats_shape[a] = 1;
    }
    let mean = mean.reshape(&as_isize(&stats_shape))?;
    let var = var.reshape(&as_isize(&stats_shape))?;
    let y = x.sub(&mean)?;
    let mut mul = var.add(&Tensor::scalar(epsilon))?.rsqrt();
    if use_scale {
        let scale = s.param("scale", scale_init, &reduced)?;
        mul = mul.mul(&scale.reshape(&as_isize(&feature_shape))?)?;
    }
    let mut y = y.mul(&mul)?;
    if use_bias {
        let bias = s.param("bias", bias_init, &reduced)?;
        y = y.add(&bias.reshape(&as_isize(&feature_shape))?)?;
    }
    Ok(y)
}

pub(super) fn canonical_axis(s: &Scope<'_>, axis: isize, ndim: usize, what: &str) -> Result<usize> {
    let n = ndim as isize;
    if (-n..n).contains(&axis) {
        Ok(axis.rem_euclid(n) as usize)
    } else {
        Err(config_error(
            s,
            format!("{what} axis {axis} is out of range for an input of rank {ndim}"),
        ))
    }
}

/// Batch normalization (Flax's `nn.BatchNorm`): normalizes over every axis
/// but `axis` with the batch statistics (training), or with the running
/// averages kept in the `batch_stats` collection (`use_running_average`).
/// In training, `apply` must be given `batch_stats` as mutable to update
/// them; during `init` the statistics are created but not updated, as in
/// Flax. Inside a [`Jit`](super::Jit) (not under `grad`) its forward pass
/// has the numbers XLA gives it in a jitted Flax module (statistics and
/// normalization fused, multiply-adds contracted), elsewhere eager JAX's.
#[derive(Clone, Debug)]
pub struct BatchNorm {
    /// Use the running averages instead of the batch statistics.
    pub use_running_average: bool,
    /// The feature axis (default -1).
    pub axis: isize,
    /// Running-average momentum (default 0.99).
    pub momentum: f64,
    /// Added to the variance (default 1e-5).
    pub epsilon: f32,
    /// Learn a scale (default true).
    pub use_scale: bool,
    /// Learn a bias (default true).
    pub use_bias: bool,
    /// Scale initializer (ones).
    pub scale_init: Initializer,
    /// Bias initializer (zeros).
    pub bias_init: Initializer,
    /// Name of a mapped axis to average the statistics over (inside `vmap`).
    pub axis_name: Option<String>,
    /// `var = mean(x²) - mean(x)²` (default true) rather than
    /// `mean((x - mean(x))²)`.
    pub use_fast_variance: bool,
    /// Where the statistics are computed (Flax's `mask=` argument of
    /// `__call__`): broadcastable to the input; `None` for everywhere.
    pub mask: Option<ArrayD<bool>>,
}

impl Default for BatchNorm {
    fn default() -> Self {
        BatchNorm {
            use_running_average: false,
            axis: -1,
            momentum: 0.99,
            epsilon: 1e-5,
            use_scale: true,
            use_bias: true,
            scale_init: init::ones(),
            bias_init: init::zeros(),
            axis_name: None,
            use_fast_variance: true,
            mask: None,
        }
    }
}

impl BatchNorm {
    /// Flax's defaults, in training mode.
    pub fn new() -> BatchNorm {
        BatchNorm::default()
    }

    /// Sets `use_running_average` (Flax's `use_running_average=not train`).
    pub fn use_running_average(mut self, on: bool) -> BatchNorm {
        self.use_running_average = on;
        self
    }

    /// Sets the momentum of the running averages.
    pub fn momentum(mut self, momentum: f64) -> BatchNorm {
        self.momentum = momentum;
        self
    }

    /// Sets epsilon.
    pub fn epsilon(mut self, epsilon: f32) -> BatchNorm {
        self.epsilon = epsilon;
        self
    }

    /// Averages the statistics over the mapped axis `name` of an enclosing
    /// `Vmap`.
    pub fn axis_name(mut self, name: &str) -> BatchNorm {
        self.axis_name = Some(name.to_string());
        self
    }

    /// Sets `use_fast_variance`.
    pub fn use_fast_variance(mut self, on: bool) -> BatchNorm {
        self.use_fast_variance = on;
        self
    }

    /// Computes the statistics only where `mask` is true (Flax's
    /// `BatchNorm(...)(x, mask=mask)`; set where the module is called).
    pub fn mask(mut self, mask: ArrayD<bool>) -> BatchNorm {
        self.mask = Some(mask);
        self
    }
}

impl Module for BatchNorm {
    type Input = Tensor;
    type Output = Tensor;

    fn tabulate_input(&self, x: &Tensor) -> String {
        super::Shapes::shapes(x)
    }

    fn tabulate_output(&self, y: &Tensor) -> String {
        super::Shapes::shapes(y)
    }

    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let feature = canonical_axis(s, self.axis, x.ndim(), "BatchNorm")?;
        let reduction: Vec<usize> = (0..x.ndim()).filter(|&a| a != feature).collect();
        let feature_shape = [x.shape()[feature]];
        let ra_mean = s.variable("batch_stats", "mean", || Ok(Tensor::zeros(&feature_shape)))?;
        let ra_var = s.variable("batch_stats", "var", || Ok(Tensor::ones(&feature_shape)))?;
        let axis_name = self.axis_name.as_deref().filter(|_| !s.is_initializing());
        if let (false, Some(name)) = (self.use_running_average, axis_name) {
            if self.mask.is_some() || !self.use_fast_variance {
                return Err(config_error(
                    s,
                    "BatchNorm with an axis name supports neither mask nor \
                     use_fast_variance=false yet"
                        .to_string(),
                ));
            }
            return self.call_batched(s, name, &x, feature, &reduction, ra_mean, ra_var);
        }
        if let Some(y) = super::batch_norm_jit::compiled_forward(self, s, &x, &ra_mean, &ra_var)? {
            return Ok(y);
        }
        let mask = mask_tensor(s, self.mask.as_ref(), &x)?;
        let (mean, var) = if self.use_running_average {
            (ra_mean.value(), ra_var.value())
        } else {
            // Without an axis name, or while initializing (as Flax, which
            // ignores the axis name then).
            let (mean, var) = compute_stats(&x, &reduction, self.use_fast_variance, mask.as_ref())?;
            if !s.is_initializing() {
                let m = Tensor::scalar(self.momentum as f32);
                let one_minus = Tensor::scalar((1.0 - self.momentum) as f32);
                ra_mean.set(m.mul(&ra_mean.value())?.add(&one_minus.mul(&mean)?)?)?;
                ra_var.set(m.mul(&ra_var.value())?.add(&one_minus.mul(&var)?)?)?;
            }
            (mean, var)
        };
        normalize(
            s,
            &x,
            &mean,
            &var,
            &reduction,
            &[feature],
            self.epsilon,
            self.use_scale,
            self.use_bias,
            &self.scale_init,
            &self.bias_init,
        )
    }
}

impl BatchNorm {
    /// Training with an axis name, inside `Vmap`: the statistics and the
    /// normalization run once over the items' inputs stacked along a new
    /// leading axis, as in JAX's batched computation, so that the sums over
    /// the items (and, under `grad`, of the cotangents of the shared
    /// statistics) round as JAX's do.
    #[allow(clippy::too_many_arguments)]
    fn call_batched(
        &self,
        s: &Scope<'_>,
        name: &str,
        x: &Tensor,
        feature: usize,
        reduction: &[usize],
        ra_mean: crate::core::Variable,
        ra_var: crate::core::Variable,
    ) -> Result<Tensor> {
        let features = x.shape()[feature];
        let mut operands = vec![x.clone()];
        if self.use_scale {
            operands.push(s.param("scale", &self.scale_init, &[features])?);
        }
        if self.use_bias {
            operands.push(s.param("bias", &self.bias_init, &[features])?);
        }
        let ndim = x.ndim();
        let red: Vec<isize> = reduction.iter().map(|&a| a as isize + 1).collect();
        let (eps, use_scale, use_bias) = (self.epsilon, self.use_scale, self.use_bias);
        let f: BatchedFn = Arc::new(move |ops: &[Tensor]| {
            let xs = &ops[0];
            let n = xs.shape()[0];
            // Flax's `_compute_stats`: |x|^2 first, then both means, then
            // one pmean of the two stacked (a sum over the items).
            let x2 = xs.square();
            let mu = xs.mean(&red, false)?;
            let mu2 = x2.mean(&red, false)?;
            let stacked = Tensor::stack(&[mu, mu2], 1)?;
            let both = if stacked.is_traced() {
                stacked.sum(&[0], false)?.div(&Tensor::scalar(n as f32))?
            } else {
                stacked.mean(&[0], false)?
            };
            let mean = both.index_axis(0, 0)?;
            let mu2 = both.index_axis(0, 1)?;
            let var = mu2.sub(&mean.square())?.maximum(&Tensor::scalar(0.0))?;
            // `_normalize` in the stacked frame: the statistics broadcast
            // over the items, the parameters are per item.
            let mut stats_shape = vec![1isize; ndim + 1];
            stats_shape[feature + 1] = features as isize;
            let mut param_shape = stats_shape.clone();
            param_shape[0] = n as isize;
            let y = xs.sub(&mean.reshape(&stats_shape)?)?;
            let mut mul = var
                .reshape(&stats_shape)?
                .add(&Tensor::scalar(eps))?
                .rsqrt();
            let mut k = 1;
            if use_scale {
                mul = mul.mul(&ops[k].reshape(&param_shape)?)?;
                k += 1;
            }
            let mut y = y.mul(&mul)?;
            if use_bias {
                y = y.add(&ops[k].reshape(&param_shape)?)?;
            }
            Ok((vec![y], vec![mean, var]))
        });
        let mut out = s.batched_collective(name, &operands, f)?.into_iter();
        let (y, mean, var) = (
            out.next().expect("y"),
            out.next().expect("mean"),
            out.next().expect("var"),
        );
        let m = Tensor::scalar(self.momentum as f32);
        let one_minus = Tensor::scalar((1.0 - self.momentum) as f32);
        ra_mean.set(m.mul(&ra_mean.value())?.add(&one_minus.mul(&mean)?)?)?;
        ra_var.set(m.mul(&ra_var.value())?.add(&one_minus.mul(&var)?)?)?;
        Ok(y)
    }
}

/// Layer normalization (Flax's `nn.LayerNorm`): normalizes each example
/// over its `reduction_axes` (default: the last), with a learned `scale`
/// and `bias` over the `feature_axes` (default: the last).
#[derive(Clone, Debug)]
pub struct LayerNorm {
    /// Added to the variance (default 1e-6).
    pub epsilon: f32,
    /// The axes the statistics are computed over (default `[-1]`).
    pub reduction_axes: Vec<isize>,
    /// The axes of the learned scale and bias (default `[-1]`).
    pub feature_axes: Vec<isize>,
    /// `var = mean(x²) - mean(x)²` (default true) rather than
    /// `mean((x - mean(x))²)`.
    pub use_fast_variance: bool,
    /// Where the statistics are computed (Flax's `mask=` argument of
    /// `__call__`): broadcastable to the input; `None` for everywhere.
    pub mask: Option<ArrayD<bool>>,
    /// Learn a scale (default true).
    pub use_scale: bool,
    /// Learn a bias (default true).
    pub use_bias: bool,
    /// Scale initializer (ones).
    pub scale_init: Initializer,
    /// Bias initializer (zeros).
    pub bias_init: Initializer,
}

impl Default for LayerNorm {
    fn default() -> Self {
        LayerNorm {
            epsilon: 1e-6,
            reduction_axes: vec![-1],
            feature_axes: vec![-1],
            use_fast_variance: true,
            mask: None,
            use_scale: true,
            use_bias: true,
            scale_init: init::ones(),
            bias_init: init::zeros(),
        }
    }
}

impl LayerNorm {
    /// Flax's defaults.
    pub fn new() -> LayerNorm {
        LayerNorm::default()
    }

    /// Sets the axes the statistics are computed over.
    pub fn reduction_axes(mut self, axes: &[isize]) -> LayerNorm {
        self.reduction_axes = axes.to_vec();
        self
    }

    /// Sets the axes of the learned scale and bias.
    pub fn feature_axes(mut self, axes: &[isize]) -> LayerNorm {
        self.feature_axes = axes.to_vec();
        self
    }

    /// Sets epsilon.
    pub fn epsilon(mut self, epsilon: f32) -> LayerNorm {
        self.epsilon = epsilon;
        self
    }

    /// Sets `use_fast_variance`.
    pub fn use_fast_variance(mut self, on: bool) -> LayerNorm {
        self.use_fast_variance = on;
        self
    }

    /// Computes the statistics only where `mask` is true (Flax's
    /// `LayerNorm()(x, mask=mask)`; set where the module is called).
    pub fn mask(mut self, mask: ArrayD<bool>) -> LayerNorm {
        self.mask = Some(mask);
        self
    }
}

impl Module for LayerNorm {
    type Input = Tensor;
    type Output = Tensor;

    fn tabulate_input(&self, x: &Tensor) -> String {
        super::Shapes::shapes(x)
    }

    fn tabulate_output(&self, y: &Tensor) -> String {
        super::Shapes::shapes(y)
    }

    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let canonical = |axes: &[isize], what: &str| -> Result<Vec<usize>> {
            let mut out: Vec<usize> = axes
                .iter()
                .map(|&a| canonical_axis(s, a, x.ndim(), what))
                .collect::<Result<_>>()?;
            out.sort_unstable();
            out.dedup();
            Ok(out)
        };
        let reduction = canonical(&self.reduction_axes, "LayerNorm reduction")?;
        let features = canonical(&self.feature_axes, "LayerNorm feature")?;
        let mask = mask_tensor(s, self.mask.as_ref(), &x)?;
        let (mean, var) = compute_stats(&x, &reduction, self.use_fast_variance, mask.as_ref())?;
        normalize(
            s,
            &x,
            &mean,
            &var,
            &reduction,
            &features,
            self.epsilon,
            self.use_scale,
            self.use_bias,
            &self.scale_init,
            &self.bias_init,
        )
    }
}
