//! Operations with a rule of their own for the backward pass:
//! [`checkpoint`] (`jax.checkpoint`, also called `remat`: the forward pass
//! is recomputed during the backward pass instead of kept) and
//! [`custom_vjp`] (`jax.custom_vjp`: a user-written backward rule).
//!
//! Both record a single operation on the enclosing differentiation's tape,
//! whatever their function computes: its inputs are the function's input
//! tensors, its outputs the function's output tensors, and its backward
//! rule maps the outputs' cotangents to the inputs'. The function itself
//! runs on the inputs' values with nothing recorded, so that none of its
//! intermediate values outlive it.

use std::cell::RefCell;
use std::sync::Arc;

use ndarray::{ArcArray, ArrayD, IxDyn};
use smallvec::SmallVec;

use super::backprop::backward_from;
use super::error::TensorError;
use super::grad::{detach, trace};
use super::tape::OpKind;
use super::tensors::Tensors;
use super::{Tensor, Tree};
use crate::error::{Error, Result};

thread_local! {
    /// The first error a backward rule returned during the running
    /// backward pass (a backward pass cannot stop halfway; the error is
    /// reported when it ends).
    static FAILURE: RefCell<Option<Error>> = const { RefCell::new(None) };
}

/// Takes the error a backward rule reported on this thread, if any.
pub(crate) fn take_failure() -> Option<Error> {
    FAILURE.with(|f| f.borrow_mut().take())
}

/// Keeps the first error of this backward pass.
fn fail(error: Error) {
    FAILURE.with(|f| {
        f.borrow_mut().get_or_insert(error);
    });
}

/// A backward rule: the outputs' cotangents to the inputs'.
pub(crate) type Rule = dyn Fn(&[Tensor]) -> Result<Vec<Tensor>> + Send + Sync;

/// A forward rule: the inputs' tangents (zeros where JAX's would be
/// symbolic zeros) to the outputs'.
pub(crate) type ForwardRule = dyn Fn(&[Tensor]) -> Result<Vec<Tensor>> + Send + Sync;

/// Whether a tensor is traced on a tape that is still recording.
pub(crate) fn recorded(t: &Tensor) -> bool {
    t.tracer.as_ref().is_some_and(|tr| tr.tape.is_open())
}

/// An argument error of `op`.
fn argument(op: &'static str, message: String) -> Error {
    TensorError::Argument { op, message }.into()
}

/// Records one operation of `inputs` whose results are `outputs` (values
/// computed without recording) and whose backward pass is `rule`. Several
/// outputs are recorded as one node holding them all, flattened one after
/// another, and a node per output that reads its part.
pub(crate) fn record_custom(
    op: &'static str,
    inputs: &[Tensor],
    outputs: Vec<Tensor>,
    rule: Arc<Rule>,
    forward: Arc<ForwardRule>,
) -> Vec<Tensor> {
    if !inputs.iter().any(recorded) {
        return outputs;
    }
    let shapes: Vec<Vec<usize>> = outputs.iter().map(|t| t.shape().to_vec()).collect();
    let in_shapes: Vec<Vec<usize>> = inputs.iter().map(|t| t.shape().to_vec()).collect();
    let tangent_shapes = (in_shapes.clone(), shapes.clone());
    let sizes: Vec<usize> = shapes.iter().map(|s| s.iter().product()).collect();
    let total: usize = sizes.iter().sum();
    let mut joined = Vec::with_capacity(total);
    for t in &outputs {
        joined.extend(t.data.iter().copied());
    }
    let joined = ArcArray::from_shape_vec(IxDyn(&[total]), joined).expect("sizes add up");
    let out_shapes = shapes.clone();
    let backward = move |g: ArrayD<f32>, needs: &[bool]| {
        let g = g.as_standard_layout();
        let flat = g.as_slice().expect("standard layout");
        let mut start = 0;
        let cotangents: Vec<Tensor> = out_shapes
            .iter()
            .zip(&sizes)
            .map(|(shape, &n)| {
                let part = flat[start..start + n].to_vec();
                start += n;
                Tensor::from_vec(part, shape).expect("sizes add up")
            })
            .collect();
        let mut grads: SmallVec<[Option<ArrayD<f32>>; 2]> = SmallVec::new();
        match rule(&cotangents).and_then(|cts| checked(op, &in_shapes, cts)) {
            Ok(cts) => {
                for (ct, &need) in cts.into_iter().zip(needs) {
                    grads.push(need.then(|| ct.to_array()));
                }
            }
            Err(e) => {
                fail(e);
                grads.extend(needs.iter().map(|_| None));
            }
        }
        grads
    };
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let node = Tensor::record_kind(joined, &refs, OpKind::Other, backward).with_tangent(|| {
        let (in_shapes, out_shapes) = tangent_shapes;
        Box::new(move |t: &[Option<Tensor>]| {
            let tangents: Vec<Tensor> = t
                .iter()
                .zip(&in_shapes)
                .map(|(t, s)| t.clone().unwrap_or_else(|| Tensor::zeros(s)))
                .collect();
            let outs = checked_tangents(op, &out_shapes, forward(&tangents)?)?;
            let mut flat = Vec::with_capacity(total);
            for t in &outs {
                flat.extend(t.data.iter().copied());
            }
            Ok(Some(Tensor::from_vec(flat, &[total])?))
        })
    });
    // Each output reads its part; the other parts of its cotangent are
    // -0.0, which leaves any value it is added to unchanged (+0.0 would
    // turn a -0.0 cotangent into +0.0).
    let mut start = 0;
    outputs
        .into_iter()
        .zip(shapes)
        .map(|(t, shape)| {
            let n: usize = shape.iter().product();
            let at = start;
            start += n;
            let part_shape = shape.clone();
            Tensor::record_kind(t.data.clone(), &[&node], OpKind::Other, move |g, _| {
                let mut full = vec![-0.0f32; total];
                let g = g.as_standard_layout();
                full[at..at + n].copy_from_slice(g.as_slice().expect("standard layout"));
                smallvec::smallvec![Some(
                    ArrayD::from_shape_vec(IxDyn(&[total]), full).expect("sizes add up")
                )]
            })
            .with_tangent(|| {
                super::forward::linear(move |t| {
                    let shape: Vec<isize> = part_shape.iter().map(|&d| d as isize).collect();
                    Ok(t.slice(0, at, at + n)?.reshape(&shape)?)
                })
            })
        })
        .collect()
}

/// What a rule returns: (`rule`, `value`, `of`), e.g. ("backward",
/// "cotangent", "input") or ("tangent", "tangent", "output").
type RuleWords = (&'static str, &'static str, &'static str);

/// Checks that a rule returned one value of the right shape per tensor
/// of `shapes`.
fn checked_rule(
    op: &'static str,
    (rule, value, of): RuleWords,
    shapes: &[Vec<usize>],
    values: Vec<Tensor>,
) -> Result<Vec<Tensor>> {
    if values.len() != shapes.len() {
        return Err(argument(
            op,
            format!(
                "the {rule} rule returned {} {value}s for {} {of} tensors",
                values.len(),
                shapes.len()
            ),
        ));
    }
    for (i, (v, shape)) in values.iter().zip(shapes).enumerate() {
        if v.shape() != &shape[..] {
            return Err(argument(
                op,
                format!(
                    "the {rule} rule returned a {value} of shape {:?} for {of} tensor {i} \
                     of shape {shape:?}",
                    v.shape()
                ),
            ));
        }
    }
    Ok(values)
}

/// Checks a forward rule's tangents against the outputs' shapes.
fn checked_tangents(
    op: &'static str,
    shapes: &[Vec<usize>],
    ts: Vec<Tensor>,
) -> Result<Vec<Tensor>> {
    checked_rule(op, ("tangent", "tangent", "output"), shapes, ts)
}

/// Checks a backward rule's cotangents against the inputs' shapes.
fn checked(op: &'static str, shapes: &[Vec<usize>], cts: Vec<Tensor>) -> Result<Vec<Tensor>> {
    checked_rule(op, ("backward", "cotangent", "input"), shapes, cts)
}

/// A recomputed function's forward rule: the tangents of `run` at
/// `primals` (the jvp of a checkpointed function is its body's).
pub(crate) fn forward_of(
    primals: Vec<Tensor>,
    run: Arc<dyn Fn(Vec<Tensor>) -> Result<Vec<Tensor>> + Send + Sync>,
) -> Arc<ForwardRule> {
    Arc::new(move |tangents: &[Tensor]| {
        let run = run.clone();
        let (_, t) = super::forward::jvp(
            move |x: &Vec<Tensor>| run(x.clone()),
            &primals,
            &tangents.to_vec(),
        )?;
        Ok(t)
    })
}

/// The forward rule of a function with a custom backward rule: an error,
/// as in JAX.
pub(crate) fn no_forward() -> Arc<ForwardRule> {
    Arc::new(|_: &[Tensor]| {
        Err(argument(
            "custom_vjp",
            "a function with a custom backward rule cannot be differentiated in forward mode \
             (jvp); JAX refuses it too: use custom_jvp"
                .into(),
        ))
    })
}

/// `input` with every tensor detached from any tape.
fn detached<I: Tensors>(input: &I) -> I {
    let leaves: Vec<Tensor> = input.tensors().iter().map(detach).collect();
    input
        .rebuild(&mut leaves.into_iter())
        .expect("as many tensors as flattened")
}

/// Refuses outputs that an enclosing differentiation traces: the function
/// read a traced tensor that is not among its inputs, whose gradient the
/// single recorded operation would lose.
pub(crate) fn untraced<O: Tensors>(op: &'static str, out: &O) -> Result<Vec<Tensor>> {
    let leaves = out.tensors();
    if leaves.iter().any(recorded) {
        return Err(argument(
            op,
            "the function reads a tensor that an enclosing grad differentiates but that is not \
             among its inputs; pass it as an input"
                .into(),
        ));
    }
    Ok(leaves)
}

/// The backward rule of a checkpoint: `run` (the forward pass, from the
/// detached input tensors `free`) again, recorded this time on a tape of its
/// own, then its backward pass from every output at once; the cotangents of
/// `free`.
pub(crate) fn recompute(
    free: Vec<Tensor>,
    run: impl Fn(Vec<Tensor>) -> Result<Vec<Tensor>> + Send + Sync + 'static,
) -> Arc<Rule> {
    // Inside a compiled region (a scan's body) the forward pass again
    // records what XLA fuses there, as it did the first time.
    let compiled = super::in_compiled_region();
    Arc::new(move |cts: &[Tensor]| -> Result<Vec<Tensor>> {
        let _region = compiled.then(super::compiled::CompiledRegion::enter);
        let mut flat = Tree::new();
        for (i, t) in free.iter().enumerate() {
            flat.insert(format!("{i:08}"), t.clone())?;
        }
        let (tape, traced, ids) = trace(&flat);
        let result = run(traced.leaves().to_vec());
        tape.close();
        let outs = result?;
        let seeds = outs
            .iter()
            .zip(cts)
            .filter_map(|(o, ct)| {
                let tr = o
                    .tracer
                    .as_ref()
                    .filter(|tr| Arc::ptr_eq(&tr.tape, &tape))?;
                Some((tr.node, ct.to_array()))
            })
            .collect();
        let grads = backward_from(&tape, seeds, &ids);
        Ok(grads
            .into_iter()
            .zip(&free)
            .map(|(g, x)| Tensor::from_array(g.unwrap_or_else(|| ArrayD::zeros(IxDyn(x.shape())))))
            .collect())
    })
}

/// `jax.checkpoint` (`jax.remat`): `f(input)`, whose intermediate values
/// are not kept for the backward pass of an enclosing `grad`; the backward
/// pass runs `f` again to get them. Values and gradients are those of
/// `f(input)` itself, bit for bit: the same operations run in the same
/// order, twice. Outside a differentiation, this is just `f(input)`.
///
/// `f` must read every tensor it differentiates through from `input`
/// (capturing a tensor the enclosing `grad` traces is an error); values
/// that hold no tensor (`usize`, `bool`, ... — JAX's `static_argnums`)
/// pass through `input` unchanged.
///
/// ```
/// use flaxen::tensor::{checkpoint, grad, Tensor, Tree};
///
/// let block = |x: &Tensor| -> flaxen::Result<Tensor> { Ok(x.sin().sin().sin()) };
/// let p = Tree::from(Tensor::from_vec(vec![0.5, 1.0], &[2]).unwrap());
/// let x = |p: &Tree| p.as_tensor().unwrap().clone();
/// let plain = grad(|p| Ok(block(&x(p))?.sum_all()), &p).unwrap();
/// let remat = grad(|p| Ok(checkpoint(block, &x(p))?.sum_all()), &p).unwrap();
/// assert_eq!(plain.as_tensor().unwrap().to_vec(), remat.as_tensor().unwrap().to_vec());
/// ```
pub fn checkpoint<I, O, F>(f: F, input: &I) -> Result<O>
where
    I: Tensors + Send + Sync + 'static,
    O: Tensors,
    F: Fn(&I) -> Result<O> + Send + Sync + 'static,
{
    let inputs = input.tensors();
    if !inputs.iter().any(recorded) {
        return f(input);
    }
    let free = detached(input);
    let out = f(&free)?;
    let leaves = untraced("checkpoint", &out)?;
    let f = Arc::new(f);
    let run = {
        let (free, f) = (free.clone(), f.clone());
        move |traced: Vec<Tensor>| -> Result<Vec<Tensor>> {
            let rebuilt = free
                .rebuild(&mut traced.into_iter())
                .expect("as many tensors as flattened");
            Ok(f(&rebuilt)?.tensors())
        }
    };
    let run = Arc::new(run);
    let rule = recompute(free.tensors(), {
        let run = run.clone();
        move |traced| run(traced)
    });
    let forward = forward_of(free.tensors(), run);
    let outputs = record_custom("checkpoint", &inputs, leaves, rule, forward);
    Ok(out
        .rebuild(&mut outputs.into_iter())
        .expect("as many tensors as flattened"))
}

/// `jax.custom_vjp`: a function with a backward rule of your own. `fwd`
/// computes the output and residuals (what the rule needs) from `input`;
/// under an enclosing `grad`, `bwd(residuals, cotangent)` receives the
/// output's cotangent (in the output's structure) and returns the input's
/// (in the input's structure: one tensor of the same shape per input
/// tensor; anything else is an error of the `grad`). Outside a
/// differentiation only `fwd` runs.
///
/// A straight-through estimator: the forward pass rounds, the backward pass
/// lets the cotangent through unchanged.
///
/// ```
/// use flaxen::tensor::{custom_vjp, grad, Tensor, Tree};
///
/// let round_ste = |x: &Tensor| {
///     custom_vjp(
///         |x: &Tensor| {
///             let rounded: Vec<f32> = x.to_vec().iter().map(|v| v.round()).collect();
///             Ok((Tensor::from_vec(rounded, x.shape())?, ()))
///         },
///         |_: &(), g: &Tensor| Ok(g.clone()),
///         x,
///     )
/// };
/// let p = Tree::from(Tensor::from_vec(vec![0.3, 1.7], &[2]).unwrap());
/// let g = grad(|p| Ok(round_ste(p.as_tensor().unwrap())?.sum_all()), &p).unwrap();
/// assert_eq!(g.as_tensor().unwrap().to_vec(), [1.0, 1.0]);
/// ```
pub fn custom_vjp<I, O, R, Fwd, Bwd>(fwd: Fwd, bwd: Bwd, input: &I) -> Result<O>
where
    I: Tensors,
    O: Tensors + Send + Sync + 'static,
    R: Send + Sync + 'static,
    Fwd: FnOnce(&I) -> Result<(O, R)>,
    Bwd: Fn(&R, &O) -> Result<I> + Send + Sync + 'static,
{
    let inputs = input.tensors();
    if !inputs.iter().any(recorded) {
        return Ok(fwd(input)?.0);
    }
    let (out, residuals) = fwd(&detached(input))?;
    let leaves = untraced("custom_vjp", &out)?;
    let template = out.clone();
    let count = inputs.len();
    let rule = move |cts: &[Tensor]| -> Result<Vec<Tensor>> {
        let ct = template
            .rebuild(&mut cts.iter().cloned())
            .expect("one cotangent per output tensor");
        let result = bwd(&residuals, &ct)?.tensors();
        if result.len() != count {
            return Err(argument(
                "custom_vjp",
                format!(
                    "the backward rule returned {} cotangent tensors for an input of {count}",
                    result.len(),
                ),
            ));
        }
        Ok(result)
    };
    let outputs = record_custom("custom_vjp", &inputs, leaves, Arc::new(rule), no_forward());
    Ok(out
        .rebuild(&mut outputs.into_iter())
        .expect("as many tensors as flattened"))
}

/// `jax.custom_jvp`: a function with a forward-mode (tangent) rule of your
/// own. Outside a differentiation only `f` runs. Under [`jvp`] or
/// [`linearize`], `rule(primals, tangents)` returns the output and its
/// tangent (JAX's `defjvp`); zero tangents reach it as zeros. Under
/// [`grad`] or [`vjp`] the output is the rule's, and the backward pass is
/// the transpose of the rule's tangent map, which must therefore be linear
/// in the tangents, as JAX requires: JAX transposes it the same way.
///
/// The rule's tangent must have the output's structure and shapes;
/// anything else is an error of the differentiation.
///
/// A clipped gradient that stays finite where the plain derivative does
/// not, `sqrt` with the tangent `t / (2 sqrt(x) + 1e-6)`:
///
/// ```
/// use flaxen::tensor::{custom_jvp, grad, jvp, Tensor, Tree};
///
/// let safe_sqrt = |x: &Tensor| {
///     custom_jvp(
///         |x: &Tensor| Ok(x.sqrt()),
///         |x: &Tensor, t: &Tensor| {
///             let y = x.sqrt();
///             let scale = (&y * 2.0 + 1e-6).powf(-1.0);
///             Ok((y, t * &scale))
///         },
///         x,
///     )
/// };
/// let x = Tensor::from_vec(vec![0.0, 4.0], &[2]).unwrap();
/// let (_, t) = jvp(|x: &Tensor| safe_sqrt(x), &x, &Tensor::ones(&[2])).unwrap();
/// assert!(t.to_vec()[0].is_finite());
/// let g = grad(|p| Ok(safe_sqrt(p.as_tensor().unwrap())?.sum_all()), &Tree::from(x)).unwrap();
/// assert_eq!(g.as_tensor().unwrap().to_vec(), t.to_vec());
/// ```
///
/// [`jvp`]: super::jvp
/// [`linearize`]: super::linearize
/// [`grad`]: super::grad
/// [`vjp`]: super::vjp
pub fn custom_jvp<I, O, F, J>(f: F, rule: J, input: &I) -> Result<O>
where
    I: Tensors + Send + Sync + 'static,
    O: Tensors,
    F: FnOnce(&I) -> Result<O>,
    J: Fn(&I, &I) -> Result<(O, O)> + Send + Sync + 'static,
{
    let inputs = input.tensors();
    if !inputs.iter().any(recorded) {
        return f(input);
    }
    let free = detached(input);
    let zeros: Vec<Tensor> = inputs.iter().map(|t| Tensor::zeros(t.shape())).collect();
    let zero_tangents = free
        .rebuild(&mut zeros.into_iter())
        .expect("as many tensors as flattened");
    // The output under differentiation is the rule's, as in JAX.
    let (out, _) = rule(&free, &zero_tangents)?;
    let leaves = untraced("custom_jvp", &out)?;
    let rule = Arc::new(rule);
    // The tangent map at `free`, from flat tangents to flat tangents.
    let tangent_map = {
        let (free, rule) = (free.clone(), rule.clone());
        Arc::new(move |tangents: Vec<Tensor>| -> Result<Vec<Tensor>> {
            let t = free
                .rebuild(&mut tangents.into_iter())
                .expect("as many tensors as flattened");
            Ok(rule(&free, &t)?.1.tensors())
        })
    };
    let forward = {
        let map = tangent_map.clone();
        Arc::new(move |t: &[Tensor]| map(t.to_vec())) as Arc<ForwardRule>
    };
    // The backward pass: the transpose of the (linear) tangent map, as the
    // vjp of that map at zero tangents.
    let zero_points: Vec<Tensor> = inputs.iter().map(|t| Tensor::zeros(t.shape())).collect();
    let backward = recompute(zero_points, move |traced| tangent_map(traced));
    let outputs = record_custom("custom_jvp", &inputs, leaves, backward, forward);
    Ok(out
        .rebuild(&mut outputs.into_iter())
        .expect("as many tensors as flattened"))
}
