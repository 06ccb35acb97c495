//! Losses as optax's (`optax.losses`), computed in optax's operation
//! order.

use ndarray::{ArrayBase, ArrayViewD, Data, Dimension};

use crate::error::{Error, Result};
use crate::tensor::{Array, Tensor, TensorError};
use crate::xla::ynn_reduce::YNN_MIN;

/// Integer class labels: any `ndarray` array of `i32` (an `ArrayD<i32>`, a
/// tree's shared `ArcArray<i32, IxDyn>`, a view), or an [`Array`] of dtype
/// `int32`.
///
/// Inside a compiled step ([`jit_value_and_grad_with`]), labels that are
/// an `int32` array of the step's inputs tree, passed by reference (as
/// `batch.array("y")?`), are an argument of the compiled program: every
/// call uses its own labels, as `jax.jit` traces integer arguments. A copy
/// of them would be baked in instead (and the replay would then run only
/// for calls passing the same labels).
///
/// [`jit_value_and_grad_with`]: crate::tensor::jit_value_and_grad_with
pub trait IntegerLabels {
    /// The labels, or a typed error when they are not `int32`.
    fn int32_view(&self) -> Result<ArrayViewD<'_, i32>>;
}

impl<S: Data<Elem = i32>, D: Dimension> IntegerLabels for ArrayBase<S, D> {
    fn int32_view(&self) -> Result<ArrayViewD<'_, i32>> {
        Ok(self.view().into_dyn())
    }
}

impl IntegerLabels for Array {
    fn int32_view(&self) -> Result<ArrayViewD<'_, i32>> {
        match self.as_i32() {
            Some(a) => Ok(a.view()),
            None => Err(Error::from(TensorError::Argument {
                op: "softmax_cross_entropy_with_integer_labels",
                message: format!("labels of dtype {}, not int32", self.dtype()),
            })),
        }
    }
}

/// `optax.softmax_cross_entropy_with_integer_labels(logits, labels)`: per
/// example, `logsumexp(logits) - logits[label]` over the last axis, as
/// optax computes it (`jax.nn.logsumexp` with its stop-gradient maximum,
/// then the label's logit taken along the axis).
///
/// ```
/// use flaxen::optim::losses::softmax_cross_entropy_with_integer_labels;
/// use flaxen::tensor::Tensor;
/// use ndarray::arr1;
///
/// let logits = Tensor::from_vec(vec![1.2, -0.8, -0.5, 0.9, -1.2, 1.1], &[2, 3]).unwrap();
/// let loss = softmax_cross_entropy_with_integer_labels(&logits, &arr1(&[0, 1]))?;
/// // optax's docstring prints [0.2761 2.9518]
/// let v = loss.to_vec();
/// assert!((v[0] - 0.2761).abs() < 1e-4 && (v[1] - 2.9518).abs() < 1e-4);
/// # Ok::<(), flaxen::Error>(())
/// ```
///
/// Unlike optax, which silently returns a meaningless value, a label
/// outside `[0, classes)` is an error naming it; so are labels whose shape
/// is not the logits' without the last axis, and labels that are not
/// `int32`. A compiled step checks each call's labels the same way.
pub fn softmax_cross_entropy_with_integer_labels<L: IntegerLabels + ?Sized>(
    logits: &Tensor,
    labels: &L,
) -> Result<Tensor> {
    let op = "softmax_cross_entropy_with_integer_labels";
    let labels = labels.int32_view()?;
    let ndim = logits.ndim();
    if ndim == 0 || labels.shape() != &logits.shape()[..ndim - 1] {
        return Err(TensorError::Incompatible {
            op,
            lhs: logits.shape().to_vec(),
            rhs: labels.shape().to_vec(),
        }
        .into());
    }
    let classes = logits.shape()[ndim - 1];
    if let Some(&bad) = labels.iter().find(|&&l| l < 0 || l as usize >= classes) {
        return Err(Error::from(crate::tensor::label_out_of_range(
            bad,
            logits.shape(),
        )));
    }
    // The labels' logits (`take_along_axis` then `squeeze`, as one
    // operation that a compiled step replays with each call's labels).
    let input = crate::tensor::int_inputs::argument(&labels);
    let label_logits = logits.label_logits(labels, input)?;
    Ok(logsumexp_last(logits)?.sub(&label_logits)?)
}

/// `jax.nn.logsumexp(x, axis=-1)`: `log(|sum(exp(x - m))|) + m` with
/// `m = stop_gradient(max(x))` (0 where the maximum is not finite).
/// Jitted, over 4,096 rows or more, XLA hands the log to YNNPACK with the
/// sums, and YNNPACK's `log` runs.
fn logsumexp_last(x: &Tensor) -> Result<Tensor> {
    let amax = x.max_last_stopped()?;
    let sum = x.sub(&amax)?.exp().sum(&[-1], false)?;
    let abs = sum.abs();
    let log = if crate::tensor::in_compiled_region() && sum.data.len() >= YNN_MIN {
        abs.ynn_log()
    } else {
        abs.log()
    };
    Ok(log.add(&amax.squeeze(-1)?)?)
}

/// A typed error unless `a` and `b` have one shape.
fn same_shape(op: &'static str, a: &Tensor, b: &Tensor) -> Result<()> {
    if a.shape() != b.shape() {
        return Err(TensorError::Incompatible {
            op,
            lhs: a.shape().to_vec(),
            rhs: b.shape().to_vec(),
        }
        .into());
    }
    Ok(())
}

/// The errors `predictions - targets` (or the predictions themselves).
fn errors(predictions: &Tensor, targets: Option<&Tensor>) -> Result<Tensor> {
    match targets {
        Some(t) => Ok(predictions.sub(t)?),
        None => Ok(predictions.clone()),
    }
}

/// `optax.squared_error(predictions, targets)`: `(predictions -
/// targets)²` elementwise (`targets` `None`: the predictions squared).
pub fn squared_error(predictions: &Tensor, targets: Option<&Tensor>) -> Result<Tensor> {
    let e = errors(predictions, targets)?;
    Ok(e.mul(&e)?)
}

/// `optax.l2_loss(predictions, targets)`: half the squared error.
pub fn l2_loss(predictions: &Tensor, targets: Option<&Tensor>) -> Result<Tensor> {
    Ok(squared_error(predictions, targets)?.mul(&Tensor::scalar(0.5))?)
}

/// `optax.huber_loss(predictions, targets, delta)`: `0.5 * e²` where
/// `|e| <= delta`, `delta * (|e| - 0.5 * delta)` beyond, computed as optax
/// does (`0.5 * min(|e|, delta)² + delta * (|e| - min(|e|, delta))`).
pub fn huber_loss(predictions: &Tensor, targets: Option<&Tensor>, delta: f32) -> Result<Tensor> {
    let abs = errors(predictions, targets)?.abs();
    let quadratic = abs.minimum(&Tensor::scalar(delta))?;
    let linear = abs.sub(&quadratic)?;
    let q2 = quadratic.mul(&quadratic)?;
    Ok(q2
        .mul(&Tensor::scalar(0.5))?
        .add(&linear.mul(&Tensor::scalar(delta))?)?)
}

/// `optax.softmax_cross_entropy(logits, labels)`: `-sum(labels *
/// log_softmax(logits))` over the last axis, for labels that are
/// probabilities (one-hot or soft).
pub fn softmax_cross_entropy(logits: &Tensor, labels: &Tensor) -> Result<Tensor> {
    same_shape("softmax_cross_entropy", logits, labels)?;
    if let Some(loss) = logits.fused_soft_cross_entropy(labels) {
        return Ok(loss);
    }
    let log_probs = logits.log_softmax(-1)?;
    Ok(row_dot(labels, &log_probs)?.neg())
}

/// `(a * b).sum(-1)`: inside a jitted computation XLA fuses the products
/// into the reduction, one fused multiply-add per element (rows of up to 32
/// elements, summed in order); eagerly the products are rounded first.
fn row_dot(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let n = a.shape().last().copied().unwrap_or(0);
    if !crate::tensor::in_compiled_region() || n > 32 {
        return Ok(a.mul(b)?.sum(&[-1], false)?);
    }
    let (av, bv): (Vec<f32>, Vec<f32>) = (
        a.data.iter().copied().collect(),
        b.data.iter().copied().collect(),
    );
    let out = crate::tensor::fused_row_dots(&av, &bv, n.max(1));
    let shape = &a.shape()[..a.ndim() - 1];
    let value = ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(shape), out)
        .expect("one value per row")
        .into_shared();
    let (a_data, b_data) = (a.data.to_owned(), b.data.to_owned());
    // JAX's backward: the row cotangent broadcast, times the other factor.
    Ok(Tensor::record(value, &[a, b], move |g, _| {
        let axis = ndarray::Axis(g.ndim());
        let g = g.insert_axis(axis);
        smallvec::smallvec![Some(&g * &b_data), Some(&g * &a_data)]
    })
    .with_tangent(|| {
        crate::tensor::forward::bilinear(a.detached(), b.detached(), |a, b| {
            Ok(a.mul(b)?.sum(&[-1], false)?)
        })
    }))
}

/// `optax.kl_divergence(log_predictions, targets)`: `sum(targets *
/// (log(targets) - log_predictions))` over the last axis, with `0 * log 0`
/// taken as 0.
pub fn kl_divergence(log_predictions: &Tensor, targets: &Tensor) -> Result<Tensor> {
    same_shape("kl_divergence", log_predictions, targets)?;
    let is_zero = Tensor::from_array(targets.data.mapv(|t| f32::from(t == 0.0)));
    let log_t = Tensor::select(&is_zero, &Tensor::zeros(&[]), &targets.log())?;
    row_dot(targets, &log_t.sub(log_predictions)?)
}

/// `optax.sigmoid_binary_cross_entropy(logits, labels)`: elementwise
/// `-labels * log_sigmoid(logits) - (1 - labels) * log_sigmoid(-logits)`.
pub fn sigmoid_binary_cross_entropy(logits: &Tensor, labels: &Tensor) -> Result<Tensor> {
    same_shape("sigmoid_binary_cross_entropy", logits, labels)?;
    let log_p = logits.log_sigmoid();
    let log_not_p = logits.neg().log_sigmoid();
    let not_labels = Tensor::scalar(1.0).sub(labels)?;
    Ok(labels
        .neg()
        .mul(&log_p)?
        .sub(&not_labels.mul(&log_not_p)?)?)
}

/// `optax.log_cosh(predictions, targets)`: `log(cosh(e))` as
/// `logaddexp(e, -e) - log(2)`. Inside a compiled region
/// ([`as_jitted`](crate::tensor::as_jitted)) the two terms of the
/// derivative are summed in one fused multiply-add, as under `jax.jit`.
pub fn log_cosh(predictions: &Tensor, targets: Option<&Tensor>) -> Result<Tensor> {
    let e = errors(predictions, targets)?;
    let both = if crate::tensor::in_compiled_region() {
        e.logaddexp_negated_fused()?
    } else {
        e.logaddexp(&e.neg())?
    };
    Ok(both.sub(&Tensor::scalar(std::f32::consts::LN_2))?)
}
