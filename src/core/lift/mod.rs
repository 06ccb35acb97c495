//! Lifted transforms on the functional core (`flax.core.lift`): JAX
//! transforms applied to scopes, with variables and RNG streams packed,
//! filtered into groups, transformed, and committed back.
//!
//! Today: [`VmapConfig`] and the scope-level `vmap` behind
//! [`crate::nn::Vmap`]; `scan` and `map_variables` come next.

mod axes;
mod vmap;

pub use axes::{MapIn, StackOut};
pub use vmap::VmapConfig;
