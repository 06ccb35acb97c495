//! Sums over all axes of a product inside a compiled region, as XLA fuses
//! them: the product (`a * b`, `square`) keeps its two factors, and a sum
//! of all its elements adds each product into the running sum by a fused
//! multiply-add, never rounding it ([`crate::xla::reduce::product_sum`]).
//! Eagerly JAX rounds the product first, and so does flaxen.

use std::sync::Arc;

use ndarray::{ArcArray, IxDyn};

use crate::tensor::Tensor;

/// The two factors of a product computed in a compiled region (shared
/// storage: keeping them costs two reference counts).
pub(crate) struct Factors {
    a: ArcArray<f32, IxDyn>,
    b: ArcArray<f32, IxDyn>,
}

impl Tensor {
    /// This product of `a` and `b`, keeping its factors for a sum that
    /// XLA would fuse with it, when computed in a compiled region.
    pub(crate) fn with_factors(mut self, a: &Tensor, b: &Tensor) -> Tensor {
        if crate::tensor::in_compiled_region() {
            self.factors = Some(Arc::new(Factors {
                a: a.data.clone(),
                b: b.data.clone(),
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
}
