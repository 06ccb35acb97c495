//! Lifted transforms on the functional core (`flax.core.lift`): JAX
//! transforms applied to scopes, with variables and RNG streams packed,
//! filtered into groups, transformed, and committed back.
//!
//! Today: `vmap` ([`VmapConfig`], behind [`crate::nn::Vmap`]) and `scan`
//! ([`ScanConfig`], behind [`crate::nn::Scan`]), and
//! [`Scope::map_variables`](crate::core::Scope::map_variables).

mod autodiff;
mod axes;
mod carry;
pub(crate) mod collective;
mod cond;
mod jit;
mod jit_signature;
mod map_variables;
mod pack;
mod remat;
mod scan;
mod vmap;
mod while_loop;

pub use autodiff::ScopeVjp;
pub use axes::{MapIn, MappedAxis, Mapping, StackOut, VariableAxis};
pub(crate) use carry::carry_mismatch;
pub use carry::Carry;
pub(crate) use collective::AxisContext;
pub use collective::BatchedFn;
pub(crate) use jit::JitCache;
pub use map_variables::{MapOptions, TreeFn};
pub use scan::ScanConfig;
pub use vmap::VmapConfig;
pub use while_loop::WhileConfig;
