//! Window sums (`lax.reduce_window` with `add`), as `avg_pool` sums.

use ndarray::{ArrayD, IxDyn};
use smallvec::smallvec;

use crate::tensor::error::{Result, TensorError};
use crate::tensor::forward::linear;
use crate::tensor::Tensor;
use crate::xla::reduce_window::{window_out_shape, window_sums, window_sums_transpose};

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
    /// jitted program. Recorded as an operation compiled steps do not
    /// replay (they then run eagerly).
    pub(crate) fn window_sum(&self, spec: &WindowSum) -> Result<Tensor> {
        let shape = self.shape().to_vec();
        let r = shape.len();
        let fits = [spec.window.len(), spec.strides.len(), spec.pads.len()] == [r; 3]
            && !spec.window.contains(&0)
            && !spec.strides.contains(&0);
        if !fits {
            return Err(TensorError::Argument {
                op: "reduce_window",
                message: format!("{spec:?} does not fit an input of shape {shape:?}"),
            });
        }
        let out_shape = window_out_shape(&shape, &spec.window, &spec.strides, &spec.pads);
        let x = self.data.as_standard_layout();
        let sums = window_sums(
            x.as_slice().expect("standard layout"),
            &shape,
            &spec.window,
            &spec.strides,
            &spec.pads,
            spec.hlo_rank,
        );
        let out = ArrayD::from_shape_vec(IxDyn(&out_shape), sums).expect("output size");
        let jitted = crate::tensor::in_compiled_region();
        let back = spec.clone();
        let tangent = spec.clone();
        Ok(Tensor::record(out.into_shared(), &[self], move |g, _| {
            let g = g.as_standard_layout();
            let dx = window_sums_transpose(
                g.as_slice().expect("standard layout"),
                &shape,
                &back.window,
                &back.strides,
                &back.pads,
                jitted,
            );
            smallvec![Some(
                ArrayD::from_shape_vec(IxDyn(&shape), dx).expect("input size")
            )]
        })
        .with_tangent(|| linear(move |t| Ok(t.window_sum(&tangent)?))))
    }
}
