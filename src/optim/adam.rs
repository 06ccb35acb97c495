//! Adam and AdamW (`optax.scale_by_adam`, `optax.adam`, `optax.adamw`),
//! with `add_decayed_weights` and `scale_by_learning_rate`.
//!
//! The arithmetic is that of the update inside a jitted step, as XLA:CPU
//! compiles it (checked against optax 0.2.8 under `jax.jit`): the moments
//! are `fma(g, 1 - b, b * m)`-style fused multiply-adds, the bias
//! corrections are arranged as XLA's algebraic simplifier arranges them
//! (see [`ScaleByAdam`]'s update), `b^t` is `powf`, and the weight decay is
//! fused into the update.

use super::schedule::LearningRate;
use super::transform::{
    chain, count_leaf, moments, read_count, safe_increment, state_error, zeros_like, zip_leaves,
    Chain, GradientTransformation,
};
use crate::error::Result;
use crate::tensor::Tree;

/// `optax.scale_by_adam(b1, b2, eps, eps_root)`: the updates become
/// `m̂ / (sqrt(v̂ + eps_root) + eps)`. State: `count` (int32), `mu`, `nu`.
#[derive(Clone, Debug, PartialEq)]
pub struct ScaleByAdam {
    /// Decay of the first moment (0.9).
    pub b1: f64,
    /// Decay of the second moment (0.999).
    pub b2: f64,
    /// Added to the denominator's square root (1e-8).
    pub eps: f64,
    /// Added under the square root (0).
    pub eps_root: f64,
}

impl Default for ScaleByAdam {
    fn default() -> ScaleByAdam {
        ScaleByAdam {
            b1: 0.9,
            b2: 0.999,
            eps: 1e-8,
            eps_root: 0.0,
        }
    }
}

impl GradientTransformation for ScaleByAdam {
    fn init(&self, params: &Tree) -> Result<Tree> {
        Ok(Tree::new()
            .with("count", count_leaf(0))
            .with("mu", zeros_like(params))
            .with("nu", zeros_like(params)))
    }

    fn update(&self, updates: &Tree, state: &Tree, _params: Option<&Tree>) -> Result<(Tree, Tree)> {
        self.step(updates, state, false)
    }

    fn update_after_clip(
        &self,
        updates: &Tree,
        state: &Tree,
        _params: Option<&Tree>,
    ) -> Result<(Tree, Tree)> {
        self.step(updates, state, true)
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}

impl ScaleByAdam {
    /// One update; `after_clip` when the updates come from
    /// `clip_by_global_norm` in the same chain (a `select` in the jitted
    /// step).
    fn step(&self, updates: &Tree, state: &Tree, after_clip: bool) -> Result<(Tree, Tree)> {
        let mu = moments(state, "mu", updates)?;
        let nu = moments(state, "nu", updates)?;
        let count = safe_increment(read_count(state, "count")?);
        let (b1, b2) = (self.b1 as f32, self.b2 as f32);
        let (c1, c2) = ((1.0 - self.b1) as f32, (1.0 - self.b2) as f32);
        // optax: mu = (1 - b1) * g + b1 * mu; nu = (1 - b2) * g² + b2 * nu,
        // one product contracted into each sum. Which one is LLVM's choice
        // (read off the kernels of optax 0.2.8 under jit, checked on the
        // values): the gradient's alone; after a clip's `select`, the
        // decayed moment's in `nu`, and in `mu` too for a one-element leaf
        // (there the select stays a masked move; a loop over a larger leaf
        // is split into a clipped and an unclipped copy).
        let mu = zip_leaves([updates, &mu], |[g, m], j| {
            if after_clip && g.len() == 1 {
                m[j].mul_add(b1, g[j] * c1)
            } else {
                g[j].mul_add(c1, m[j] * b1)
            }
        })?;
        let nu = zip_leaves([updates, &nu], |[g, v], j| {
            if after_clip {
                v[j].mul_add(b2, (g[j] * g[j]) * c2)
            } else {
                (g[j] * g[j]).mul_add(c2, v[j] * b2)
            }
        })?;
        // The bias corrections as XLA:CPU rewrites `(m / c1) / (sqrt(v / c2)
        // + eps)` (measured on optax 0.2.8 under jit): with several leaves
        // sharing c1 = 1 - b1^t, it becomes `m / (c1 * (sqrt(v / c2) +
        // eps))`; with a single leaf, XLA turns both divisions by the
        // broadcast scalars into multiplies by their reciprocals.
        let c1 = 1.0 - b1.powf(count as f32);
        let c2 = 1.0 - b2.powf(count as f32);
        let (eps, eps_root) = (self.eps as f32, self.eps_root as f32);
        let shared = updates.leaves().len() > 1;
        let (r1, r2) = (1.0 / c1, 1.0 / c2);
        let out = zip_leaves([&mu, &nu], |[m, v], j| {
            let v_hat = if shared { v[j] / c2 } else { v[j] * r2 };
            let root = if eps_root == 0.0 {
                v_hat.sqrt()
            } else {
                (v_hat + eps_root).sqrt()
            };
            if shared {
                m[j] / (c1 * (root + eps))
            } else {
                m[j] * r1 / (root + eps)
            }
        })?;
        let state = Tree::new()
            .with("count", count_leaf(count))
            .with("mu", mu)
            .with("nu", nu);
        Ok((out, state))
    }
}

/// `optax.add_decayed_weights(weight_decay)`: `updates + weight_decay *
/// params` (needs the parameters).
#[derive(Clone, Debug, PartialEq)]
pub struct AddDecayedWeights {
    /// The decay rate.
    pub weight_decay: f64,
}

impl GradientTransformation for AddDecayedWeights {
    fn init(&self, _params: &Tree) -> Result<Tree> {
        Ok(Tree::new())
    }

    fn update(&self, updates: &Tree, state: &Tree, params: Option<&Tree>) -> Result<(Tree, Tree)> {
        let params = params.ok_or_else(|| {
            state_error("add_decayed_weights needs the parameters: pass them to update".into())
        })?;
        if self.weight_decay == 0.0 {
            return Ok((updates.clone(), state.clone()));
        }
        let params = moments(
            &Tree::new().with("params", params.clone()),
            "params",
            updates,
        )?;
        let wd = self.weight_decay as f32;
        let out = zip_leaves([updates, &params], |[u, p], j| p[j].mul_add(wd, u[j]))?;
        Ok((out, state.clone()))
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}

/// `optax.scale_by_learning_rate(learning_rate)`: `-learning_rate *
/// updates`; with a schedule, the state counts the steps.
#[derive(Clone, Debug)]
pub struct ScaleByLearningRate {
    /// The rate, or its schedule.
    pub learning_rate: LearningRate,
}

impl GradientTransformation for ScaleByLearningRate {
    fn init(&self, _params: &Tree) -> Result<Tree> {
        Ok(match self.learning_rate {
            LearningRate::Constant(_) => Tree::new(),
            LearningRate::Schedule(_) => Tree::new().with("count", count_leaf(0)),
        })
    }

    fn update(&self, updates: &Tree, state: &Tree, _params: Option<&Tree>) -> Result<(Tree, Tree)> {
        let (step, state) = self.step(state)?;
        let out = zip_leaves([updates], |[u], j| u[j] * step)?;
        Ok((out, state))
    }

    fn scale_factor(&self, state: &Tree) -> Result<Option<(f32, Tree)>> {
        self.step(state).map(Some)
    }
}

impl ScaleByLearningRate {
    /// `-learning_rate` at the state's count, and the next state.
    fn step(&self, state: &Tree) -> Result<(f32, Tree)> {
        let (step, state) = match &self.learning_rate {
            LearningRate::Constant(lr) => (-(*lr as f32), state.clone()),
            LearningRate::Schedule(s) => {
                let count = read_count(state, "count")?;
                let next = Tree::new().with("count", count_leaf(safe_increment(count)));
                (-s.value(count), next)
            }
        };
        // A negative rate would climb the loss; NaN or infinity ruins the
        // parameters: both are refused, naming the value.
        if !step.is_finite() || step > 0.0 {
            return Err(state_error(format!(
                "the learning rate must be finite and non-negative, got {}",
                -step
            )));
        }
        Ok((step, state))
    }
}

/// `optax.adam(learning_rate)`: `chain(scale_by_adam(), scale_by_learning_rate(lr))`.
pub fn adam(learning_rate: impl Into<LearningRate>) -> Chain {
    chain(vec![
        Box::new(ScaleByAdam::default()),
        Box::new(ScaleByLearningRate {
            learning_rate: learning_rate.into(),
        }),
    ])
}

/// `optax.adamw(learning_rate, weight_decay=...)`:
/// `chain(scale_by_adam(), add_decayed_weights(weight_decay),
/// scale_by_learning_rate(lr))`. optax's default `weight_decay` is 1e-4.
///
/// ```
/// use flaxen::optim::{adamw, apply_updates, GradientTransformation};
/// use flaxen::tensor::{Tensor, Tree};
///
/// let params = Tree::new().with("w", Tensor::ones(&[2]));
/// let tx = adamw(1e-2, 1e-4);
/// let state = tx.init(&params)?;
/// let grads = Tree::new().with("w", Tensor::full(&[2], 0.5));
/// let (updates, state) = tx.update(&grads, &state, Some(&params))?;
/// let params = apply_updates(&params, &updates)?;
/// assert!(params.tensor("w")?.to_vec()[0] < 1.0);
/// assert_eq!(state.array("0/count").unwrap().to_string(), "1");
/// # Ok::<(), flaxen::Error>(())
/// ```
pub fn adamw(learning_rate: impl Into<LearningRate>, weight_decay: f64) -> Chain {
    chain(vec![
        Box::new(ScaleByAdam::default()),
        Box::new(AddDecayedWeights { weight_decay }),
        Box::new(ScaleByLearningRate {
            learning_rate: learning_rate.into(),
        }),
    ])
}
