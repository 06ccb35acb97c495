//! The two pieces of `optax.softmax_cross_entropy_with_integer_labels`
//! that are not plain elementwise or reduction operations, recorded so
//! that a compiled step can replay them: the logit at each row's integer
//! label, and `jax.nn.logsumexp`'s stop-gradient maximum. Their kernels
//! over row-major buffers are shared by the eager operations and the
//! replay, so both give the same bits.

use ndarray::{ArrayD, ArrayViewD, Axis, IxDyn};
use smallvec::smallvec;

use super::rows::nan_max;
use crate::tensor::error::{Result, TensorError};
use crate::tensor::forward::linear;
use crate::tensor::tape::{OpKind, TangentRule};
use crate::tensor::Tensor;

/// Labels beyond this many classes are not exact in `f32`, the form in
/// which a compiled step keeps them: such a loss is not replayed.
pub(crate) const MAX_REPLAYED_CLASSES: usize = 1 << 24;

/// Per row of `x` (rows of `n`), the value at the row's label (labels are
/// in range; checked by the caller).
pub(crate) fn label_logits_rows(
    x: &[f32],
    n: usize,
    labels: impl Iterator<Item = usize>,
    out: &mut [f32],
) {
    for ((o, row), l) in out.iter_mut().zip(x.chunks_exact(n)).zip(labels) {
        *o = row[l];
    }
}

/// The cotangent of [`label_logits_rows`]: zeros with each row's cotangent
/// added at its label (`0 + g`, as the scatter-add of `take_along_axis`).
pub(crate) fn label_logits_backward(
    g: &[f32],
    n: usize,
    labels: impl Iterator<Item = usize>,
    dst: &mut [f32],
) {
    dst.fill(0.0);
    for ((row, &g), l) in dst.chunks_exact_mut(n).zip(g).zip(labels) {
        row[l] += g;
    }
}

/// Per row of `x` (rows of `n > 0`), the NaN-propagating maximum folded
/// from `-inf` in order (as `Tensor::max`), 0 where it is not finite.
pub(crate) fn max_rows_finite(x: &[f32], n: usize, out: &mut [f32]) {
    for (o, row) in out.iter_mut().zip(x.chunks_exact(n)) {
        let m = row.iter().fold(f32::NEG_INFINITY, |a, &v| nan_max(a, v));
        *o = if m.is_finite() { m } else { 0.0 };
    }
}

/// The error for a label outside `[0, classes)` of logits of `shape`
/// (eagerly and in a compiled step's replay).
pub(crate) fn label_out_of_range(label: i32, shape: &[usize]) -> TensorError {
    TensorError::Argument {
        op: "softmax_cross_entropy_with_integer_labels",
        message: format!(
            "label {label} is outside [0, {}) (logits of shape {shape:?})",
            shape.last().copied().unwrap_or(0)
        ),
    }
}

/// A tangent rule of an operation without gradient: always zero.
fn zero_tangent() -> TangentRule {
    Box::new(|_: &[Option<Tensor>]| Ok(None))
}

impl Tensor {
    /// `stop_gradient(max(self, -1, keepdims=True))` with 0 where the
    /// maximum is not finite (`jax.nn.logsumexp`'s shift), recorded (with
    /// no gradient) so that a compiled step recomputes it on every call.
    /// The tensor is at least 1-D (checked by the caller).
    pub(crate) fn max_last_stopped(&self) -> Result<Tensor> {
        let m = self.detached().max(&[-1], true)?;
        let value = m.data.mapv(|m| if m.is_finite() { m } else { 0.0 });
        Ok(Tensor::record_kind(
            value.into_shared(),
            &[self],
            OpKind::MaxLastStopped,
            |_, _| smallvec![None],
        )
        .with_tangent(zero_tangent))
    }

    /// Per row of `self` (`[..., classes]`), the value at the row's label
    /// (`labels` has `self`'s shape without the last axis, every label in
    /// `[0, classes)`; checked by the caller): `take_along_axis` of the
    /// labels with an axis inserted, then that axis squeezed, as one
    /// operation. `input`: the labels are integer array `input` of a
    /// compiled step's inputs.
    pub(crate) fn label_logits(
        &self,
        labels: ArrayViewD<'_, i32>,
        input: Option<usize>,
    ) -> Result<Tensor> {
        let n = *self.shape().last().expect("at least 1-D");
        let idx: Vec<usize> = labels.iter().map(|&l| l as usize).collect();
        let x = self.data.as_standard_layout();
        let x = x.as_slice().expect("standard layout");
        let mut out = vec![0.0; idx.len()];
        if n > 0 {
            label_logits_rows(x, n, idx.iter().copied(), &mut out);
        }
        let value = ArrayD::from_shape_vec(IxDyn(labels.shape()), out)
            .expect("one value per label")
            .into_shared();
        let in_shape = self.shape().to_vec();
        let indices = labels.to_owned().insert_axis(Axis(labels.ndim()));
        let tangent =
            move || linear(move |t: &Tensor| Ok(t.take_along_axis(&indices, -1)?.squeeze(-1)?));
        // The labels as a constant operand, for a compiled step's replay.
        let label_tensor = Tensor::from_array(labels.mapv(|l| l as f32));
        Ok(Tensor::record_kind(
            value,
            &[self, &label_tensor],
            OpKind::LabelLogits(input),
            move |g, _| {
                let g = g.as_standard_layout();
                let mut dx = vec![0.0; in_shape.iter().product()];
                if n > 0 {
                    let g = g.as_slice().expect("standard layout");
                    label_logits_backward(g, n, idx.iter().copied(), &mut dx);
                }
                let dx = ArrayD::from_shape_vec(IxDyn(&in_shape), dx).expect("the input's size");
                smallvec![Some(dx), None]
            },
        )
        .with_tangent(tangent))
    }
}
