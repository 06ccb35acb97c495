//! The functional core, as `flax.core`: scopes, variables, RNG streams and
//! filters. It knows nothing of modules; [`crate::nn`] builds on it.
//!
//! * [`Scope`] — a module's view of one `init`/`apply`: `make_rng`,
//!   `param`, `variable`, `has_variable`, `put_variable`, ...
//! * [`Variables`] — the ordered nested map of collections.
//! * [`Rngs`] — the named seed keys of a call; [`set_flax_fix_rng_separator`].
//! * [`Filter`] — collection filters (`mutable=...`, `DenyList`).
//! * [`rng_hash`] — the hash behind `make_rng`.

mod filter;
pub mod lift;
pub mod rng_hash;
mod rngs;
mod run;
mod scan_consts;
mod scope;
mod variables;

pub use crate::error::{Error, Result};
/// `jax.grad` and friends: the same functions as [`crate::tensor`]'s (their
/// closures may fail with any [`Error`]).
pub use crate::tensor::{grad, value_and_grad, value_and_grad_with_aux, vjp};
pub use filter::Filter;
pub use rngs::{flax_fix_rng_separator, set_flax_fix_rng_separator, Rngs};
pub use run::{apply, init};
pub use scope::{ParamInit, Scope, Variable};
pub use variables::{array_repr, Variables};
