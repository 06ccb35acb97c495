//! The functional core, as `flax.core`: it knows nothing of modules.
//!
//! Today it holds the hash behind `make_rng`; scopes, variables and lifted
//! transforms come next.

pub mod rng_hash;
