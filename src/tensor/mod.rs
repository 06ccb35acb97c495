//! Tensors and reverse-mode automatic differentiation over trees of them.
//!
//! * [`Tensor`] — an immutable `f32` n-d array on `ndarray` with shared
//!   storage, NumPy broadcasting, and the operations models need (arithmetic,
//!   `matmul`, reductions, reshaping, slicing, stacking, activations,
//!   softmax).
//! * [`Tree`] — nested name → tensor maps, the shape of Flax variables, with
//!   [`tree_map`] and [`tree_map2`].
//! * [`grad`], [`value_and_grad`], [`vjp`], [`stop_gradient`] — JAX's
//!   transforms, first order, over a function of a tree.
//! * [`jvp`], [`linearize`] — forward mode (`jax.jvp`, `jax.linearize`)
//!   over any [`Tensors`]; [`custom_jvp`] and [`custom_vjp`] for rules of
//!   your own.
//! * [`jit_value_and_grad`], [`jit_value_and_grad_with`] —
//!   `jax.jit(jax.value_and_grad(f))`: traces a training step once, as
//!   one compiled computation ([`as_jitted`]'s numbers), and replays it
//!   without re-running `f`.
//!
//! Fallible methods return [`TensorError`]; the operators `+ - * /` (on
//! tensors and with `f32` scalars) panic with the same error's message when
//! the shapes do not broadcast.
//!
//! ```
//! use flaxen::tensor::{grad, tree_map2, Tensor, Tree};
//!
//! let params = Tree::new()
//!     .with("w", Tensor::from_vec(vec![0.5, -0.5], &[2, 1]).unwrap())
//!     .with("b", Tensor::zeros(&[1]));
//! let x = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
//! let y = Tensor::from_vec(vec![1.0, 0.0], &[2, 1]).unwrap();
//! let loss = |p: &Tree| {
//!     let pred = x.matmul(p.tensor("w")?)?.add(p.tensor("b")?)?;
//!     Ok((&pred - &y).square().mean_all())
//! };
//! let g = grad(loss, &params).unwrap();
//! let params = tree_map2(&params, &g, |p, g| Ok(p - &(g * 0.1))).unwrap();
//! assert_eq!(params.tensor("w").unwrap().shape(), &[2, 1]);
//! ```
//!
//! # How differentiation works
//!
//! Each `grad`/`value_and_grad`/`vjp` call creates a tape and wraps the
//! tensors of the tree in tracers that point at it. Every operation on a
//! traced tensor appends a node (its traced inputs and a backward closure)
//! to that tape; nothing is global or thread-local, so concurrent calls on
//! any threads are independent. The backward pass walks the nodes in
//! reverse, hands each closure its output gradient by value so that it can
//! scale it in place, and accumulates into existing buffers. Recording stops
//! when the differentiated function returns. Only first-order derivatives
//! are supported: the backward pass is not itself recorded.

mod array;
mod backprop;
mod base;
pub(crate) mod batched;
pub(crate) mod compiled;
pub(crate) use compiled::in_compiled_region;
pub(crate) use ops::batch_norm::{batch_norm_under_grad, compiled_batch_norm};
pub(crate) use ops::batch_norm_step::batch_norm_in_step;
pub(crate) use ops::product_sum::XlaOrigin;
pub(crate) mod custom;
mod debug_nans;
mod error;
pub(crate) mod forward;
mod grad;
pub(crate) mod int_inputs;
pub(crate) mod item_view;
mod jit;
pub(crate) mod jit_forward;
pub(crate) mod kernel;
mod ops;
pub(crate) mod sampled;
pub(crate) mod scaled_cotangents;
pub(crate) mod shape;
mod tape;
mod tensors;
mod tree;
mod unary_fn;

pub use array::Array;
pub use base::Tensor;
pub use compiled::as_jitted;
pub use custom::{checkpoint, custom_jvp, custom_vjp};
pub use debug_nans::{check_nans, debug_nans, set_debug_nans};
pub use error::{Result, TensorError};
pub use forward::{jvp, linearize, Linearized};
pub use grad::{grad, stop_gradient, value_and_grad, value_and_grad_with_aux, vjp, Pullback};
pub use jit::{
    jit_value_and_grad, jit_value_and_grad_with, jit_value_and_grad_with_aux,
    jit_value_and_grad_with_keys, JitValueAndGrad,
};
pub(crate) use ops::cross_entropy::label_out_of_range;
pub use ops::matmul::{exact_matmul_limit, set_exact_matmul_limit, DEFAULT_EXACT_MATMUL_LIMIT};
pub(crate) use ops::reduce_window::WindowSum;
pub(crate) use ops::soft_cross_entropy::fused_row_dots;
pub use ops::{one_hot, ConvSpec};
pub use shape::broadcast_shapes;
pub use tensors::Tensors;
pub use tree::{tree_map, tree_map2, Leaf, LeafRef, Tree};
