//! # flaxen
//!
//! Flax Linen-style neural networks in Rust, with the same numbers as JAX/Flax.
//!
//! The crate follows Flax's layering: a functional core that knows nothing of
//! modules, and the module API on top of it.
//!
//! * [`random`] — JAX's splittable, counter-based PRNG (`jax.random`), bit for
//!   bit; and TensorFlow's Philox streams ([`random::tf`]).
//! * [`init`] — parameter initializers (`jax.nn.initializers`).
//! * [`tensor`] — `f32` tensors with reverse-mode autodiff over trees.
//! * [`core`] — the functional core (`flax.core`): scopes, variables, RNG
//!   streams, filters, the `make_rng` hash, and lifted transforms.
//! * [`nn`] — the module API (`flax.linen`): `Module`, `Dense`, `Dropout`,
//!   `BatchNorm`, `LayerNorm`, `Vmap`, `Scan`.
//! * [`optim`] — optimizers over variable trees (optax), and losses.
//! * [`data`] — the shipped digits data set, shuffled minibatches.
//! * [`memory`] — an opt-in to keep freed memory for the next step.
//! * [`array_format`] — NumPy-style printing, so examples print as the
//!   documents do.
//!
//! ```
//! use flaxen::random;
//!
//! let key = random::key(0);
//! // jax.random.key_data(jax.random.fold_in(jax.random.key(0), 1))
//! let k = random::fold_in(key, 1);
//! assert_eq!(random::key_data(&k), [928981903, 3453687069]);
//! ```

pub mod array_format;
pub mod core;
pub mod data;
pub mod distributed;
mod error;
pub mod init;
pub mod memory;
pub mod nn;
pub mod optim;
mod pool;
pub mod random;
pub mod serialization;
pub mod sharding;
pub mod tensor;
mod xla;

pub use error::{Error, Result};
