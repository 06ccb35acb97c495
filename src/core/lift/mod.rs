//! Lifted transforms on the functional core (`flax.core.lift`): JAX
//! transforms applied to scopes, with variables and RNG streams packed,
//! filtered into groups, transformed, and committed back.
//!
//! Today: `vmap` ([`VmapConfig`], behind [`crate::nn::Vmap`]) and `scan`
//! ([`ScanConfig`], behind [`crate::nn::Scan`]); `map_variables` comes next.

mod axes;
mod pack;
mod scan;
mod vmap;

pub use axes::{MapIn, StackOut};
pub use scan::ScanConfig;
pub use vmap::VmapConfig;
