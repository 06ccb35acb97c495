//! `optax.trace` (momentum) and `optax.sgd`.

use super::schedule::LearningRate;
use super::transform::{chain, moments, zeros_like, zip_leaves, Chain, GradientTransformation};
use super::ScaleByLearningRate;
use crate::error::Result;
use crate::tensor::Tree;

/// `optax.trace(decay, nesterov)`: `t = g + decay * t`; the updates are `t`
/// (or `g + decay * t` with Nesterov). State: `trace`.
#[derive(Clone, Debug, PartialEq)]
pub struct Trace {
    /// The momentum.
    pub decay: f64,
    /// Nesterov's variant.
    pub nesterov: bool,
}

impl GradientTransformation for Trace {
    fn init(&self, params: &Tree) -> Result<Tree> {
        Ok(Tree::new().with("trace", zeros_like(params)))
    }

    fn update(&self, updates: &Tree, state: &Tree, _params: Option<&Tree>) -> Result<(Tree, Tree)> {
        let trace = moments(state, "trace", updates)?;
        let decay = self.decay as f32;
        // g + decay * t, the product fused into the addition (XLA).
        let trace = zip_leaves([updates, &trace], |[g, t], j| t[j].mul_add(decay, g[j]))?;
        let out = if self.nesterov {
            zip_leaves([updates, &trace], |[g, t], j| t[j].mul_add(decay, g[j]))?
        } else {
            trace.clone()
        };
        Ok((out, Tree::new().with("trace", trace)))
    }
}

/// `optax.sgd(learning_rate, momentum, nesterov)`: plain gradient descent,
/// with momentum when `momentum` is given.
///
/// ```
/// use flaxen::optim::{sgd, GradientTransformation};
/// use flaxen::tensor::{Tensor, Tree};
///
/// let params = Tree::new().with("w", Tensor::ones(&[2]));
/// let tx = sgd(0.1, Some(0.9), false);
/// let state = tx.init(&params)?;
/// let grads = Tree::new().with("w", Tensor::ones(&[2]));
/// let (params, _) = tx.apply_gradients(&grads, &state, &params)?;
/// assert_eq!(params.tensor("w")?.to_vec(), [0.9, 0.9]);
/// # Ok::<(), flaxen::Error>(())
/// ```
pub fn sgd(learning_rate: impl Into<LearningRate>, momentum: Option<f64>, nesterov: bool) -> Chain {
    let mut parts: Vec<Box<dyn GradientTransformation + Send + Sync>> = Vec::new();
    if let Some(decay) = momentum {
        parts.push(Box::new(Trace { decay, nesterov }));
    }
    parts.push(Box::new(ScaleByLearningRate {
        learning_rate: learning_rate.into(),
    }));
    chain(parts)
}
