//! `TrainState` (`flax.training.train_state.TrainState`): the step count,
//! the parameters, the other variable collections (such as `batch_stats`),
//! the optimizer and its state, in one value a training loop carries.

use std::sync::Arc;

use super::transform::GradientTransformation;
use crate::core::Variables;
use crate::error::Result;
use crate::tensor::Tree;

/// Flax's `TrainState`, with the other collections a model keeps beside
/// its parameters (what Flax users add by subclassing, e.g. `batch_stats`).
///
/// ```
/// use flaxen::core::Variables;
/// use flaxen::nn::{Dense, Module};
/// use flaxen::optim::{adam, TrainState};
/// use flaxen::random;
/// use flaxen::tensor::{grad, Tensor};
///
/// let model = Dense::new(1);
/// let x = Tensor::ones(&[4, 3]);
/// let variables = model.init(random::key(0), x.clone())?;
/// let mut state = TrainState::create(&variables, adam(1e-2))?;
/// for _ in 0..3 {
///     let grads = grad(
///         |p| Ok(model.apply(&state.variables_with(p), x.clone(), ())?.square().mean_all()),
///         &state.params,
///     )?;
///     state = state.apply_gradients(&grads)?;
/// }
/// assert_eq!(state.step, 3);
/// # Ok::<(), flaxen::Error>(())
/// ```
#[derive(Clone)]
pub struct TrainState {
    /// Steps taken (`apply_gradients` calls).
    pub step: u64,
    /// The `params` collection.
    pub params: Tree,
    /// Every other collection (`batch_stats`, ...).
    pub collections: Variables,
    /// The optimizer's state.
    pub opt_state: Tree,
    tx: Arc<dyn GradientTransformation + Send + Sync>,
}

impl TrainState {
    /// `TrainState.create(params=variables['params'], tx=tx)`: step 0, the
    /// optimizer initialized on the parameters; the other collections of
    /// `variables` are kept beside them.
    pub fn create(
        variables: &Variables,
        tx: impl GradientTransformation + Send + Sync + 'static,
    ) -> Result<TrainState> {
        let params = variables.params();
        let mut collections = variables.clone();
        collections.remove("params");
        let opt_state = tx.init(&params)?;
        Ok(TrainState {
            step: 0,
            params,
            collections,
            opt_state,
            tx: Arc::new(tx),
        })
    }

    /// [`apply_gradients`](TrainState::apply_gradients) consuming the
    /// state, as a training loop that replaces it does (`state =
    /// state.apply_gradients_owned(&grads)?`): the parameters and the
    /// optimizer state are updated in place where nothing else holds them
    /// (see [`GradientTransformation::apply_gradients_owned`]); the same
    /// numbers.
    pub fn apply_gradients_owned(self, grads: &Tree) -> Result<TrainState> {
        let (params, opt_state) =
            self.tx
                .apply_gradients_owned(grads, self.opt_state, self.params)?;
        Ok(TrainState {
            step: self.step + 1,
            params,
            collections: self.collections,
            opt_state,
            tx: self.tx,
        })
    }

    /// `state.apply_gradients(grads=grads)`: one optimizer step (the
    /// learning-rate scaling fused into the update, as a jitted Flax step
    /// computes it); `step` goes up by one.
    pub fn apply_gradients(&self, grads: &Tree) -> Result<TrainState> {
        let (params, opt_state) = self
            .tx
            .apply_gradients(grads, &self.opt_state, &self.params)?;
        Ok(TrainState {
            step: self.step + 1,
            params,
            collections: self.collections.clone(),
            opt_state,
            tx: Arc::clone(&self.tx),
        })
    }

    /// The state with other collections replaced by `updated` (what
    /// `apply(..., mutable=['batch_stats'])` returned).
    pub fn with_collections(mut self, updated: &Variables) -> TrainState {
        for (name, tree) in updated.iter() {
            if name != "params" {
                self.collections.insert(name, tree.clone());
            }
        }
        self
    }

    /// The state with the keys of every dict in sorted order, as a jitted
    /// Flax step returns it (JAX flattens dicts in key order), so that
    /// [`serialization::to_bytes`](crate::serialization::to_bytes) writes
    /// the bytes Flax writes for a trained state.
    pub fn sorted(&self) -> TrainState {
        let mut collections = Variables::new();
        for (name, tree) in self.collections.iter() {
            collections.insert(name, tree.sorted());
        }
        TrainState {
            step: self.step,
            params: self.params.sorted(),
            collections,
            opt_state: self.opt_state.sorted(),
            tx: Arc::clone(&self.tx),
        }
    }

    /// All variables for `apply`: the parameters and the other collections.
    pub fn variables(&self) -> Variables {
        self.variables_with(&self.params)
    }

    /// The variables with `params` in place of the state's parameters (for
    /// the function `grad` differentiates).
    pub fn variables_with(&self, params: &Tree) -> Variables {
        let mut v = Variables::new().with("params", params.clone());
        for (name, tree) in self.collections.iter() {
            v.insert(name, tree.clone());
        }
        v
    }
}

impl std::fmt::Debug for TrainState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrainState")
            .field("step", &self.step)
            .field("params", &self.params)
            .field("collections", &self.collections)
            .finish_non_exhaustive()
    }
}
