//! Window maxima (`lax.reduce_window` with `max`), as `max_pool` takes
//! them, and their cotangent (`select_and_scatter_add`).

use std::sync::Arc;

use ndarray::{ArrayD, IxDyn};
use smallvec::smallvec;

use crate::tensor::error::Result;
use crate::tensor::forward::linear;
use crate::tensor::kernel::Kernel;
use crate::tensor::Tensor;
use crate::xla::reduce_window::window_out_shape;
use crate::xla::select_scatter::{
    gather_selected, scatter_selected, scatter_windows_into, select_windows, Selection,
};
use crate::xla::window_max::{window_maxima_into, window_maxima_scratch};

use super::reduce_window::{check, WindowSum};

impl Tensor {
    /// `lax.reduce_window(self, -inf, lax.max, window, strides, pads)`:
    /// the maximum of each window, padding read as `-inf`, as XLA:CPU
    /// takes it ([`crate::xla::window_max`]: NaN and signed zeros as its
    /// back end treats them). Its cotangent is JAX's
    /// `select_and_scatter_add`: each window's cotangent goes to one
    /// element, the first of tied maxima, and windows that overlap add
    /// theirs in row-major order ([`crate::xla::select_scatter`]; the
    /// same eagerly and jitted, and in a compiled step's replays).
    pub(crate) fn window_max(&self, spec: &WindowSum) -> Result<Tensor> {
        let shape = self.shape().to_vec();
        check(&shape, spec)?;
        let out_shape = window_out_shape(&shape, &spec.window, &spec.strides, &spec.pads);
        let kernel = WindowMax {
            spec: spec.clone(),
            in_shape: shape.clone(),
            out_shape: out_shape.to_vec(),
        };
        let y = Tensor::record_kernel(Arc::new(kernel), &[self]);
        // The tangent reads the input's values.
        let (tangent, x, t_shape) = (spec.clone(), self.data.clone(), shape);
        Ok(y.with_tangent(move || {
            let x = x.as_standard_layout();
            let sel: Arc<[Option<usize>]> = select_windows(
                x.as_slice().expect("standard layout"),
                &t_shape,
                &tangent.window,
                &tangent.strides,
                &tangent.pads,
                Selection::Gather,
            )
            .into();
            linear(move |t| Ok(t.take_selected(&sel, &out_shape)?))
        }))
    }

    /// The tangent of [`window_max`](Tensor::window_max)
    /// (`select_and_gather_add`): each window's selected element of
    /// `self` (0 where none is), as `out_shape`; linear, its cotangent
    /// scattered back.
    fn take_selected(
        &self,
        selected: &Arc<[Option<usize>]>,
        out_shape: &[usize],
    ) -> Result<Tensor> {
        let shape = self.shape().to_vec();
        let t = self.data.as_standard_layout();
        let vals = gather_selected(t.as_slice().expect("standard layout"), selected);
        let out = ArrayD::from_shape_vec(IxDyn(out_shape), vals).expect("output size");
        let (back, fwd, o_shape) = (selected.clone(), selected.clone(), out_shape.to_vec());
        Ok(Tensor::record(out.into_shared(), &[self], move |g, _| {
            let g = g.as_standard_layout();
            let n = shape.iter().product();
            let dx = scatter_selected(g.as_slice().expect("standard layout"), &back, n);
            smallvec![Some(
                ArrayD::from_shape_vec(IxDyn(&shape), dx).expect("input size")
            )]
        })
        .with_tangent(move || linear(move |t| Ok(t.take_selected(&fwd, &o_shape)?))))
    }
}

/// A window maximum of an input of shape `in_shape` (see
/// [`Tensor::window_max`]).
struct WindowMax {
    spec: WindowSum,
    in_shape: Vec<usize>,
    out_shape: Vec<usize>,
}

impl Kernel for WindowMax {
    fn name(&self) -> &'static str {
        "reduce_window_max"
    }

    fn shape(&self) -> &[usize] {
        &self.out_shape
    }

    fn scratch_len(&self) -> usize {
        let s = &self.spec;
        window_maxima_scratch(&self.in_shape, &s.window, &s.strides, &s.pads, s.hlo_rank)
    }

    fn forward_into(&self, ins: &[&[f32]], out: &mut [f32], scratch: &mut [f32]) {
        let s = &self.spec;
        window_maxima_into(
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

    fn backward_into(&self, _: usize, g: &[f32], ins: &[&[f32]], dst: &mut [f32], _: &mut [f32]) {
        let s = &self.spec;
        let windows = (&s.window[..], &s.strides[..], &s.pads[..]);
        scatter_windows_into(ins[0], &self.in_shape, windows, g, dst)
    }
}
