//! Window sums (`lax.reduce_window` with `add`), as `avg_pool` sums.

use std::sync::Arc;

use crate::tensor::error::{Result, TensorError};
use crate::tensor::forward::linear;
use crate::tensor::kernel::Kernel;
use crate::tensor::Tensor;
use crate::xla::reduce_window::{
    window_out_shape, window_sums_into, window_sums_scratch, window_sums_transpose_into,
};

/// A window sum's parameters, one entry per axis of its input.
#[derive(Clone, Debug)]
pub(crate) struct WindowSum {
    /// The window's extent on each axis (1 where it does not slide).
    pub(crate) window: Vec<usize>,
    /// The step between windows on each axis.
    pub(crate) strides: Vec<usize>,
    /// The zeros added before and after each axis.
    pub(crate) pads: Vec<(usize, usize)>,
    /// The rank of the array in JAX's program (XLA's choice of YNNPACK
    /// depends on it; flaxen may have merged batch axes into one).
    pub(crate) hlo_rank: usize,
}

impl Tensor {
    /// `lax.reduce_window(self, 0., lax.add, window, strides, pads)`: the
    /// sum of each window, padding read as zeros, in XLA:CPU's order
    /// ([`crate::xla::reduce_window`]), and its cotangent in the order of
    /// the `reduce-window` JAX transposes it into; jitted (inside
    /// [`as_jitted`](crate::tensor::as_jitted) when this runs), that of a
    /// jitted program (the mode when it is recorded, also in a compiled
    /// step's replays).
    pub(crate) fn window_sum(&self, spec: &WindowSum) -> Result<Tensor> {
        let shape = self.shape().to_vec();
        check(&shape, spec)?;
        let kernel = WindowSumKernel {
            out_shape: window_out_shape(&shape, &spec.window, &spec.strides, &spec.pads).to_vec(),
            in_shape: shape,
            spec: spec.clone(),
            jitted: crate::tensor::in_compiled_region(),
        };
        let tangent = spec.clone();
        Ok(Tensor::record_kernel(Arc::new(kernel), &[self])
            .with_tangent(|| linear(move |t| Ok(t.window_sum(&tangent)?))))
    }
}

/// Whether `spec` fits an input of `shape` (one positive window and
/// stride per axis).
pub(super) fn check(shape: &[usize], spec: &WindowSum) -> Result<()> {
    let r = shape.len();
    let fits = [spec.window.len(), spec.strides.len(), spec.pads.len()] == [r; 3]
        && !spec.window.contains(&0)
        && !spec.strides.contains(&0);
    if fits {
        Ok(())
    } else {
        Err(TensorError::Argument {
            op: "reduce_window",
            message: format!("{spec:?} does not fit an input of shape {shape:?}"),
        })
    }
}

/// A window sum of an input of shape `shape` (see [`Tensor::window_sum`]).
struct WindowSumKernel {
    spec: WindowSum,
    in_shape: Vec<usize>,
    out_shape: Vec<usize>,
    /// Whether the cotangent is a jitted program's.
    jitted: bool,
}

impl Kernel for WindowSumKernel {
    fn name(&self) -> &'static str {
        "reduce_window"
    }

    fn shape(&self) -> &[usize] {
        &self.out_shape
    }

    fn scratch_len(&self) -> usize {
        let s = &self.spec;
        window_sums_scratch(&self.in_shape, &s.window, &s.strides, &s.pads, s.hlo_rank)
    }

    fn forward_into(&self, ins: &[&[f32]], out: &mut [f32], scratch: &mut [f32]) {
        let s = &self.spec;
        window_sums_into(
            ins[0],
            &self.in_shape,
            &s.window,
            &s.strides,
            &s.pads,
            s.hlo_rank,
            out,
            scratch,
        )
    }

    fn backward_into(&self, _: usize, g: &[f32], _: &[&[f32]], dst: &mut [f32], _: &mut [f32]) {
        let s = &self.spec;
        window_sums_transpose_into(
            g,
            &self.in_shape,
            &s.window,
            &s.strides,
            &s.pads,
            self.jitted,
            dst,
        )
    }
}
