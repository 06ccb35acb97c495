//! `optax.scale_by_lion` and `optax.lion`.

use super::schedule::LearningRate;
use super::transform::{
    chain, count_leaf, moments, read_count, safe_increment, zeros_like, zip_leaves, Chain,
    GradientTransformation,
};
use super::{AddDecayedWeights, ScaleByLearningRate};
use crate::error::Result;
use crate::tensor::Tree;

/// `optax.scale_by_lion(b1, b2)`: updates `sign((1 - b1) * g + b1 * mu)`,
/// then `mu = (1 - b2) * g + b2 * mu`. State: `count`, `mu`.
#[derive(Clone, Debug, PartialEq)]
pub struct ScaleByLion {
    /// Interpolation of the update (0.9).
    pub b1: f64,
    /// Decay of the moment (0.99).
    pub b2: f64,
}

impl GradientTransformation for ScaleByLion {
    fn init(&self, params: &Tree) -> Result<Tree> {
        Ok(Tree::new()
            .with("count", count_leaf(0))
            .with("mu", zeros_like(params)))
    }

    fn update(&self, updates: &Tree, state: &Tree, _params: Option<&Tree>) -> Result<(Tree, Tree)> {
        let mu = moments(state, "mu", updates)?;
        let count = safe_increment(read_count(state, "count")?);
        let (b1, c1) = (self.b1 as f32, (1.0 - self.b1) as f32);
        let (b2, c2) = (self.b2 as f32, (1.0 - self.b2) as f32);
        let out = zip_leaves([updates, &mu], |[g, m], j| {
            let x = g[j].mul_add(c1, m[j] * b1);
            // jnp.sign: -1, 0 or 1 (NaN stays NaN).
            if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                x
            }
        })?;
        let mu = zip_leaves([updates, &mu], |[g, m], j| g[j].mul_add(c2, m[j] * b2))?;
        let state = Tree::new().with("count", count_leaf(count)).with("mu", mu);
        Ok((out, state))
    }
}

/// `optax.lion(learning_rate, b1, b2, weight_decay)`; optax's defaults are
/// 0.9, 0.99 and 1e-3.
pub fn lion(learning_rate: impl Into<LearningRate>, b1: f64, b2: f64, weight_decay: f64) -> Chain {
    chain(vec![
        Box::new(ScaleByLion { b1, b2 }),
        Box::new(AddDecayedWeights { weight_decay }),
        Box::new(ScaleByLearningRate {
            learning_rate: learning_rate.into(),
        }),
    ])
}
