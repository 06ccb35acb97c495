//! `optax.clip_by_global_norm`.

use super::transform::{zip_leaves, GradientTransformation};
use crate::error::Result;
use crate::tensor::Tree;

/// `optax.clip_by_global_norm(max_norm)`: when the norm of all updates
/// together reaches `max_norm`, every update is scaled by `max_norm /
/// norm` (as optax computes it: `(t / norm) * max_norm`). Stateless.
#[derive(Clone, Debug, PartialEq)]
pub struct ClipByGlobalNorm {
    /// The largest norm let through unchanged.
    pub max_norm: f64,
}

/// `optax.clip_by_global_norm(max_norm)`.
pub fn clip_by_global_norm(max_norm: f64) -> ClipByGlobalNorm {
    ClipByGlobalNorm { max_norm }
}

/// `optax.tree.norm`: the square root of the sum, over leaves in order, of
/// each leaf's sum of squares. As XLA fuses it, each square is
/// contracted into the sum it feeds (a fused multiply-add): inside a
/// leaf's reduction (in order, as XLA sums up to 31 elements; larger
/// leaves' reduction order is not emulated), and for a one-element leaf
/// into the running sum over leaves.
pub fn global_norm(tree: &Tree) -> f32 {
    let total = tree.leaves().iter().fold(0.0f32, |acc, t| {
        let values: Vec<f32> = t.view().iter().copied().collect();
        if let [x] = values.as_slice() {
            x.mul_add(*x, acc)
        } else {
            acc + values.iter().fold(0.0f32, |s, &x| x.mul_add(x, s))
        }
    });
    total.sqrt()
}

impl GradientTransformation for ClipByGlobalNorm {
    fn init(&self, _params: &Tree) -> Result<Tree> {
        Ok(Tree::new())
    }

    fn update(&self, updates: &Tree, state: &Tree, _params: Option<&Tree>) -> Result<(Tree, Tree)> {
        let norm = global_norm(updates);
        let max = self.max_norm as f32;
        if norm < max {
            return Ok((updates.clone(), state.clone()));
        }
        let out = zip_leaves([updates], |[u], j| (u[j] / norm) * max)?;
        Ok((out, state.clone()))
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}
