//! Window maxima (`lax.reduce_window` with `max`), as `max_pool` takes
//! them, and their cotangent (`select_and_scatter_add`).

use std::sync::Arc;

use ndarray::{ArrayD, IxDyn};
use smallvec::smallvec;

use crate::tensor::error::{Result, TensorError};
use crate::tensor::forward::linear;
use crate::tensor::Tensor;
use crate::xla::reduce_window::window_out_shape;
use crate::xla::select_scatter::{gather_selected, scatter_selected, select_windows, Selection};
use crate::xla::window_max::window_maxima;

use super::reduce_window::WindowSum;

impl Tensor {
    /// `lax.reduce_window(self, -inf, lax.max, window, strides, pads)`:
    /// the maximum of each window, padding read as `-inf`, as XLA:CPU
    /// takes it ([`crate::xla::window_max`]: NaN and signed zeros as its
    /// back end treats them). Its cotangent is JAX's
    /// `select_and_scatter_add`: each window's cotangent goes to one
    /// element, the first of tied maxima, and windows that overlap add
    /// theirs in row-major order ([`crate::xla::select_scatter`]; the
    /// same eagerly and jitted). Recorded as an operation compiled steps
    /// do not replay (they then run eagerly).
    pub(crate) fn window_max(&self, spec: &WindowSum) -> Result<Tensor> {
        let shape = self.shape().to_vec();
        check(&shape, spec)?;
        let x = self.data.as_standard_layout().into_owned().into_shared();
        let maxima = window_maxima(
            x.as_slice().expect("standard layout"),
            &shape,
            &spec.window,
            &spec.strides,
            &spec.pads,
            spec.hlo_rank,
        );
        let out_shape = window_out_shape(&shape, &spec.window, &spec.strides, &spec.pads);
        let out = ArrayD::from_shape_vec(IxDyn(&out_shape), maxima).expect("output size");
        let back = spec.clone();
        let (tangent, tx, t_shape) = (spec.clone(), x.clone(), shape.clone());
        Ok(Tensor::record(out.into_shared(), &[self], move |g, _| {
            let sel = select_windows(
                x.as_slice().expect("standard layout"),
                &shape,
                &back.window,
                &back.strides,
                &back.pads,
                Selection::Scatter,
            );
            let g = g.as_standard_layout();
            let dx = scatter_selected(g.as_slice().expect("standard layout"), &sel, x.len());
            smallvec![Some(
                ArrayD::from_shape_vec(IxDyn(&shape), dx).expect("input size")
            )]
        })
        .with_tangent(move || {
            let sel: Arc<[Option<usize>]> = select_windows(
                tx.as_slice().expect("standard layout"),
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

/// Whether `spec` fits an input of `shape` (one positive window and
/// stride per axis).
fn check(shape: &[usize], spec: &WindowSum) -> Result<()> {
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
