//! `optax.softmax_cross_entropy(logits, labels)` inside one jitted
//! computation, as XLA:CPU fuses its gradient: one operation of the
//! logits and the labels, so that the label products `labels * -g` are
//! summed into the log-softmax's pullback by fused multiply-adds, never
//! rounded, as XLA's reduction fusion sums them (jaxlib 0.10.2, optimized
//! HLO: `reduce(labels * broadcast(-g))` in the same fusion as the sum of
//! `exp(x - max)`, then `labels * -g + (-sum / sum(e)) * e`).
//!
//! Eagerly JAX rounds each product and so does flaxen (the composition in
//! `optim::losses`). The forward value is the composition's, computed
//! here by the same row kernels.

use std::sync::Arc;

pub(crate) use super::soft_cross_entropy_total::MergedRows;

use super::rows::{log_softmax_rows, shifted_exp, Softmax};
use crate::tensor::kernel::Kernel;
use crate::tensor::Tensor;
use crate::xla::reduce::TREE_WINDOW;
use crate::xla::ynn_reduce::YNN_MIN;

/// The fused cross-entropy over rows of `n` labels; its output has
/// `shape`, the rows.
pub(super) struct SoftCrossEntropy {
    pub(super) shape: Vec<usize>,
    pub(super) n: usize,
}

impl SoftCrossEntropy {
    /// `log_softmax` of each row of `x` into `lp`, as the jitted program
    /// computes it.
    pub(super) fn log_probs_into(&self, x: &[f32], lp: &mut [f32]) {
        log_softmax_rows(x, self.n, lp, Softmax::Jitted);
    }
}

impl Kernel for SoftCrossEntropy {
    fn name(&self) -> &'static str {
        "softmax_cross_entropy"
    }

    fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The log-probabilities (or one row's exponentials).
    fn scratch_len(&self) -> usize {
        (self.shape.iter().product::<usize>() * self.n).max(self.n)
    }

    fn forward_into(&self, ins: &[&[f32]], out: &mut [f32], scratch: &mut [f32]) {
        // `-sum(labels * lp)`: the products fused into the row sum.
        let lp = &mut scratch[..ins[0].len()];
        self.log_probs_into(ins[0], lp);
        fused_row_dots_into(ins[1], lp, self.n, out);
        out.iter_mut().for_each(|v| *v = -*v);
    }

    fn backward_into(
        &self,
        input: usize,
        g: &[f32],
        ins: &[&[f32]],
        dst: &mut [f32],
        scratch: &mut [f32],
    ) {
        let (x, labels, n) = (ins[0], ins[1], self.n);
        if input == 1 {
            // `lp * -g`, one rounding.
            let lp = &mut scratch[..x.len()];
            self.log_probs_into(x, lp);
            for ((d, row), &g) in dst.chunks_exact_mut(n).zip(lp.chunks_exact(n)).zip(g) {
                for (d, &l) in d.iter_mut().zip(row) {
                    *d = l * -g;
                }
            }
            return;
        }
        let e = &mut scratch[..n];
        for (((dx, row), o), &g) in dst
            .chunks_exact_mut(n)
            .zip(x.chunks_exact(n))
            .zip(labels.chunks_exact(n))
            .zip(g)
        {
            let s = shifted_exp(row, e);
            let ct = -g;
            let sum = o.iter().fold(0.0f32, |acc, &o| o.mul_add(ct, acc));
            let c = -sum / s;
            for ((d, &o), &e) in dx.iter_mut().zip(o).zip(&*e) {
                *d = c.mul_add(e, o * ct);
            }
        }
    }
}

/// `sum(a * b)` over each row of `n` (`n > 0`) as a jitted fusion sums a
/// row of up to 32 products: one fused multiply-add per product, in order
/// from `+0`.
pub(crate) fn fused_row_dots(a: &[f32], b: &[f32], n: usize) -> Vec<f32> {
    let mut out = vec![0.0; a.len() / n];
    fused_row_dots_into(a, b, n, &mut out);
    out
}

/// [`fused_row_dots`] into `out`, one element per row.
fn fused_row_dots_into(a: &[f32], b: &[f32], n: usize, out: &mut [f32]) {
    for ((o, x), y) in out.iter_mut().zip(a.chunks_exact(n)).zip(b.chunks_exact(n)) {
        *o = x
            .iter()
            .zip(y)
            .fold(0.0f32, |acc, (&p, &q)| p.mul_add(q, acc));
    }
}

impl Tensor {
    /// [`SoftCrossEntropy`] of these logits and `labels` (same shape,
    /// checked by the caller) where XLA's fusion is the one modelled: in a
    /// compiled region, rows of 1 to 32 labels, fewer than YNNPACK's
    /// elements, no forward-mode tangents; `None` elsewhere.
    pub(crate) fn fused_soft_cross_entropy(&self, labels: &Tensor) -> Option<Tensor> {
        let n = *self.shape().last()?;
        let tangents = [self, labels].iter().any(|t| {
            t.tracer
                .as_ref()
                .is_some_and(|tr| tr.tape.is_open() && tr.tape.records_tangents())
        });
        if !crate::tensor::in_compiled_region()
            || n == 0
            || n > TREE_WINDOW
            || self.data.len() >= YNN_MIN
            || tangents
        {
            return None;
        }
        let shape = self.shape()[..self.ndim() - 1].to_vec();
        let mut rows =
            Tensor::record_kernel(Arc::new(SoftCrossEntropy { shape, n }), &[self, labels]);
        rows.merged = MergedRows::new(self, labels).map(Arc::new);
        Some(rows)
    }
}

#[cfg(test)]
mod tests {
    use crate::optim::losses::softmax_cross_entropy;
    use crate::tensor::{as_jitted, grad, Tensor, Tree};

    /// The labels' cotangent `lp * -g` is the composition's: the fused
    /// kernel changes only how the logits' cotangent sums its products.
    #[test]
    fn labels_cotangent_is_the_compositions() {
        let v = |n: usize, s: f32| (0..n).map(|i| ((i as f32) * s).sin()).collect();
        let logits = Tensor::from_vec(v(12, 0.7), &[3, 4]).unwrap();
        let labels = Tensor::from_vec(v(12, 1.3), &[3, 4])
            .unwrap()
            .softmax(-1)
            .unwrap();
        let weights = Tensor::from_vec(vec![0.5, -1.5, 2.0], &[3]).unwrap();
        let params = Tree::new().with("x", logits).with("labels", labels);
        let loss = |p: &Tree| {
            let l = softmax_cross_entropy(p.tensor("x")?, p.tensor("labels")?)?;
            Ok(l.mul(&weights)?.sum_all())
        };
        let fused = as_jitted(|| grad(loss, &params)).unwrap();
        let composed = grad(loss, &params).unwrap();
        let bits = |t: &Tensor| t.to_vec().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(fused.tensor("labels").unwrap()),
            bits(composed.tensor("labels").unwrap())
        );
    }
}
