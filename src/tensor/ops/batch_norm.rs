//! The steps of BatchNorm's forward pass as a jitted module compiles them
//! ([`crate::xla::batch_norm`]), as tensor operations a forward program
//! records and replays.

use ndarray::{ArcArray, IxDyn};
use smallvec::SmallVec;

use crate::tensor::compiled::forward_jit_tape;
use crate::tensor::tape::OpKind;
use crate::tensor::Tensor;
use crate::xla::batch_norm::Step;

/// Whether `tensors` may go through the compiled steps: inside a jitted
/// module's forward program, each untraced, traced on a closed tape, or
/// traced on the program's own tape (never by a differentiation, whose
/// numbers are not these and which could not differentiate them).
pub(crate) fn compiled_batch_norm(tensors: &[&Tensor]) -> bool {
    let Some(tape) = forward_jit_tape() else {
        return false;
    };
    tensors.iter().all(|t| match &t.tracer {
        None => true,
        Some(tr) => !tr.tape.is_open() || Some(tr.tape.id) == tape,
    })
}

impl Tensor {
    /// One compiled BatchNorm step of `inputs` (at most three, row-major
    /// shapes as [`Step`] expects them), recorded as
    /// [`OpKind::BatchNorm`]. Call it only where [`compiled_batch_norm`]
    /// holds: the step has no gradient.
    #[track_caller]
    pub(crate) fn batch_norm_step(step: Step, inputs: &[&Tensor]) -> Tensor {
        let data: SmallVec<[Vec<f32>; 3]> = inputs
            .iter()
            .map(|t| t.data.iter().copied().collect())
            .collect();
        let first = inputs.first().map_or(&[][..], |t| t.shape());
        let shape = step.shape(first);
        let mut out = vec![0.0f32; shape.iter().product()];
        let input = |k: usize| data.get(k).map_or(&[][..], |v| &v[..]);
        step.forward(first, [input(0), input(1), input(2)], &mut out);
        let value = ArcArray::from_shape_vec(IxDyn(&shape), out).expect("the step's shape");
        // Recorded only on a forward program's tape, which is replayed and
        // never differentiated: no input gets a cotangent.
        Tensor::record_kind(value, inputs, OpKind::BatchNorm(step), |_, needs| {
            needs.iter().map(|_| None).collect()
        })
    }
}
