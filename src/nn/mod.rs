//! The module API, as `flax.linen`: the [`Module`] trait, layers and
//! activations, on top of the functional core ([`crate::core`]).

mod activation;
mod dense;
mod dropout;
mod module;
mod vmap;

pub use activation::{gelu, log_softmax, relu, sigmoid, softmax, tanh};
pub use dense::Dense;
pub use dropout::Dropout;
pub use module::{Child, Module};
pub use vmap::Vmap;
