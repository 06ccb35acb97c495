//! Samplers, as the functions of `jax.random` of the same names.
//!
//! Each takes its key by value (a key is used once), a shape as a slice of
//! dimensions (`&[]` for a scalar), and returns an `ndarray` array of the
//! dtype JAX returns with its default (32-bit) types: `f32` for floats,
//! `u32` for `bits`, `i32` for integers and indices, `bool` for `bernoulli`.
//!
//! JAX's other dtypes: the `*_as` functions are generic over the element
//! type (`uniform_as::<f16>`, `bits_as::<u64>`), and the `*_dtype`
//! functions take a dtype chosen at run time and JAX's x64 switch.

mod categorical;
mod discrete;
mod dynamic;
mod normal;
mod shuffle;
mod typed;
mod uniform;

pub(crate) use categorical::{argmax_of_scores, flushed};
pub use categorical::{categorical, exponential, gumbel};
pub use discrete::{bernoulli, randint};
pub(crate) use discrete::{bernoulli_bytes_into_all, bernoulli_mask, ByteMask};
pub use dynamic::{
    bits_dtype, exponential_dtype, gumbel_dtype, normal_dtype, truncated_normal_dtype,
    uniform_dtype, uniform_range_dtype, FloatArray, UIntArray,
};
pub(crate) use normal::{next_down, next_up};
pub use normal::{normal, truncated_normal};
pub use shuffle::{choice, permutation, permutation_along};
pub use typed::{
    bernoulli_as, bits_as, exponential_as, gumbel_as, normal_as, truncated_normal_as, uniform_as,
    uniform_range_as,
};
pub(crate) use uniform::unit_float;
pub use uniform::{bits, uniform, uniform_range};
