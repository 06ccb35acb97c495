//! The differentiable operations, as methods of [`Tensor`](super::Tensor).

mod binary;

pub(crate) use binary::is_trailing;
pub(crate) mod matmul;
mod reduce;
mod shape_ops;
mod unary;
