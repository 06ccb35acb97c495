//! The total (or mean) over all rows of `optax.softmax_cross_entropy`
//! inside one jitted computation, as XLA:CPU computes it: its simplifier
//! merges the per-row sums `-sum(labels * log_softmax(logits), -1)` and
//! the full reduction that follows into one reduction over all of
//! `[..., n]` of the fused products (jaxlib 0.10.2, optimized HLO:
//! `multiply(reduce(labels * ((x - max) - lse), dimensions={0,1}),
//! -1/rows)`), summed as [`crate::xla::reduce::product_sum`] sums a
//! product fused into its reduction (the lanes read from the LLVM IR of
//! `[20, 4]`: rows split among 4 lanes; `[12, 5]` in order). Flaxen sums
//! each row, then the rows, everywhere else (eagerly JAX does too).

use std::sync::Arc;

use super::soft_cross_entropy::SoftCrossEntropy;
use crate::tensor::kernel::Kernel;
use crate::tensor::Tensor;
use crate::xla::reduce::{product_sum, ProductLoop, TREE_WINDOW};
use crate::xla::ynn_reduce::YNN_MIN;

/// The loss rows' inputs, kept by the rows (see `Tensor::merged`) for a
/// full sum or mean of them in a compiled region.
pub(crate) struct MergedRows {
    logits: Tensor,
    labels: Tensor,
}

impl MergedRows {
    /// The rows' inputs, where XLA's merged reduction is the one modelled:
    /// every axis at most [`TREE_WINDOW`] long (a longer one is split into
    /// windows first) and fewer than [`YNN_MIN`] elements.
    pub(crate) fn new(logits: &Tensor, labels: &Tensor) -> Option<MergedRows> {
        let short = logits.shape().iter().all(|&d| d <= TREE_WINDOW);
        (short && logits.data.len() < YNN_MIN && !logits.data.is_empty()).then(|| MergedRows {
            logits: logits.clone(),
            labels: labels.clone(),
        })
    }
}

impl Tensor {
    /// The sum (`mean`: the mean) of all of these loss rows as the merged
    /// reduction computes it, recorded as one operation of the logits and
    /// labels; `None` when these are not such rows or not in a compiled
    /// region.
    pub(crate) fn merged_total(&self, mean: bool) -> Option<Tensor> {
        let merged = self.merged.as_deref()?;
        if !crate::tensor::in_compiled_region() {
            return None;
        }
        let shape = merged.logits.shape();
        let n = *shape.last()?;
        let rows = SoftCrossEntropy {
            shape: shape[..shape.len() - 1].to_vec(),
            n,
        };
        let total = SoftCrossEntropyTotal {
            rows,
            logits: shape.to_vec(),
            mean,
        };
        Some(Tensor::record_kernel(
            Arc::new(total),
            &[&merged.logits, &merged.labels],
        ))
    }
}

/// [`SoftCrossEntropy`]'s rows summed (or averaged) by the merged
/// reduction: a scalar.
struct SoftCrossEntropyTotal {
    rows: SoftCrossEntropy,
    /// The logits' shape.
    logits: Vec<usize>,
    mean: bool,
}

impl SoftCrossEntropyTotal {
    /// How many rows.
    fn count(&self) -> usize {
        self.rows.shape.iter().product()
    }
}

impl Kernel for SoftCrossEntropyTotal {
    fn name(&self) -> &'static str {
        "softmax_cross_entropy_total"
    }

    fn shape(&self) -> &[usize] {
        &[]
    }

    /// The log-probabilities (forward); the rows' cotangents and the
    /// rows' own scratch (backward).
    fn scratch_len(&self) -> usize {
        let logits: usize = self.logits.iter().product();
        logits.max(self.count() + self.rows.scratch_len())
    }

    fn forward_into(&self, ins: &[&[f32]], out: &mut [f32], scratch: &mut [f32]) {
        let lp = &mut scratch[..ins[0].len()];
        self.rows.log_probs_into(ins[0], lp);
        let labels = ins[1];
        // Two arrays of the product's shape feed the loop.
        let product_loop = ProductLoop {
            two_loads: true,
            fused_body: false,
        };
        let total = product_sum(&self.logits, product_loop, |i| (labels[i], lp[i]))
            .expect("shapes checked by MergedRows::new");
        // `-total * (1 / rows)`: XLA folds the negation into the constant,
        // the same product negated.
        out[0] = if self.mean {
            -total * (1.0 / self.count() as f32)
        } else {
            -total
        };
    }

    fn backward_into(
        &self,
        input: usize,
        g: &[f32],
        ins: &[&[f32]],
        dst: &mut [f32],
        scratch: &mut [f32],
    ) {
        // The rows' cotangent as the full reduction's rule gives it (each
        // the scalar times the reciprocal of the count, for a mean), then
        // the rows' own rule.
        let each = if self.mean {
            g[0] * (1.0 / self.count() as f32)
        } else {
            g[0]
        };
        let (rows_g, rest) = scratch.split_at_mut(self.count());
        rows_g.fill(each);
        self.rows.backward_into(input, rows_g, ins, dst, rest);
    }
}
