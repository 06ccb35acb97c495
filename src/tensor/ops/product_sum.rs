//! Sums of a product inside a compiled region, as XLA fuses them: the
//! product (`a * b`, `square`) keeps its two factors, and a sum of its
//! elements (over all axes, [`crate::xla::reduce::product_sum`], or some,
//! [`crate::xla::reduce_products::product_sums`]) adds each product into
//! the running sum by a fused multiply-add, never rounding it. Eagerly JAX
//! rounds the product first, and so does flaxen.

use std::sync::Arc;

use ndarray::{ArcArray, ArrayD, IxDyn};

use crate::tensor::Tensor;
use crate::xla::reduce::ProductLoop;
use crate::xla::reduce_products::Pair;

/// The two factors of a product computed in a compiled region (shared
/// storage: keeping them costs two reference counts), and where XLA makes
/// them.
pub(crate) struct Factors {
    a: ArcArray<f32, IxDyn>,
    b: ArcArray<f32, IxDyn>,
    /// Both factors are the same array (`square`, `x * x`): LLVM knows
    /// the product is never `-0`, which changes a partial sum's first add.
    square: bool,
    /// Where XLA makes the product's factors (see [`XlaOrigin`]).
    origin: Option<XlaOrigin>,
}

/// Where XLA's compiled graph makes a tensor, when that changes the loop
/// of a sum fused with a product of it (set by `nn::RNN` on its outputs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum XlaOrigin {
    /// A scan's outputs, stacked along `axis`: `lax.scan` stacks them
    /// along a first axis, and the move of that axis to `axis` becomes a
    /// layout change (a bitcast), so a fused loop over them and any other
    /// factor (transposed alike) walks the elements with `axis` outermost.
    ScanOutputs {
        /// The axis of the steps.
        axis: usize,
    },
    /// As `ScanOutputs`, of a scan of one step: XLA drops the loop of one
    /// trip, and the step's elementwise operations join the loop of the
    /// sum, whose larger body LLVM vectorizes otherwise
    /// ([`ProductLoop::fused_body`]).
    OneStepScan {
        /// The axis of the (one) step.
        axis: usize,
    },
}

impl XlaOrigin {
    /// The axis of the steps.
    fn axis(self) -> usize {
        match self {
            XlaOrigin::ScanOutputs { axis } | XlaOrigin::OneStepScan { axis } => axis,
        }
    }
}

impl Factors {
    /// How the factors of a product of `shape` load: one array
    /// (`square`), two of the product's shape, or a broadcast one (and
    /// along which axes it changes).
    fn pair(&self, shape: &[usize]) -> Pair {
        let (a, b) = (self.a.shape(), self.b.shape());
        if self.square {
            Pair::Square
        } else if a == shape && b == shape {
            Pair::Full
        } else {
            let spread = if a == shape {
                Some(spread(b, shape.len()))
            } else if b == shape {
                Some(spread(a, shape.len()))
            } else {
                None
            };
            Pair::Broadcast { spread }
        }
    }

    /// Both factors' values over the product's `shape` (broadcast), its
    /// axes walked in `order`; `None` if one does not broadcast.
    fn values(&self, shape: &[usize], order: &[usize]) -> Option<(Vec<f32>, Vec<f32>)> {
        let walk = |f: &ArcArray<f32, IxDyn>| -> Option<Vec<f32>> {
            let full = f.broadcast(IxDyn(shape))?;
            Some(full.permuted_axes(IxDyn(order)).iter().copied().collect())
        };
        Some((walk(&self.a)?, walk(&self.b)?))
    }
}

impl Tensor {
    /// This tensor, marked as made by XLA in the way of `origin`.
    pub(crate) fn with_origin(mut self, origin: XlaOrigin) -> Tensor {
        self.origin = Some(origin);
        self
    }

    /// This product of `a` and `b`, keeping its factors for a sum that
    /// XLA would fuse with it, when computed in a compiled region.
    pub(crate) fn with_factors(mut self, a: &Tensor, b: &Tensor) -> Tensor {
        if crate::tensor::in_compiled_region() {
            let square = a.data.as_ptr() == b.data.as_ptr()
                && a.data.shape() == b.data.shape()
                && a.data.strides() == b.data.strides();
            self.factors = Some(Arc::new(Factors {
                a: a.data.clone(),
                b: b.data.clone(),
                square,
                origin: a.origin.or(b.origin),
            }));
        }
        self
    }

    /// The sum of all elements of this product as XLA computes it fused
    /// with its multiply in a compiled region; `None` when this is not a
    /// product made in a compiled region, the sum is not in one, or XLA
    /// would not fuse them (see [`crate::xla::reduce::product_sum`]).
    pub(crate) fn fused_total(&self) -> Option<f32> {
        let factors = self.factors.as_deref()?;
        if !crate::tensor::in_compiled_region() {
            return None;
        }
        let order = walk_order(self.ndim(), factors.origin);
        let walked: Vec<usize> = order.iter().map(|&d| self.shape()[d]).collect();
        let (a, b) = factors.values(self.shape(), &order)?;
        let product_loop = ProductLoop {
            // A square reads its one factor once.
            two_loads: factors.pair(self.shape()) == Pair::Full,
            fused_body: matches!(factors.origin, Some(XlaOrigin::OneStepScan { .. })),
        };
        crate::xla::reduce::product_sum(&walked, product_loop, |i| (a[i], b[i]))
    }

    /// The sum over the (sorted) `axes` of this product, dropping them, as
    /// XLA computes it fused with its multiply in a compiled region; `None`
    /// where [`fused_total`](Tensor::fused_total) would be, and where XLA
    /// would not fuse them or fuses them in an order not followed (see
    /// [`crate::xla::reduce_products::product_sums`]).
    pub(crate) fn fused_sums(&self, axes: &[usize]) -> Option<ArrayD<f32>> {
        let factors = self.factors.as_deref()?;
        if !crate::tensor::in_compiled_region() || self.ndim() > 32 {
            return None;
        }
        let row_major: Vec<usize> = (0..self.ndim()).collect();
        let (a, b) = factors.values(self.shape(), &row_major)?;
        let mask = axes.iter().fold(0u32, |m, &k| m | 1 << k);
        let kept: Vec<usize> = (0..self.ndim())
            .filter(|k| !axes.contains(k))
            .map(|k| self.shape()[k])
            .collect();
        let pair = factors.pair(self.shape());
        let mut out = vec![0.0f32; kept.iter().product()];
        let fused = crate::xla::reduce_products::product_sums(
            self.shape(),
            mask,
            pair,
            |i| (a[i], b[i]),
            &mut out,
        );
        fused.then(|| ArrayD::from_shape_vec(IxDyn(&kept), out).expect("kept size"))
    }
}

/// The order of the axes in which XLA's loop walks a product of `ndim`
/// axes: row-major, or with a scan's steps outermost.
fn walk_order(ndim: usize, origin: Option<XlaOrigin>) -> Vec<usize> {
    let mut order: Vec<usize> = (0..ndim).collect();
    if let Some(origin) = origin {
        let axis = origin.axis();
        order.remove(axis);
        order.insert(0, axis);
    }
    order
}

/// The bit set of the axes of an `ndim`-axis product along which a factor
/// of shape `factor` (broadcast, aligned to the last axis) changes; axes
/// from the 33rd on are left out (no sum of so many axes is fused here).
fn spread(factor: &[usize], ndim: usize) -> u32 {
    let offset = ndim - factor.len();
    factor
        .iter()
        .enumerate()
        .filter(|&(_, &n)| n > 1)
        .fold(0, |m, (a, _)| {
            m | 1u32.checked_shl((a + offset) as u32).unwrap_or(0)
        })
}
