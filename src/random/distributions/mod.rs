//! Samplers, as the functions of `jax.random` of the same names.
//!
//! Each takes its key by value (a key is used once), a shape as a slice of
//! dimensions (`&[]` for a scalar), and returns an `ndarray` array of the
//! dtype JAX returns with its default (32-bit) types: `f32` for floats,
//! `u32` for `bits`, `i32` for integers and indices, `bool` for `bernoulli`.

mod categorical;
mod discrete;
mod normal;
mod shuffle;
mod uniform;

pub use categorical::{categorical, exponential, gumbel};
pub use discrete::{bernoulli, randint};
pub use normal::{normal, truncated_normal};
pub use shuffle::{choice, permutation, permutation_along};
pub use uniform::{bits, uniform, uniform_range};
