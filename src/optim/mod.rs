//! Optimizers as optax: gradient transformations with state ([`sgd`],
//! [`adam`], [`adamw`], [`rmsprop`], [`adagrad`], [`lion`],
//! [`clip_by_global_norm`], their building blocks, [`chain`],
//! [`apply_updates`]),
//! schedules ([`warmup_cosine_decay_schedule`], ...), the losses
//! ([`losses`]), and plain [`Sgd`].
//!
//! ```
//! use flaxen::optim::{adamw, apply_updates, warmup_cosine_decay_schedule, GradientTransformation};
//! use flaxen::tensor::{grad, Tensor, Tree};
//!
//! let mut params = Tree::new().with("w", Tensor::from_vec(vec![3.0, -2.0], &[2]).unwrap());
//! let tx = adamw(warmup_cosine_decay_schedule(0.0, 0.1, 5, 100, 1e-3), 1e-4);
//! let mut state = tx.init(&params)?;
//! for _ in 0..100 {
//!     let g = grad(|p| Ok(p.tensor("w")?.square().sum_all()), &params)?;
//!     let (updates, next) = tx.update(&g, &state, Some(&params))?;
//!     params = apply_updates(&params, &updates)?;
//!     state = next;
//! }
//! assert!(params.tensor("w")?.to_vec().iter().all(|w| w.abs() < 1.0));
//! # Ok::<(), flaxen::Error>(())
//! ```

mod adam;
mod adamw_fused;
mod clip;
mod lion;
pub mod losses;
mod momentum;
mod rms;
mod schedule;
mod sgd;
mod train_state;
mod transform;

pub use adam::{adam, adamw, AddDecayedWeights, ScaleByAdam, ScaleByLearningRate};
pub use clip::{clip_by_global_norm, global_norm, ClipByGlobalNorm};
pub use lion::{lion, ScaleByLion};
pub use momentum::{sgd, Trace};
pub use rms::{adagrad, rmsprop, ScaleByRms, ScaleByRss};
pub use schedule::{
    constant_schedule, cosine_decay_schedule, exponential_decay, join_schedules, linear_schedule,
    piecewise_constant_schedule, warmup_cosine_decay_schedule, LearningRate, Schedule,
};
pub use sgd::Sgd;
pub use train_state::TrainState;
pub use transform::{apply_updates, chain, Chain, GradientTransformation};
