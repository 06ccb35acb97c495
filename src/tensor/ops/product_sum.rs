//! Sums of a product inside a compiled region, as XLA fuses them: the
//! product (`a * b`, `square`) keeps its two factors, and a sum of its
//! elements (over all axes, [`crate::xla::reduce::product_sum`], or some,
//! [`crate::xla::reduce_products::product_sums`]) adds each product into
//! the running sum by a fused multiply-add, never rounding it. Eagerly JAX
//! rounds the product first, and so does flaxen.

use std::sync::Arc;

use ndarray::{ArcArray, ArrayD, IxDyn};

use crate::tensor::Tensor;
use crate::xla::reduce_products::Pair;

/// The two factors of a product computed in a compiled region (shared
/// storage: keeping them costs two reference counts).
pub(crate) struct Factors {
    a: ArcArray<f32, IxDyn>,
    b: ArcArray<f32, IxDyn>,
    /// Both factors are the same array (`square`, `x * x`): LLVM knows
    /// the product is never `-0`, which changes a partial sum's first add.
    square: bool,
}

impl Tensor {
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
        let shape = self.data.raw_dim();
        // Both factors row-major over the product's shape (broadcast).
        let row_major = |f: &ArcArray<f32, IxDyn>| -> Option<Vec<f32>> {
            Some(f.broadcast(shape.clone())?.iter().copied().collect())
        };
        let (a, b) = (row_major(&factors.a)?, row_major(&factors.b)?);
        crate::xla::reduce::product_sum(self.shape(), |i| (a[i], b[i]))
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
        let shape = self.data.raw_dim();
        let row_major = |f: &ArcArray<f32, IxDyn>| -> Option<Vec<f32>> {
            Some(f.broadcast(shape.clone())?.iter().copied().collect())
        };
        let (a, b) = (row_major(&factors.a)?, row_major(&factors.b)?);
        let mask = axes.iter().fold(0u32, |m, &k| m | 1 << k);
        let kept: Vec<usize> = (0..self.ndim())
            .filter(|k| !axes.contains(k))
            .map(|k| self.shape()[k])
            .collect();
        let pair = if factors.square {
            Pair::Square
        } else if factors.a.shape() == self.shape() && factors.b.shape() == self.shape() {
            Pair::Full
        } else {
            Pair::Broadcast
        };
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
