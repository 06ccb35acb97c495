//! The transforms: `grad`, `value_and_grad`, `vjp`, `stop_gradient`.

use std::sync::Arc;

use ndarray::{ArrayD, IxDyn};

use super::debug_nans::{check_gradients, check_nans};
use super::error::TensorError;
/// Transforms take functions that may fail with any error of the crate.
type FnResult<T> = crate::Result<T>;
use super::backprop::backward;
use super::tape::{Node, OpKind, Tape, Tracer};
use super::tree::{tree_map, Tree};
use super::Tensor;

/// The error for a differentiation that read tensors of an enclosing one.
pub(crate) fn nested_error(op: &'static str) -> TensorError {
    TensorError::Argument {
        op,
        message: "this differentiation reads tensors an enclosing grad/value_and_grad/vjp \
                  differentiates: higher-order derivatives are not supported yet (they would \
                  be silently zero)"
            .to_string(),
    }
}

/// Puts every tensor of `params` on a fresh tape as a leaf.
pub(crate) fn trace(params: &Tree) -> (Arc<Tape>, Tree, Vec<usize>) {
    let tape = Tape::eager();
    let (traced, ids) = trace_on(&tape, params);
    (tape, traced, ids)
}

/// Puts every tensor of `tree` on `tape` as a leaf.
pub(crate) fn trace_on(tape: &Arc<Tape>, tree: &Tree) -> (Tree, Vec<usize>) {
    let mut ids = Vec::new();
    let traced = tree_map(tree, |t| {
        let node = tape.push(Node::leaf(OpKind::Other));
        ids.push(node);
        Tensor {
            data: t.data.clone(),
            tracer: Some(Tracer {
                tape: tape.clone(),
                node,
            }),
            factors: None,
            origin: None,
            merged: None,
        }
    });
    (traced, ids)
}

/// The gradients of the leaves `ids` for output `out` and cotangent `seed`,
/// in the structure of `params` (zeros for leaves the output does not use).
pub(crate) fn pull(
    tape: &Arc<Tape>,
    out: &Tensor,
    seed: ArrayD<f32>,
    params: &Tree,
    ids: &[usize],
) -> FnResult<Tree> {
    // A backward rule's error (custom_vjp) is reported when the pass ends.
    let _earlier = super::custom::take_failure();
    let mut grads = match &out.tracer {
        Some(tr) if Arc::ptr_eq(&tr.tape, tape) => backward(tape, tr.node, seed, ids),
        _ => vec![None; ids.len()],
    };
    if let Some(e) = super::custom::take_failure() {
        return Err(e);
    }
    let leaves = params
        .leaves()
        .iter()
        .zip(grads.iter_mut())
        .map(|(p, g)| {
            Tensor::from_array(g.take().unwrap_or_else(|| ArrayD::zeros(IxDyn(p.shape()))))
        })
        .collect();
    Ok(params.with_leaves(leaves).expect("one gradient per leaf"))
}

/// `jax.value_and_grad`: the value of `f(params)` and its gradient with
/// respect to every tensor of `params`, in the same tree structure.
///
/// `f` must return a scalar (shape `[]`); anything else is
/// [`TensorError::NotScalar`]. Tensors that `f` captures instead of reading
/// from its argument (inputs, labels, masks) are not differentiated and pass
/// through untouched. Each call records its own tape, so calls on any number
/// of threads are independent.
///
/// ```
/// use flaxen::tensor::{value_and_grad, Tensor, Tree};
///
/// let params = Tree::new().with("w", Tensor::from_vec(vec![1.0, 2.0], &[2]).unwrap());
/// let x = Tensor::from_vec(vec![3.0, 4.0], &[2]).unwrap();
/// let (loss, grads) = value_and_grad(
///     |p| Ok((p.tensor("w")? * &x).sum_all()),
///     &params,
/// ).unwrap();
/// assert_eq!(loss.item().unwrap(), 11.0);
/// assert_eq!(grads.tensor("w").unwrap().to_vec(), [3.0, 4.0]);
/// ```
pub fn value_and_grad<F>(f: F, params: &Tree) -> FnResult<(Tensor, Tree)>
where
    F: FnOnce(&Tree) -> FnResult<Tensor>,
{
    let ((value, ()), grads) = value_and_grad_with_aux(|p| Ok((f(p)?, ())), params)?;
    Ok((value, grads))
}

/// `jax.grad`: the gradient of the scalar `f(params)` with respect to
/// every tensor of `params`, in the same tree structure. See
/// [`value_and_grad`].
pub fn grad<F>(f: F, params: &Tree) -> FnResult<Tree>
where
    F: FnOnce(&Tree) -> FnResult<Tensor>,
{
    value_and_grad(f, params).map(|(_, g)| g)
}

/// `jax.value_and_grad(f, has_aux=True)`: `f` returns the scalar to
/// differentiate and auxiliary data, passed back unchanged. Recording stops
/// when `f` returns, so tensors in the auxiliary data act as constants
/// afterwards.
pub fn value_and_grad_with_aux<F, A>(f: F, params: &Tree) -> FnResult<((Tensor, A), Tree)>
where
    F: FnOnce(&Tree) -> FnResult<(Tensor, A)>,
{
    let _stale = check_nans();
    let (tape, traced, ids) = trace(params);
    let result = f(&traced);
    tape.close();
    let nan = check_nans();
    let (out, aux) = result?;
    if tape.is_nested() || params.leaves().iter().any(Tensor::is_traced) {
        return Err(nested_error("grad").into());
    }
    nan?;
    if out.ndim() != 0 {
        return Err(TensorError::NotScalar {
            shape: out.shape().to_vec(),
        }
        .into());
    }
    let seed = ndarray::arr0(1.0f32).into_dyn();
    let grads = pull(&tape, &out, seed, params, &ids)?;
    check_gradients(&grads)?;
    Ok(((detach(&out), aux), grads))
}

/// `jax.vjp`: the output of `f(params)` (any shape) and a [`Pullback`] that
/// maps a cotangent of the output to cotangents of `params`.
///
/// ```
/// use flaxen::tensor::{vjp, Tensor, Tree};
///
/// let params = Tree::from(Tensor::from_vec(vec![1.0, 2.0], &[2]).unwrap());
/// let (y, pullback) = vjp(|p| Ok(p.as_tensor().unwrap().square()), &params).unwrap();
/// assert_eq!(y.to_vec(), [1.0, 4.0]);
/// let ct = pullback.call(&Tensor::ones(&[2])).unwrap();
/// assert_eq!(ct.as_tensor().unwrap().to_vec(), [2.0, 4.0]);
/// ```
pub fn vjp<F>(f: F, params: &Tree) -> FnResult<(Tensor, Pullback)>
where
    F: FnOnce(&Tree) -> FnResult<Tensor>,
{
    let _stale = check_nans();
    let (tape, traced, ids) = trace(params);
    let result = f(&traced);
    tape.close();
    let nan = check_nans();
    let out = result?;
    if tape.is_nested() || params.leaves().iter().any(Tensor::is_traced) {
        return Err(nested_error("vjp").into());
    }
    nan?;
    let value = detach(&out);
    Ok((
        value,
        Pullback {
            tape,
            out,
            params: params.clone(),
            ids,
        },
    ))
}

/// The backward function returned by [`vjp`]; it can be called any number
/// of times.
pub struct Pullback {
    tape: Arc<Tape>,
    out: Tensor,
    params: Tree,
    ids: Vec<usize>,
}

impl Pullback {
    /// The cotangents of the parameters for the output cotangent
    /// `cotangent`, which must have the output's shape
    /// ([`TensorError::Incompatible`] otherwise). A [`custom_vjp`]
    /// backward rule's error is returned as it is.
    ///
    /// [`custom_vjp`]: super::custom_vjp
    pub fn call(&self, cotangent: &Tensor) -> FnResult<Tree> {
        if cotangent.shape() != self.out.shape() {
            return Err(TensorError::Incompatible {
                op: "vjp",
                lhs: self.out.shape().to_vec(),
                rhs: cotangent.shape().to_vec(),
            }
            .into());
        }
        let seed = cotangent.to_array();
        pull(&self.tape, &self.out, seed, &self.params, &self.ids)
    }
}

impl std::fmt::Debug for Pullback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pullback")
            .field("output_shape", &self.out.shape())
            .finish()
    }
}

/// `jax.lax.stop_gradient`: the same values, treated as a constant by every
/// enclosing `grad`. O(1).
///
/// Inside a differentiated function it is recorded (with no gradient), so
/// that a compiled step ([`jit_value_and_grad`](super::jit_value_and_grad))
/// computes it again from each call's values instead of keeping the traced
/// call's.
///
/// ```
/// use flaxen::tensor::{grad, stop_gradient, Tensor, Tree};
/// let p = Tree::from(Tensor::scalar(3.0));
/// let g = grad(|p| {
///     let x = p.as_tensor().unwrap();
///     Ok(x * &stop_gradient(x))
/// }, &p).unwrap();
/// assert_eq!(g.as_tensor().unwrap().item().unwrap(), 3.0);
/// ```
pub fn stop_gradient(x: &Tensor) -> Tensor {
    Tensor::record_kind(x.data.clone(), &[x], OpKind::StopGradient, |_, _| {
        smallvec::smallvec![None]
    })
    .with_tangent(|| Box::new(|_: &[Option<Tensor>]| Ok(None)))
}

/// [`Tensor::detached`] as a function (for `map`).
pub(crate) fn detach(x: &Tensor) -> Tensor {
    x.detached()
}

impl Tensor {
    /// [`stop_gradient`] as a method.
    pub fn stop_gradient(&self) -> Tensor {
        stop_gradient(self)
    }

    /// The same values as a constant, recording nothing: for flaxen's own
    /// rules, which use a value without differentiating it and record what
    /// a replay needs themselves (a tangent rule's primal values, a fused
    /// operation's intermediate).
    pub(crate) fn detached(&self) -> Tensor {
        Tensor::constant(self.data.clone())
    }
}
