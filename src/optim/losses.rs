//! Losses as optax's (`optax.losses`), computed in optax's operation
//! order.

use ndarray::ArrayD;

use crate::error::{Error, Result};
use crate::tensor::{Tensor, TensorError};

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
/// let loss = softmax_cross_entropy_with_integer_labels(&logits, &arr1(&[0, 1]).into_dyn())?;
/// // optax's docstring prints [0.2761 2.9518]
/// let v = loss.to_vec();
/// assert!((v[0] - 0.2761).abs() < 1e-4 && (v[1] - 2.9518).abs() < 1e-4);
/// # Ok::<(), flaxen::Error>(())
/// ```
///
/// Unlike optax, which silently returns a meaningless value, a label
/// outside `[0, classes)` is an error naming it; so are labels whose shape
/// is not the logits' without the last axis.
pub fn softmax_cross_entropy_with_integer_labels(
    logits: &Tensor,
    labels: &ArrayD<i32>,
) -> Result<Tensor> {
    let op = "softmax_cross_entropy_with_integer_labels";
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
    if let Some(bad) = labels.iter().find(|&&l| l < 0 || l as usize >= classes) {
        return Err(Error::from(TensorError::Argument {
            op,
            message: format!(
                "label {bad} is outside [0, {classes}) (logits of shape {:?})",
                logits.shape()
            ),
        }));
    }
    let label_logits = logits
        .take_along_axis(&labels.clone().insert_axis(ndarray::Axis(ndim - 1)), -1)?
        .squeeze(-1)?;
    Ok(logsumexp_last(logits)?.sub(&label_logits)?)
}

/// `jax.nn.logsumexp(x, axis=-1)`: `log(|sum(exp(x - m))|) + m` with
/// `m = stop_gradient(max(x))` (0 where the maximum is not finite).
fn logsumexp_last(x: &Tensor) -> Result<Tensor> {
    let amax = x.max(&[-1], true)?.stop_gradient();
    let amax = Tensor::from_array(
        amax.to_array()
            .mapv(|m| if m.is_finite() { m } else { 0.0 }),
    );
    let sum = x.sub(&amax)?.exp().sum(&[-1], false)?;
    Ok(sum.abs().log().add(&amax.squeeze(-1)?)?)
}
