//! `optax.scale_by_rms`/`rmsprop` and `optax.scale_by_rss`/`adagrad`.

use super::schedule::LearningRate;
use super::transform::{chain, moments, zip_leaves, Chain, GradientTransformation};
use super::ScaleByLearningRate;
use crate::error::Result;
use crate::tensor::{tree_map, Tensor, Tree};
use crate::xla::math as xla_math;

/// A tree shaped like `params`, every value `value`.
fn filled_like(params: &Tree, value: f64) -> Tree {
    tree_map(params, |p| Tensor::full(p.shape(), value as f32))
}

/// `optax.scale_by_rms(decay, eps, initial_scale)` (with optax's defaults
/// `eps_in_sqrt=True`, no bias correction): `nu = (1 - decay) * g² + decay
/// * nu`, updates `g * rsqrt(nu + eps)`. State: `nu`.
#[derive(Clone, Debug, PartialEq)]
pub struct ScaleByRms {
    /// Decay of the squared gradients (0.9).
    pub decay: f64,
    /// Added under the root (1e-8).
    pub eps: f64,
    /// The initial `nu` (0).
    pub initial_scale: f64,
}

impl GradientTransformation for ScaleByRms {
    fn init(&self, params: &Tree) -> Result<Tree> {
        Ok(Tree::new().with("nu", filled_like(params, self.initial_scale)))
    }

    fn update(&self, updates: &Tree, state: &Tree, _params: Option<&Tree>) -> Result<(Tree, Tree)> {
        let nu = moments(state, "nu", updates)?;
        let (d, c) = (self.decay as f32, (1.0 - self.decay) as f32);
        let nu = zip_leaves([updates, &nu], |[g, v], j| {
            (g[j] * g[j]).mul_add(c, v[j] * d)
        })?;
        let eps = self.eps as f32;
        let out = zip_leaves([updates, &nu], |[g, v], j| {
            xla_math::rsqrt(v[j] + eps) * g[j]
        })?;
        Ok((out, Tree::new().with("nu", nu)))
    }
}

/// `optax.rmsprop(learning_rate, decay, eps)` (not centered, no momentum).
pub fn rmsprop(learning_rate: impl Into<LearningRate>, decay: f64, eps: f64) -> Chain {
    chain(vec![
        Box::new(ScaleByRms {
            decay,
            eps,
            initial_scale: 0.0,
        }),
        Box::new(ScaleByLearningRate {
            learning_rate: learning_rate.into(),
        }),
    ])
}

/// `optax.scale_by_rss(initial_accumulator_value, eps)`: `s = g² + s`,
/// updates `g * rsqrt(s + eps)` where `s > 0` (0 elsewhere). State:
/// `sum_of_squares`.
#[derive(Clone, Debug, PartialEq)]
pub struct ScaleByRss {
    /// The initial sum (0.1).
    pub initial_accumulator_value: f64,
    /// Added under the root (1e-7).
    pub eps: f64,
}

impl GradientTransformation for ScaleByRss {
    fn init(&self, params: &Tree) -> Result<Tree> {
        Ok(Tree::new().with(
            "sum_of_squares",
            filled_like(params, self.initial_accumulator_value),
        ))
    }

    fn update(&self, updates: &Tree, state: &Tree, _params: Option<&Tree>) -> Result<(Tree, Tree)> {
        let sos = moments(state, "sum_of_squares", updates)?;
        // g * g + s, fused (XLA).
        let sos = zip_leaves([updates, &sos], |[g, s], j| g[j].mul_add(g[j], s[j]))?;
        let eps = self.eps as f32;
        let out = zip_leaves([updates, &sos], |[g, s], j| {
            let inv = if s[j] > 0.0 {
                xla_math::rsqrt(s[j] + eps)
            } else {
                0.0
            };
            inv * g[j]
        })?;
        Ok((out, Tree::new().with("sum_of_squares", sos)))
    }
}

/// `optax.adagrad(learning_rate, initial_accumulator_value, eps)`; optax's
/// defaults are 0.1 and 1e-7.
pub fn adagrad(
    learning_rate: impl Into<LearningRate>,
    initial_accumulator_value: f64,
    eps: f64,
) -> Chain {
    chain(vec![
        Box::new(ScaleByRss {
            initial_accumulator_value,
            eps,
        }),
        Box::new(ScaleByLearningRate {
            learning_rate: learning_rate.into(),
        }),
    ])
}
