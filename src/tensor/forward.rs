//! Forward-mode differentiation: `jax.jvp` and `jax.linearize`.
//!
//! A forward-mode call records the function on a tape of its own, as
//! [`vjp`](super::vjp) does, but every operation also records its tangent
//! rule: JAX's jvp rule for the primitive, in JAX's order. Pushing tangents
//! forward walks the nodes in recording order, so a [`Linearized`] function
//! can be applied to any number of tangents without running the function
//! again. Zero tangents are symbolic, as in JAX: an operation whose inputs
//! carry none produces none, and a product with one zero side is a single
//! product, not a sum with zero (which could turn `-0.0` into `+0.0`).

use std::cell::Cell;
use std::sync::Arc;

use super::error::TensorError;
use super::grad::{detach, nested_error, trace_on};
use super::tape::{TangentRule, Tape};
use super::tensors::Tensors;
use super::{Tensor, Tree};
use crate::error::Result;

thread_local! {
    /// Whether the tangents being pushed are `jax.jvp`'s (fused) rather
    /// than `jax.linearize`'s.
    static FUSED: Cell<bool> = const { Cell::new(false) };
}

/// Whether tangent rules run as under `jax.jvp`, where each `jnp`
/// function's jvp is one small jitted computation and XLA fuses a product
/// into the sum that follows it (one fused multiply-add). Under
/// `jax.linearize` the linear part runs operation by operation, each
/// rounded on its own (both measured: tools/oracle/generate_jvp.py).
pub(crate) fn fused() -> bool {
    FUSED.with(Cell::get)
}

/// Runs `f` with [`fused`] set to `value`, restoring it afterwards.
fn with_fused<T>(value: bool, f: impl FnOnce() -> T) -> T {
    let before = FUSED.with(|c| c.replace(value));
    let out = f();
    FUSED.with(|c| c.set(before));
    out
}

/// A tangent rule for an operation that is linear in its one input: the
/// operation itself, applied to the tangent.
pub(crate) fn linear(f: impl Fn(&Tensor) -> Result<Tensor> + Send + Sync + 'static) -> TangentRule {
    Box::new(move |t: &[Option<Tensor>]| t[0].as_ref().map(&f).transpose())
}

/// A tangent rule for an operation that is linear in all its inputs
/// jointly (stacking, concatenation): the operation applied to the
/// tangents, zeros standing in for zero tangents.
pub(crate) fn linear_all(
    shapes: Vec<Vec<usize>>,
    f: impl Fn(&[Tensor]) -> Result<Tensor> + Send + Sync + 'static,
) -> TangentRule {
    Box::new(move |t: &[Option<Tensor>]| {
        let full: Vec<Tensor> = t
            .iter()
            .zip(&shapes)
            .map(|(t, s)| t.clone().unwrap_or_else(|| Tensor::zeros(s)))
            .collect();
        f(&full).map(Some)
    })
}

/// The tangent rule of a bilinear operation `f(a, b)` (a product, a
/// convolution): `f(ȧ, b) + f(a, ḃ)`, JAX's `defbilinear` rule.
pub(crate) fn bilinear(
    a: Tensor,
    b: Tensor,
    f: impl Fn(&Tensor, &Tensor) -> Result<Tensor> + Send + Sync + 'static,
) -> TangentRule {
    Box::new(move |t: &[Option<Tensor>]| {
        let lhs = t[0].as_ref().map(|ta| f(ta, &b)).transpose()?;
        let rhs = t[1].as_ref().map(|tb| f(&a, tb)).transpose()?;
        add_tangents(lhs, rhs)
    })
}

/// JAX's `add_tangents`: the sum of two optional tangents, the one
/// present when the other is zero.
pub(crate) fn add_tangents(a: Option<Tensor>, b: Option<Tensor>) -> Result<Option<Tensor>> {
    Ok(match (a, b) {
        (Some(a), Some(b)) => Some(a.add(&b)?),
        (a, None) => a,
        (None, b) => b,
    })
}

/// Pushes `seeds` (tangents of leaf nodes) forward through the nodes of
/// `tape` up to `last`; the tangent of every node (`None`: zero).
fn push_forward(
    tape: &Tape,
    seeds: &[(usize, Tensor)],
    last: usize,
) -> Result<Vec<Option<Tensor>>> {
    let nodes = tape.nodes();
    let mut tangents: Vec<Option<Tensor>> = vec![None; last + 1];
    for (id, t) in seeds {
        if *id <= last {
            tangents[*id] = Some(t.clone());
        }
    }
    for id in 0..=last {
        let node = &nodes[id];
        if node.inputs.is_empty() {
            continue;
        }
        let inputs: Vec<Option<Tensor>> = node
            .inputs
            .iter()
            .map(|i| i.and_then(|i| tangents[i].clone()))
            .collect();
        if inputs.iter().all(Option::is_none) {
            continue;
        }
        let Some(rule) = node.tangent() else {
            return Err(TensorError::Argument {
                op: "jvp",
                message: format!(
                    "the operation recorded at {} has no forward-mode (jvp) rule yet",
                    node.site
                ),
            }
            .into());
        };
        tangents[id] = rule(&inputs)?;
    }
    Ok(tangents)
}

/// `jax.linearize`: the output of `f(primals)` and the linear map from
/// tangents of `primals` to tangents of the output, evaluated at
/// `primals`. `primals` and the output may be any [`Tensors`] (a tensor, a
/// [`Tree`], tuples, ...). The map can be called any number of times; it
/// does not run `f` again.
///
/// ```
/// use flaxen::tensor::{linearize, Tensor};
///
/// let x = Tensor::from_vec(vec![1.0, 2.0], &[2]).unwrap();
/// let (y, f_jvp) = linearize(|x: &Tensor| Ok(x.square().sum_all()), &x).unwrap();
/// assert_eq!(y.item().unwrap(), 5.0);
/// let t = Tensor::from_vec(vec![1.0, 0.0], &[2]).unwrap();
/// assert_eq!(f_jvp.call(&t).unwrap().item().unwrap(), 2.0);
/// ```
pub fn linearize<I, O, F>(f: F, primals: &I) -> Result<(O, Linearized<I, O>)>
where
    I: Tensors,
    O: Tensors,
    F: FnOnce(&I) -> Result<O>,
{
    let _stale = super::check_nans();
    let leaves = primals.tensors();
    let mut flat = Tree::new();
    for (i, t) in leaves.iter().enumerate() {
        flat.insert(format!("{i:08}"), t.clone())?;
    }
    let tape = Tape::with_tangents(true);
    let (traced, ids) = trace_on(&tape, &flat);
    let rebuilt = primals
        .rebuild(&mut traced.leaves().to_vec().into_iter())
        .expect("as many tensors as flattened");
    let result = f(&rebuilt);
    tape.close();
    let nan = super::check_nans();
    let out = result?;
    if tape.is_nested() || leaves.iter().any(Tensor::is_traced) {
        return Err(nested_error("jvp").into());
    }
    nan?;
    let outs = out.tensors();
    let value = out
        .rebuild(&mut outs.iter().map(detach))
        .expect("as many tensors as flattened");
    Ok((
        value,
        Linearized {
            tape,
            input: std::marker::PhantomData,
            shapes: leaves.iter().map(|t| t.shape().to_vec()).collect(),
            ids,
            out,
        },
    ))
}

/// `jax.jvp`: the output of `f(primals)` and its tangent for the input
/// tangents `tangents` (of the structure and shapes of `primals`; anything
/// else is an error naming the first mismatch).
///
/// ```
/// use flaxen::tensor::{jvp, Tensor};
///
/// let x = Tensor::from_vec(vec![0.0, 1.0], &[2]).unwrap();
/// let t = Tensor::ones(&[2]);
/// let (y, y_dot) = jvp(|x: &Tensor| Ok(x.exp()), &x, &t).unwrap();
/// assert_eq!(y_dot.to_vec(), y.to_vec());
/// ```
pub fn jvp<I, O, F>(f: F, primals: &I, tangents: &I) -> Result<(O, O)>
where
    I: Tensors,
    O: Tensors,
    F: FnOnce(&I) -> Result<O>,
{
    // Checked first, so that a mismatch does not cost a run of `f`.
    let shapes: Vec<Vec<usize>> = primals
        .tensors()
        .iter()
        .map(|t| t.shape().to_vec())
        .collect();
    check_tangents(&shapes, &tangents.tensors())?;
    let (out, lin) = linearize(f, primals)?;
    let tangent = with_fused(true, || lin.push(tangents))?;
    Ok((out, tangent))
}

/// Checks that tangents have the primals' count and shapes.
fn check_tangents(primals: &[Vec<usize>], tangents: &[Tensor]) -> Result<()> {
    if primals.len() != tangents.len() {
        return Err(TensorError::Argument {
            op: "jvp",
            message: format!(
                "{} tangent tensors were given for {} primal tensors",
                tangents.len(),
                primals.len()
            ),
        }
        .into());
    }
    for (p, t) in primals.iter().zip(tangents) {
        if p[..] != *t.shape() {
            return Err(TensorError::Incompatible {
                op: "jvp",
                lhs: p.clone(),
                rhs: t.shape().to_vec(),
            }
            .into());
        }
    }
    Ok(())
}

/// The linear map returned by [`linearize`]: tangents of the primals to
/// the tangent of the output.
pub struct Linearized<I, O> {
    tape: Arc<Tape>,
    input: std::marker::PhantomData<fn(&I)>,
    shapes: Vec<Vec<usize>>,
    ids: Vec<usize>,
    out: O,
}

impl<I: Tensors, O: Tensors> Linearized<I, O> {
    /// The output's tangent for `tangents` (the structure and shapes of
    /// the primals; [`TensorError::Incompatible`] names the first shape that
    /// differs). Outputs that do not depend on the primals get zeros.
    pub fn call(&self, tangents: &I) -> Result<O> {
        with_fused(false, || self.push(tangents))
    }

    /// The output's tangent, with the rules' rounding as set.
    fn push(&self, tangents: &I) -> Result<O> {
        let given = tangents.tensors();
        check_tangents(&self.shapes, &given)?;
        let seeds: Vec<(usize, Tensor)> = self
            .ids
            .iter()
            .zip(&given)
            .map(|(&id, t)| (id, detach(t)))
            .collect();
        let outs = self.out.tensors();
        let last = outs
            .iter()
            .filter_map(|o| o.tracer.as_ref())
            .filter(|tr| Arc::ptr_eq(&tr.tape, &self.tape))
            .map(|tr| tr.node)
            .max();
        let tangents = match last {
            Some(last) => push_forward(&self.tape, &seeds, last)?,
            None => Vec::new(),
        };
        let out_tangents = outs.iter().map(|o| {
            o.tracer
                .as_ref()
                .filter(|tr| Arc::ptr_eq(&tr.tape, &self.tape))
                .and_then(|tr| tangents[tr.node].clone())
                .unwrap_or_else(|| Tensor::zeros(o.shape()))
        });
        Ok(self
            .out
            .rebuild(&mut out_tangents.collect::<Vec<_>>().into_iter())
            .expect("as many tensors as flattened"))
    }
}

impl<I, O> std::fmt::Debug for Linearized<I, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Linearized")
            .field("input_shapes", &self.shapes)
            .finish()
    }
}
