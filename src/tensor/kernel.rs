//! Operations that carry their own forward and backward computations
//! (a convolution, a window sum): recorded once with their shapes and
//! routes decided, then run eagerly or replayed by a compiled step
//! ([`jit_value_and_grad`](super::jit_value_and_grad)) from its buffers,
//! the same code either way.

use std::sync::Arc;

use ndarray::{ArcArray, ArrayD, IxDyn};
use smallvec::SmallVec;

use super::tape::{
    DeferredProduct, InputProductFactors, OpKind, ProductCotangents, ProductFactors,
};
use super::Tensor;

/// An operation on row-major `f32` inputs of fixed shapes, with its
/// cotangent rules; everything shape-dependent is decided when it is
/// built, so that a replay only computes.
pub(crate) trait Kernel: Send + Sync {
    /// The operation's name, for messages.
    fn name(&self) -> &'static str;

    /// The output's shape.
    fn shape(&self) -> &[usize];

    /// How many floats of scratch [`forward_into`](Kernel::forward_into)
    /// and [`backward_into`](Kernel::backward_into) need at most: a
    /// compiled step sizes one buffer, shared by its kernels, when it is
    /// planned, so that a replay allocates nothing.
    fn scratch_len(&self) -> usize {
        0
    }

    /// The output, row-major, from the inputs' row-major values, into
    /// `out` (of the output's size, every element written; its values on
    /// entry are stale). `scratch` has at least
    /// [`scratch_len`](Kernel::scratch_len) elements, of any values.
    fn forward_into(&self, ins: &[&[f32]], out: &mut [f32], scratch: &mut [f32]);

    /// Input `input`'s cotangent, row-major in its input's shape, from the
    /// output's cotangent `g`, into `dst` (of the input's size, every
    /// element written); `scratch` as for
    /// [`forward_into`](Kernel::forward_into).
    fn backward_into(
        &self,
        input: usize,
        g: &[f32],
        ins: &[&[f32]],
        dst: &mut [f32],
        scratch: &mut [f32],
    );
}

/// `kernel`'s output as a new vector (an eager operation keeps it as its
/// value), by [`Kernel::forward_into`].
fn forward_owned(kernel: &dyn Kernel, ins: &[&[f32]]) -> Vec<f32> {
    let mut out = vec![0.0; kernel.shape().iter().product()];
    let mut scratch = vec![0.0; kernel.scratch_len()];
    kernel.forward_into(ins, &mut out, &mut scratch);
    out
}

/// Input `input`'s cotangent (of `len` elements) as a new vector, by
/// [`Kernel::backward_into`].
fn backward_owned(
    kernel: &dyn Kernel,
    input: usize,
    len: usize,
    g: &[f32],
    ins: &[&[f32]],
) -> Vec<f32> {
    let mut dst = vec![0.0; len];
    let mut scratch = vec![0.0; kernel.scratch_len()];
    kernel.backward_into(input, g, ins, &mut dst, &mut scratch);
    dst
}

/// `a`'s values row-major, shared rather than copied when they already
/// are.
pub(crate) fn row_major(a: &ArcArray<f32, IxDyn>) -> ArcArray<f32, IxDyn> {
    if a.is_standard_layout() {
        a.clone()
    } else {
        a.as_standard_layout().into_owned().into_shared()
    }
}

/// The values of an array [`row_major`] made.
pub(crate) fn row_major_slice(a: &ArcArray<f32, IxDyn>) -> &[f32] {
    a.as_slice().expect("row_major makes standard layout")
}

impl Tensor {
    /// `kernel` applied to `inputs` (whose shapes it was built for),
    /// recorded so that gradients run its backward and a compiled step
    /// replays it.
    #[track_caller]
    pub(crate) fn record_kernel(kernel: Arc<dyn Kernel>, inputs: &[&Tensor]) -> Tensor {
        let data: SmallVec<[ArcArray<f32, IxDyn>; 2]> =
            inputs.iter().map(|t| row_major(&t.data)).collect();
        let out = {
            let slices: SmallVec<[&[f32]; 2]> = data.iter().map(row_major_slice).collect();
            forward_owned(&*kernel, &slices)
        };
        let value = ArrayD::from_shape_vec(IxDyn(kernel.shape()), out).expect("the kernel's shape");
        let replayed = Arc::clone(&kernel);
        let backward = move |g: ArrayD<f32>, needs: &[bool]| {
            let g = g.as_standard_layout();
            let g = g.as_slice().expect("standard layout");
            let slices: SmallVec<[&[f32]; 2]> = data.iter().map(row_major_slice).collect();
            data.iter()
                .enumerate()
                .map(|(i, x)| {
                    needs[i].then(|| {
                        let dx = backward_owned(&*kernel, i, x.len(), g, &slices);
                        ArrayD::from_shape_vec(x.raw_dim(), dx).expect("the input's shape")
                    })
                })
                .collect()
        };
        let t = Tensor::record_kind(
            value.into_shared(),
            inputs,
            OpKind::Kernel(replayed.name()),
            backward,
        );
        if let Some(tr) = &t.tracer {
            if tr.tape.is_replayed() && tr.tape.is_open() {
                tr.tape.nodes()[tr.node].set_kernel(replayed);
            }
        }
        t
    }

    /// Notes that this operation's cotangent for input `input` is the
    /// elementwise product of `factors` (from the output's cotangent),
    /// which the backward pass fuses into the next cotangent reaching
    /// that input (see [`DeferredProduct`]). No-op when untraced.
    pub(crate) fn defer_product(self, input: usize, factors: ProductFactors) -> Tensor {
        if let Some(tr) = &self.tracer {
            if tr.tape.is_open() {
                tr.tape.nodes()[tr.node].set_deferred(DeferredProduct { input, factors });
            }
        }
        self
    }

    /// Notes that this operation's input cotangents are the elementwise
    /// products of `factors` (from the output's cotangent), which the
    /// backward pass carries through additions to their accumulation (see
    /// [`ProductCotangents`]). No-op when untraced.
    pub(crate) fn keep_products(self, factors: InputProductFactors) -> Tensor {
        if let Some(tr) = &self.tracer {
            if tr.tape.is_open() {
                tr.tape.nodes()[tr.node].set_products(ProductCotangents { factors });
            }
        }
        self
    }
}
