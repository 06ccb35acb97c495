//! Compiled training steps: `jax.jit(jax.value_and_grad(f))`.
//!
//! The first call traces `f` like [`value_and_grad`] inside a compiled
//! region ([`as_jitted`](super::as_jitted)), since `jax.jit` runs the whole
//! step as one XLA computation, and keeps the tape. When every operation
//! on it is one a compiled step knows (2-D
//! `matmul`, `+ - * /` with equal shapes or a row-broadcast operand, `+ -`
//! with a column operand no gradient flows into, `neg`, the unary
//! functions, `sum_all`, `mean_all`, sums and means over any axes,
//! `reshape`, `maximum` and comparisons (with equal shapes or a
//! row-broadcast operand),
//! `softmax` and `log_softmax` over the last axis, `squeeze`, `select`,
//! random draws, the integer-label cross-entropy's gather and
//! stop-gradient maximum: an eager `BatchNorm`'s operations among them,
//! and operations with computations of their own: convolutions and
//! pooling windows, see `tensor::kernel`),
//! later calls replay the tape on the new parameter
//! values with buffers allocated once, instead of running `f` again.
//! Otherwise every call runs `as_jitted(|| value_and_grad(f))`. The
//! `int32` arrays of the inputs that such a gather took by reference are
//! arguments (read and
//! checked on every call); other arrays of the inputs are baked in.
//! Comparisons (`greater`, `less`, `equal`…) are replayed as masks with no
//! gradient; an `argmax` of traced values, or a read of them, makes every
//! call run eagerly (the replay would keep the traced call's result).
//!
//! Replay runs the kernels the trace recorded (with the compiled region's
//! roundings: fused multiply-adds, fused sums of products, jitted
//! softmax), in the same order, so every call produces the same bits as
//! the traced one: `jax.jit`'s.

use std::sync::Arc;

use ndarray::{ArcArray, IxDyn};
use smallvec::SmallVec;

use super::batched::current_layout;
use super::compiled::CompiledRegion;
use super::debug_nans::{check_gradients, check_nans, debug_nans};
use super::error::{Result, TensorError};
use super::grad::{detach, pull, trace_on};
use super::kernel::Kernel;
use super::ops::binary::{
    div_da, div_db, div_op, div_traced_da, div_traced_db, is_trailing, max_da, max_db, mul_da,
    mul_db, mul_op, nan_max, picks, Rule,
};
use super::ops::cross_entropy;
use super::ops::matmul::{exact_matmul_limit, matmul_slices_into, DotRoute};
use super::ops::{reduce, rows};
use super::sampled::{draw_again, draw_bytes_again, Sampler};
use super::scaled_cotangents::{self, plan_fused_biases, FusedBias, PlannedEdge};
use super::shape::broadcast_shapes_for;
use super::tape::{OpKind, Tape};
use super::tree::{Structure, Tree};
use super::unary_fn::{self, UnaryFn};
use super::Tensor;
use crate::random::Key;
use crate::xla::dot_tiny::{gathered_product, TinySum};
use crate::xla::scaled_columns;
use crate::xla::vectors::on_widest_vectors;
use fusions::{add_sigmoid_product, Fusion};

mod fusions;

/// `jax.jit(jax.value_and_grad(f))`: a training step that traces `f` on
/// its first call and replays the recorded operations afterwards.
///
/// Like `jax.jit`, this assumes `f` is a pure function of its argument and
/// of the values it captures: side effects happen only while tracing, and
/// captured tensors are baked in (pass data that changes between calls, such
/// as batches, through [`jit_value_and_grad_with`]). Calling with a tree of
/// another structure or other shapes traces again.
///
/// The numbers are `jax.jit`'s: the step traces `f` inside a compiled
/// region, as [`as_jitted`](super::as_jitted) does, so every call (the
/// traced first one and the replays) rounds as XLA rounds the one
/// computation `jax.jit(jax.value_and_grad(f))` compiles to, bit for bit
/// with `as_jitted(|| value_and_grad(f, params))`, not with an eager
/// [`value_and_grad`](super::value_and_grad) where the two differ (a
/// mean's cotangent, a `tanh`'s, a cross-entropy's). `f` need not wrap
/// its body in `as_jitted` (doing so changes nothing).
///
/// ```
/// use flaxen::tensor::{jit_value_and_grad, tree_map2, Tensor, Tree};
///
/// let x = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
/// let y = Tensor::from_vec(vec![1.0, 0.0, 0.0, 1.0], &[2, 2]).unwrap();
/// let mut step = jit_value_and_grad(|p: &Tree| {
///     let pred = x.matmul(p.tensor("w")?)?.add(p.tensor("b")?)?;
///     Ok((&pred - &y).square().mean_all())
/// });
/// let mut params = Tree::new()
///     .with("w", Tensor::zeros(&[2, 2]))
///     .with("b", Tensor::zeros(&[2]));
/// let (first, _) = step.call(&params).unwrap();
/// for _ in 0..100 {
///     let (_, grads) = step.call(&params).unwrap();
///     params = tree_map2(&params, &grads, |p, g| Ok(p - &(g * 0.05))).unwrap();
/// }
/// let (last, _) = step.call(&params).unwrap();
/// assert!(step.is_compiled());
/// assert!(last.item().unwrap() < first.item().unwrap());
/// ```
pub fn jit_value_and_grad<F>(
    f: F,
) -> JitValueAndGrad<impl Fn(&Tree, &Tree) -> crate::Result<Tensor>>
where
    F: Fn(&Tree) -> crate::Result<Tensor>,
{
    jit_value_and_grad_with(move |params: &Tree, _: &Tree| f(params))
}

/// [`jit_value_and_grad`] for a function of the parameters and of a tree of
/// inputs that changes between calls without being differentiated (a batch
/// of data, labels, a dropout mask): `jax.jit(jax.value_and_grad(f))(params,
/// inputs)`. Call it with [`call_with`](JitValueAndGrad::call_with). Its
/// numbers are `jax.jit`'s, as [`jit_value_and_grad`]'s are.
///
/// ```
/// use flaxen::tensor::{jit_value_and_grad_with, Tensor, Tree};
///
/// let mut step = jit_value_and_grad_with(|p: &Tree, batch: &Tree| {
///     let pred = batch.tensor("x")?.matmul(p.tensor("w")?)?;
///     Ok((&pred - batch.tensor("y")?).square().mean_all())
/// });
/// let params = Tree::new().with("w", Tensor::ones(&[3, 1]));
/// for i in 0..4 {
///     let batch = Tree::new()
///         .with("x", Tensor::full(&[8, 3], i as f32))
///         .with("y", Tensor::zeros(&[8, 1]));
///     let (loss, grads) = step.call_with(&params, &batch).unwrap();
///     assert_eq!(loss.item().unwrap(), (3 * i * i * 3) as f32);
///     assert_eq!(grads.tensor("w").unwrap().shape(), &[3, 1]);
/// }
/// assert!(step.is_compiled());
/// ```
pub fn jit_value_and_grad_with<F>(f: F) -> JitValueAndGrad<F>
where
    F: Fn(&Tree, &Tree) -> crate::Result<Tensor>,
{
    JitValueAndGrad {
        f,
        plan: None,
        no_inputs: Tree::new(),
    }
}

/// [`jit_value_and_grad_with`] whose function also takes PRNG keys, as a
/// jitted JAX step takes them as arguments: `jax.jit(jax.value_and_grad(f))
/// (params, inputs, keys)`. Call it with
/// [`call_with_keys`](JitValueAndGrad::call_with_keys).
///
/// Random numbers drawn inside (through [`Tensor::sampled`], as `Dropout`
/// draws) from these arguments or from keys that `make_rng` derives from
/// them (a `Dropout` given `rngs` made of them) are drawn again on every
/// call from that call's keys, as under `jax.jit`; the rest of the
/// step is replayed. A function that draws from other keys, or uses a
/// derived key in a way the replay cannot repeat, is not compiled: it runs
/// eagerly on every call (same numbers, no speed-up).
///
/// ```
/// use flaxen::nn::{Dropout, Module};
/// use flaxen::core::{Rngs, Variables};
/// use flaxen::random;
/// use flaxen::tensor::{as_jitted, jit_value_and_grad_with_keys, value_and_grad, Tensor, Tree};
///
/// let dropout = Dropout::new(0.5);
/// let loss = |p: &Tree, b: &Tree, keys: &[random::Key]| -> flaxen::Result<Tensor> {
///     let x = b.tensor("x")?.mul(p.tensor("w")?)?;
///     let rngs = Rngs::none().with("dropout", keys[0].clone());
///     let y = dropout.apply(&Variables::new(), x, rngs)?;
///     Ok(y.square().sum_all())
/// };
/// let mut step = jit_value_and_grad_with_keys(loss);
/// let params = Tree::new().with("w", Tensor::full(&[8], 0.5));
/// let batch = Tree::new().with("x", Tensor::ones(&[8]));
/// for t in 0..3 {
///     let keys = [random::fold_in(random::key(0), t)];
///     let (l, g) = step.call_with_keys(&params, &batch, &keys).unwrap();
///     // The same numbers as a jitted eager step with the same key.
///     let (l_eager, g_eager) =
///         as_jitted(|| value_and_grad(|p| loss(p, &batch, &keys), &params)).unwrap();
///     assert_eq!(l.item().unwrap(), l_eager.item().unwrap());
///     assert_eq!(g.tensor("w").unwrap().to_vec(), g_eager.tensor("w").unwrap().to_vec());
/// }
/// assert!(step.is_compiled());
/// ```
pub fn jit_value_and_grad_with_keys<F>(f: F) -> JitValueAndGrad<F>
where
    F: Fn(&Tree, &Tree, &[Key]) -> crate::Result<Tensor>,
{
    JitValueAndGrad {
        f,
        plan: None,
        no_inputs: Tree::new(),
    }
}

/// [`jit_value_and_grad_with_keys`] for a function that also returns
/// auxiliary outputs: `jax.jit(jax.value_and_grad(f, has_aux=True))(params,
/// inputs, keys)`, where `f` returns the loss and a tree of tensors (a
/// model's updated `batch_stats`, its predictions, metrics). Call it with
/// [`call_with_aux`](JitValueAndGrad::call_with_aux), which returns
/// `((loss, aux), grads)`.
///
/// Auxiliary outputs are outputs of the compiled program: an operation's
/// value computed again on every call, an argument passed through, or a
/// tensor that depends on no argument (baked in when traced, as `jax.jit`
/// bakes in a captured constant). Computing them need not be
/// differentiable: operations that only they use (a sum over several
/// axes, a comparison, a reshape) have no backward to replay. Pass no keys
/// (`&[]`) for a step that draws no random numbers.
///
/// ```
/// use flaxen::tensor::{
///     as_jitted, jit_value_and_grad_with_aux, value_and_grad_with_aux, Tensor, Tree,
/// };
///
/// let loss = |p: &Tree, b: &Tree, _: &[flaxen::random::Key]| {
///     let pred = b.tensor("x")?.matmul(p.tensor("w")?)?;
///     let loss = (&pred - b.tensor("y")?).square().mean_all();
///     // Also return the predictions and their mean.
///     let aux = Tree::new()
///         .with("pred", pred.clone())
///         .with("mean", pred.mean_all());
///     Ok((loss, aux))
/// };
/// let mut step = jit_value_and_grad_with_aux(loss);
/// let params = Tree::new().with("w", Tensor::full(&[3, 1], 0.5));
/// for i in 0..3 {
///     let batch = Tree::new()
///         .with("x", Tensor::full(&[4, 3], i as f32))
///         .with("y", Tensor::zeros(&[4, 1]));
///     let ((l, aux), grads) = step.call_with_aux(&params, &batch, &[]).unwrap();
///     // The numbers of an eager step run as jitted.
///     let ((l_eager, aux_eager), _) =
///         as_jitted(|| value_and_grad_with_aux(|p| loss(p, &batch, &[]), &params)).unwrap();
///     assert_eq!(l.item().unwrap(), l_eager.item().unwrap());
///     assert_eq!(aux.tensor("pred").unwrap().to_vec(), aux_eager.tensor("pred").unwrap().to_vec());
///     assert_eq!(aux.tensor("mean").unwrap().item().unwrap(), 1.5 * i as f32);
///     assert_eq!(grads.tensor("w").unwrap().shape(), &[3, 1]);
/// }
/// assert!(step.is_compiled());
/// ```
pub fn jit_value_and_grad_with_aux<F>(f: F) -> JitValueAndGrad<F>
where
    F: Fn(&Tree, &Tree, &[Key]) -> crate::Result<(Tensor, Tree)>,
{
    JitValueAndGrad {
        f,
        plan: None,
        no_inputs: Tree::new(),
    }
}

/// A compiled `value_and_grad` step; see [`jit_value_and_grad`],
/// [`jit_value_and_grad_with`], [`jit_value_and_grad_with_keys`] and
/// [`jit_value_and_grad_with_aux`].
pub struct JitValueAndGrad<F> {
    f: F,
    /// The replay plan and whether it can be used (`None`: never traced).
    plan: Option<Result<Plan>>,
    /// The inputs of [`call`](JitValueAndGrad::call).
    no_inputs: Tree,
}

impl<F> JitValueAndGrad<F>
where
    F: Fn(&Tree, &Tree) -> crate::Result<Tensor>,
{
    /// The value of `f(params)` and its gradient with respect to every
    /// tensor of `params`, in the same structure (with no inputs).
    ///
    /// Fails as [`value_and_grad`](super::value_and_grad) does.
    pub fn call(&mut self, params: &Tree) -> crate::Result<(Tensor, Tree)> {
        let inputs = std::mem::take(&mut self.no_inputs);
        let result = self.call_with(params, &inputs);
        self.no_inputs = inputs;
        result
    }

    /// The value of `f(params, inputs)` and its gradient with respect to
    /// every tensor of `params` (not `inputs`), in the structure of
    /// `params`.
    ///
    /// Fails as [`value_and_grad`](super::value_and_grad) does.
    pub fn call_with(&mut self, params: &Tree, inputs: &Tree) -> crate::Result<(Tensor, Tree)> {
        let f = &self.f;
        let f = |p: &Tree, i: &Tree, _: &[Key]| Ok((f(p, i)?, Tree::new()));
        compiled_call(&mut self.plan, f, params, inputs, None, &mut None)
    }
}

impl<F> JitValueAndGrad<F>
where
    F: Fn(&Tree, &Tree, &[Key]) -> crate::Result<Tensor>,
{
    /// The value of `f(params, inputs, keys)` and its gradient with respect
    /// to every tensor of `params`, for a step made by
    /// [`jit_value_and_grad_with_keys`]: the keys are arguments of the
    /// compiled step, so random numbers drawn inside from keys that
    /// `make_rng` derives from them are drawn again on every call.
    ///
    /// Fails as [`value_and_grad`](super::value_and_grad) does.
    pub fn call_with_keys(
        &mut self,
        params: &Tree,
        inputs: &Tree,
        keys: &[Key],
    ) -> crate::Result<(Tensor, Tree)> {
        let f = |p: &Tree, i: &Tree, k: &[Key]| Ok(((self.f)(p, i, k)?, Tree::new()));
        compiled_call(&mut self.plan, f, params, inputs, Some(keys), &mut None)
    }
}

impl<F> JitValueAndGrad<F>
where
    F: Fn(&Tree, &Tree, &[Key]) -> crate::Result<(Tensor, Tree)>,
{
    /// The value of `f(params, inputs, keys)`, its auxiliary outputs and
    /// its gradient with respect to every tensor of `params`, for a step
    /// made by [`jit_value_and_grad_with_aux`]: `((loss, aux), grads)`.
    ///
    /// Fails as [`value_and_grad_with_aux`](super::value_and_grad_with_aux)
    /// does.
    pub fn call_with_aux(
        &mut self,
        params: &Tree,
        inputs: &Tree,
        keys: &[Key],
    ) -> crate::Result<((Tensor, Tree), Tree)> {
        let mut aux = None;
        let (loss, grads) = compiled_call(
            &mut self.plan,
            &self.f,
            params,
            inputs,
            Some(keys),
            &mut aux,
        )?;
        Ok(((loss, aux.unwrap_or_default()), grads))
    }
}

impl<F> JitValueAndGrad<F> {
    /// Whether the last trace could be compiled (later calls with the same
    /// shapes replay it); `false` before the first call.
    pub fn is_compiled(&self) -> bool {
        matches!(self.plan, Some(Ok(_)))
    }
}

/// One call of a compiled step: a replay of `plan` when it fits, else a
/// trace of `f` (which plans the next replays). `keys`: the step's key
/// arguments, for a step with keys. The auxiliary outputs go to `aux`
/// (left `None` when there are none), out of the way of the result, which
/// is moved through every call.
fn compiled_call(
    plan: &mut Option<Result<Plan>>,
    f: impl Fn(&Tree, &Tree, &[Key]) -> crate::Result<(Tensor, Tree)>,
    params: &Tree,
    inputs: &Tree,
    keys: Option<&[Key]>,
    aux_out: &mut Option<Tree>,
) -> crate::Result<(Tensor, Tree)> {
    // Inside another differentiation a replay would hand back constants.
    let traced_in = |t: &Tree| t.leaves().iter().any(Tensor::is_traced);
    if traced_in(params) || traced_in(inputs) {
        return Err(super::grad::nested_error("jit_value_and_grad").into());
    }
    let keys_given = keys.unwrap_or(&[]);
    // Under debug_nans every call runs eagerly, op by op, so that the
    // operation producing a NaN can be named (as JAX re-runs a jitted
    // function de-optimized).
    if let (Some(Ok(p)), false) = (&mut *plan, debug_nans()) {
        if p.accepts(params, inputs, keys_given.len()) {
            return p.run(params, inputs, keys_given, aux_out);
        }
    }
    // Trace: run eagerly, keeping the tape to plan the replays, as one
    // compiled computation (`jax.jit` of the whole step): forward and
    // backward round as XLA rounds them inside it, and the replay repeats
    // what the trace recorded.
    let _region = CompiledRegion::enter();
    let _stale = check_nans();
    let tape = Tape::new();
    let (traced, ids) = trace_on(&tape, params);
    let (traced_inputs, _) = trace_on(&tape, inputs);
    // The inputs' int32 arrays are the step's integer arguments.
    let run = || {
        let call = || f(&traced, &traced_inputs, keys_given);
        super::int_inputs::tracing(inputs.arrays(), call)
    };
    let ((result, int_args), rngs) = match keys {
        Some(keys) => {
            let (result, trace) = super::sampled::tracing(&tape, keys, run);
            (result, Some(trace))
        }
        None => (run(), None),
    };
    tape.close();
    let nan = check_nans();
    let (out, aux) = result?;
    nan?;
    if out.ndim() != 0 {
        return Err(TensorError::NotScalar {
            shape: out.shape().to_vec(),
        }
        .into());
    }
    let seed = ndarray::ArrayD::ones(IxDyn(&[]));
    let grads = pull(&tape, &out, seed, params, &ids)?;
    check_gradients(&grads)?;
    // A function that read traced values may branch on them, and one that
    // drew random numbers the replay cannot draw again would replay stale
    // ones: either runs eagerly on every call rather than replaying.
    *plan = Some(if tape.was_read() {
        Err(unsupported(
            "the function reads traced values; it runs eagerly on each call".into(),
        ))
    } else if rngs.as_ref().is_some_and(|t| !t.replayable()) {
        Err(unsupported(
            "the function draws random numbers from keys it does not derive from its key \
             arguments with make_rng, or uses such keys other than through \
             Tensor::sampled; it runs eagerly on each call"
                .into(),
        ))
    } else {
        let samplers = rngs.map(|t| t.samplers).unwrap_or_default();
        let leaves = params.leaves().len() + inputs.leaves().len();
        aux_outputs(&tape, leaves, &aux).and_then(|outs| {
            let read: Vec<usize> = outs.iter().filter_map(Out::node).collect();
            let plan = Plan::new(
                &tape,
                &out,
                params,
                inputs,
                samplers,
                keys_given.len(),
                &read,
                false,
            )?;
            Ok(plan.with_int_args(int_args).with_aux(&aux, outs))
        })
    });
    // The auxiliary outputs traced here, as constants (others as they are).
    let aux = aux
        .with_leaves(aux.leaves().iter().map(|t| off_tape(t, &tape)).collect())
        .expect("one tensor per leaf");
    *aux_out = Some(aux);
    Ok((detach(&out), grads))
}

/// Where one output of a compiled program comes from, besides what it
/// differentiates.
pub(crate) enum Out {
    /// An operation's value, of this shape.
    Node(usize, Vec<usize>),
    /// Argument (leaf) `i`, passed through.
    Leaf(usize),
    /// A value that depends on no argument, captured when traced.
    Const(Tensor),
}

impl Out {
    /// Where `t`, a result of a trace on `tape` whose first `leaves` nodes
    /// are the arguments, comes from; `None` for a tensor traced by another
    /// transformation.
    pub(crate) fn of(t: &Tensor, tape: &Arc<Tape>, leaves: usize) -> Option<Out> {
        match &t.tracer {
            Some(tr) if !Arc::ptr_eq(&tr.tape, tape) => None,
            Some(tr) if tr.node < leaves => Some(Out::Leaf(tr.node)),
            Some(tr) => Some(Out::Node(tr.node, t.shape().to_vec())),
            None => Some(Out::Const(t.clone())),
        }
    }

    /// The operation this output reads, if it is one.
    pub(crate) fn node(&self) -> Option<usize> {
        match self {
            Out::Node(id, _) => Some(*id),
            _ => None,
        }
    }

    /// This output after a replay: node values from `value`, arguments
    /// from `arg`.
    pub(crate) fn value<'a>(
        &self,
        value: impl FnOnce(usize) -> &'a [f32],
        arg: impl FnOnce(usize) -> &'a Tensor,
    ) -> Tensor {
        match self {
            Out::Node(id, shape) => Tensor::constant(
                ArcArray::from_shape_vec(IxDyn(shape), value(*id).to_vec()).expect("planned shape"),
            ),
            Out::Leaf(i) => arg(*i).clone(),
            Out::Const(t) => t.clone(),
        }
    }
}

/// Whether `t` is traced on `tape`.
pub(crate) fn on_tape(t: &Tensor, tape: &Arc<Tape>) -> bool {
    t.tracer
        .as_ref()
        .is_some_and(|tr| Arc::ptr_eq(&tr.tape, tape))
}

/// `t` detached from `tape` if traced on it, else as it is (a traced
/// call's outputs handed back to the caller).
pub(crate) fn off_tape(t: &Tensor, tape: &Arc<Tape>) -> Tensor {
    if on_tape(t, tape) {
        detach(t)
    } else {
        t.clone()
    }
}

/// Where each tensor of a step's auxiliary outputs comes from (the first
/// `leaves` nodes of `tape` being the arguments); an error (the step then
/// runs eagerly) for a tensor traced by another transformation.
fn aux_outputs(tape: &Arc<Tape>, leaves: usize, aux: &Tree) -> Result<Vec<Out>> {
    aux.leaves()
        .iter()
        .map(|t| {
            Out::of(t, tape, leaves).ok_or_else(|| {
                unsupported(
                    "an auxiliary output is traced by another transformation; the function \
                     runs eagerly on each call"
                        .into(),
                )
            })
        })
        .collect()
}

impl<F> std::fmt::Debug for JitValueAndGrad<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JitValueAndGrad")
            .field("compiled", &matches!(self.plan, Some(Ok(_))))
            .finish()
    }
}

/// Where an operation's input comes from.
#[derive(Clone, Copy, Debug)]
enum Src {
    /// A node: a leaf (`< leaves`) or an earlier operation.
    Node(usize),
    /// A constant captured at trace time.
    Const(usize),
}

/// The most inputs a replayed operation may have (an LSTM step's state
/// update has five; the built-in operations at most three).
const MAX_INPUTS: usize = 5;

/// One operation of the replay.
struct Step {
    kind: OpKind,
    inputs: SmallVec<[Src; 2]>,
    in_shapes: SmallVec<[Vec<usize>; 2]>,
    shape: Vec<usize>,
    /// For a product: how its forward and its two cotangents are summed,
    /// decided when planned (see [`DotRoute`]), and for the small ones
    /// how each output is summed from gathered operands (see
    /// [`DotRoute::tiny_sum`]).
    routes: Option<[DotRoute; 3]>,
    sums: [Option<TinySum>; 3],
    /// For a product: the strides and shapes of the three (see
    /// [`dot_shapes`]).
    dots: [DotCall; 3],
    /// For a select: its picked branch is input 1 scaled so (a dropout's
    /// scaling folded in, see [`fold_scalings`]).
    scale: Option<Scaling>,
    /// For a select: its picked branch is the `relu` of input 1 (before
    /// any scaling; folded in, see [`fold_scalings`]).
    pre_relu: bool,
    /// A step folded into the select that reads it: not computed.
    folded: bool,
    /// `inputs` resolved for the replay's loops (set once the plan's
    /// steps are final), and a binary operation's broadcast pattern.
    ins: [In; MAX_INPUTS],
    /// How many of `ins` the step reads (the rest are [`In::Empty`]): the
    /// replay looks up only those.
    arity: usize,
    zip: Zip,
    /// For a keep-mask draw: the byte buffer it is drawn into (its float
    /// array is not written); for a select: the byte buffer holding its
    /// mask (see [`byte_masks`]).
    bytes: Option<usize>,
    /// An [`OpKind::Kernel`]'s computations.
    kernel: Option<Arc<dyn Kernel>>,
    /// For an [`OpKind::ProductSum`]: how its product's factors (inputs 1
    /// and 2 of `ins`, see [`fuse_products`]) meet.
    factors: Option<Zip>,
    /// For a product recorded in a compiled region with a contraction of
    /// length 1 for this input's cotangent (see `FusedOuter`): that input,
    /// whose cotangent, when it is added to an earlier one, is fused into
    /// the addition as eager backpropagation fuses it.
    fused_outer: Option<usize>,
    /// Whether the step keeps its input cotangents as products up to their
    /// accumulation (a compiled sigmoid, see `ProductCotangents`).
    products: bool,
}

/// The shapes (`m, k, n`) and strides of a product's forward (`a @ b`)
/// and of its cotangents `g @ b^T` and `a^T @ g`, in [`backward`]'s
/// operand order.
fn dot_shapes(m: usize, k: usize, n: usize) -> [DotCall; 3] {
    [
        ((k, 1), (n, 1), (m, k, n)),
        ((n, 1), (1, n), (m, n, k)),
        ((1, k), (n, 1), (k, m, n)),
    ]
}

/// A scaling by a scalar constant that a select applies to its picked
/// branch (see [`fold_scalings`]).
#[derive(Clone, Copy, Debug)]
enum Scaling {
    /// `x * r` (a scaling recorded as a product).
    Mul(f32),
    /// `x / c` (recorded as a division by a constant).
    Div(f32),
}

impl Scaling {
    /// The scaled value, as the scaling's own step computes it.
    #[inline(always)]
    fn apply(self, x: f32) -> f32 {
        match self {
            Scaling::Mul(r) => mul_op(x, r),
            Scaling::Div(c) => div_op(x, c),
        }
    }

    /// The factor of the scaling's cotangent rule (`g * y`, `g * (1 / y)`).
    fn factor(self) -> f32 {
        match self {
            Scaling::Mul(r) => r,
            Scaling::Div(c) => 1.0 / c,
        }
    }
}

/// Strides of the left and right operands and the product's `(m, k, n)`.
type DotCall = ((usize, usize), (usize, usize), (usize, usize, usize));

/// A compiled tape with its buffers.
pub(crate) struct Plan {
    /// The parameters' structure (with placeholder leaves), the inputs'
    /// structure, and the shapes of both, as traced.
    template: Tree,
    input_template: Tree,
    shapes: Vec<Vec<usize>>,
    /// The structures of the parameters and inputs last accepted: trees
    /// sharing them (as a training loop's do, call after call) need no
    /// comparison of keys.
    accepted: Option<(Structure, Structure)>,
    /// Parameter leaves are nodes `0..params`, input leaves
    /// `params..leaves`; the loss (the value differentiated) is node
    /// `loss_node`.
    params: usize,
    leaves: usize,
    loss_node: usize,
    /// Steps for nodes `leaves..=root`.
    steps: Vec<Step>,
    consts: Vec<Vec<f32>>,
    /// Per node: the forward value and the gradient (both empty for
    /// leaves).
    values: Vec<Vec<f32>>,
    grads: Vec<Vec<f32>>,
    /// The backward pass, in the eager order (see [`backward_edges`]), and
    /// the parameters no gradient reaches (zeros).
    edges: Vec<Edge>,
    untouched: Vec<usize>,
    /// Row-major copies of parameters that are not row-major.
    leaf_copies: Vec<Vec<f32>>,
    /// Output buffers handed out as tensors, reused when no longer shared.
    loss: ArcArray<f32, IxDyn>,
    out_grads: Vec<ArcArray<f32, IxDyn>>,
    tmp: Vec<f32>,
    scratch: Scratch,
    /// The keep masks drawn as bytes, one `0` / `1` per element.
    masks: Vec<Vec<u8>>,
    /// [`exact_matmul_limit`] when the routes were decided.
    limit: usize,
    /// The random draws repeated on every call, and how many key
    /// arguments the step takes.
    samplers: Vec<Sampler>,
    keys: usize,
    /// Per array of the inputs: whether it is an integer argument read on
    /// every call (else its traced values are baked in, and only calls
    /// passing the same values replay).
    int_args: Vec<bool>,
    /// The label operands that are integer arguments.
    labels: Vec<LabelArg>,
    /// The auxiliary outputs: their structure (placeholder leaves) and
    /// where each comes from.
    aux_template: Tree,
    aux: Vec<Out>,
}

/// A [`OpKind::LabelLogits`] step's labels that are integer array `array`
/// of the inputs: copied (checked, as `f32`) into constant `konst` before
/// each replay.
struct LabelArg {
    konst: usize,
    array: usize,
    /// The logits' shape, for the error naming a label out of range.
    logits: Vec<usize>,
}

/// Buffers the replay reuses between calls, and whether the planned
/// product routes hold for this call.
#[derive(Default)]
struct Scratch {
    routes: bool,
    packed: Vec<f32>,
    rows: Vec<f32>,
    /// The kernels' scratch, sized for the largest when planned (see
    /// [`Kernel::scratch_len`]).
    kernel: Vec<f32>,
}

fn unsupported(message: String) -> TensorError {
    TensorError::Argument {
        op: "jit_value_and_grad",
        message,
    }
}

impl Plan {
    /// Plans the replay of `tape` up to `out` and the nodes `outputs`
    /// (operations the caller reads besides `out`), or says why it cannot.
    /// `forward_only`: a forward pass only (this admits the steps that have
    /// no replayed backward); else a training step, differentiating `out`
    /// (steps that no gradient of it passes through need no backward).
    #[allow(clippy::too_many_arguments)]
    fn new(
        tape: &Arc<Tape>,
        out: &Tensor,
        params: &Tree,
        inputs: &Tree,
        samplers: Vec<Sampler>,
        keys: usize,
        outputs: &[usize],
        forward_only: bool,
    ) -> Result<Plan> {
        let n_params = params.leaves().len();
        let leaves = n_params + inputs.leaves().len();
        let loss = match &out.tracer {
            Some(tr) if Arc::ptr_eq(&tr.tape, tape) && tr.node >= leaves => tr.node,
            _ => {
                return Err(unsupported(
                    "the result does not depend on an operation".into(),
                ))
            }
        };
        // The replay runs up to the last node anyone reads.
        let root = outputs.iter().copied().fold(loss, usize::max);
        let nodes = tape.nodes();
        // The nodes the loss depends on: only their steps need a backward.
        let mut ancestor = vec![false; root + 1];
        ancestor[loss] = !forward_only;
        for id in (leaves..=loss).rev() {
            if ancestor[id] {
                for i in nodes[id].inputs.iter().flatten() {
                    ancestor[*i] = true;
                }
            }
        }
        let mut shapes: Vec<Vec<usize>> = params
            .leaves()
            .iter()
            .chain(inputs.leaves())
            .map(|t| t.shape().to_vec())
            .collect();
        let mut consts = Vec::new();
        let mut steps = Vec::with_capacity(root + 1 - leaves);
        let mut differentiable: Vec<bool> = (0..leaves).map(|i| i < n_params).collect();
        let mut labels = Vec::new();
        for node in &nodes[leaves..=root] {
            if node.deferred().is_some() {
                // A cotangent fused into the next one reaching its input:
                // the replay's accumulation has no such step.
                return Err(unsupported(format!(
                    "{:?} defers a cotangent product",
                    node.kind
                )));
            }
            if node.inputs.len() > MAX_INPUTS {
                return Err(unsupported(format!(
                    "{:?} of {} inputs cannot be replayed",
                    node.kind,
                    node.inputs.len()
                )));
            }
            let mut inputs = SmallVec::new();
            let mut in_shapes: SmallVec<[Vec<usize>; 2]> = SmallVec::new();
            for (k, id) in node.inputs.iter().enumerate() {
                match id {
                    Some(i) => {
                        inputs.push(Src::Node(*i));
                        in_shapes.push(shapes[*i].clone());
                    }
                    None => {
                        let c = node.consts().get(k).cloned().flatten().ok_or_else(|| {
                            unsupported(format!("{:?} cannot be replayed", node.kind))
                        })?;
                        in_shapes.push(c.shape().to_vec());
                        inputs.push(Src::Const(consts.len()));
                        consts.push(c.iter().copied().collect::<Vec<f32>>());
                    }
                }
            }
            let backward_less = matches!(node.kind, OpKind::BatchNorm(_));
            let id = leaves + steps.len();
            let needs_backward =
                ancestor[id] && inputs.iter().any(|i| is_differentiable(i, &differentiable));
            if backward_less && needs_backward {
                return Err(unsupported(format!(
                    "{:?} is replayed forward only",
                    node.kind
                )));
            }
            let shape = match node.kind {
                OpKind::Other => return Err(unsupported("an operation cannot be replayed".into())),
                OpKind::SumAxes { axes, keepdims, .. }
                | OpKind::ProductSumAxes { axes, keepdims, .. } => {
                    let s = &in_shapes[0];
                    if s.len() < 32 && axes >> s.len() != 0 {
                        return Err(unsupported(format!("sum over axes {axes:#b} of {s:?}")));
                    }
                    s.iter()
                        .enumerate()
                        .filter_map(|(a, &d)| match axes & (1 << a) {
                            0 => Some(d),
                            _ => keepdims.then_some(1),
                        })
                        .collect()
                }
                OpKind::Reshape(dims) => {
                    let out = dims.shape();
                    let size = |s: &[usize]| s.iter().product::<usize>();
                    if size(&out) != size(&in_shapes[0]) {
                        return Err(unsupported(format!(
                            "reshape of {:?} to {out:?}",
                            in_shapes[0]
                        )));
                    }
                    out
                }
                OpKind::Neg | OpKind::Unary(..) => in_shapes[0].clone(),
                OpKind::BatchNorm(bn) => bn.shape(&in_shapes[0]),
                OpKind::Kernel(name) => match node.kernel() {
                    Some(kernel) => kernel.shape().to_vec(),
                    None => return Err(unsupported(format!("{name} was not kept for replay"))),
                },
                OpKind::Add
                | OpKind::Sub
                | OpKind::Mul
                | OpKind::Div
                | OpKind::DivTraced
                | OpKind::Maximum
                | OpKind::Compare(_) => {
                    let (a, b) = (&in_shapes[0], &in_shapes[1]);
                    let s = broadcast_shapes_for("jit_value_and_grad", a, b)?;
                    // A column (`[..., 1]`) right operand of a sum or
                    // difference, when no gradient flows into it (the
                    // cross-entropy's shift).
                    let column = matches!(node.kind, OpKind::Add | OpKind::Sub)
                        && *a == s
                        && is_column(b, &s)
                        && !matches!(inputs[1], Src::Node(i) if differentiable[i]);
                    let ok = a == b
                        || (*a == s && is_trailing(b, &s))
                        || (*b == s && is_trailing(a, &s))
                        || column;
                    if !ok || s.iter().product::<usize>() == 0 {
                        return Err(unsupported(format!(
                            "broadcasting {a:?} with {b:?} cannot be replayed"
                        )));
                    }
                    s
                }
                OpKind::Matmul => vec![in_shapes[0][0], in_shapes[1][1]],
                OpKind::SumAll | OpKind::MeanAll => vec![],
                OpKind::ProductSum { keepdims, .. } => match keepdims {
                    true => vec![1; in_shapes[0].len()],
                    false => vec![],
                },
                OpKind::SumLast { keepdims, .. } => {
                    let s = &in_shapes[0];
                    let mut out = s[..s.len() - 1].to_vec();
                    if keepdims {
                        out.push(1);
                    }
                    out
                }
                OpKind::SoftmaxLast(_) | OpKind::LogSoftmaxLast(_) => in_shapes[0].clone(),
                OpKind::Sampled(i) => samplers[i].shape.clone(),
                OpKind::StopGradient => in_shapes[0].clone(),
                OpKind::Squeeze(axis) => {
                    let mut s = in_shapes[0].clone();
                    s.remove(axis);
                    s
                }
                OpKind::MaxLastStopped | OpKind::LabelLogits(_) => {
                    let s = &in_shapes[0];
                    // Labels are kept as f32, exact below 2^24.
                    let classes = s.last().copied().unwrap_or(0);
                    if classes == 0 || classes > cross_entropy::MAX_REPLAYED_CLASSES {
                        return Err(unsupported(format!(
                            "{:?} of shape {s:?} cannot be replayed",
                            node.kind
                        )));
                    }
                    let mut out = s[..s.len() - 1].to_vec();
                    if node.kind == OpKind::MaxLastStopped {
                        out.push(1);
                    }
                    out
                }
                OpKind::Select => {
                    // The mask and the picked-where-true branch of the
                    // output's shape, the other branch too or a scalar (a
                    // dropout); the scalar branch's gradient, a sum, is
                    // not replayed.
                    let shape = broadcast_shapes_for("select", &in_shapes[0], &in_shapes[1])?;
                    let shape = broadcast_shapes_for("select", &shape, &in_shapes[2])?;
                    let scalar_traced = in_shapes[2].is_empty() && node.inputs[2].is_some();
                    let ok = in_shapes[0] == shape
                        && in_shapes[1] == shape
                        && (in_shapes[2] == shape || in_shapes[2].is_empty())
                        && !scalar_traced;
                    if !ok {
                        return Err(unsupported(format!(
                            "select with shapes {:?} cannot be replayed",
                            in_shapes
                        )));
                    }
                    shape
                }
            };
            if let (OpKind::LabelLogits(Some(array)), Some(Src::Const(konst))) =
                (node.kind, inputs.get(1))
            {
                labels.push(LabelArg {
                    konst: *konst,
                    array,
                    logits: in_shapes[0].clone(),
                });
            }
            differentiable.push(match node.kind {
                OpKind::Sampled(_)
                | OpKind::MaxLastStopped
                | OpKind::StopGradient
                | OpKind::Compare(_) => false,
                // The mask gets no gradient.
                OpKind::Select => inputs[1..]
                    .iter()
                    .any(|i| is_differentiable(i, &differentiable)),
                // Nor do the labels.
                OpKind::LabelLogits(_) => is_differentiable(&inputs[0], &differentiable),
                _ => inputs.iter().any(|i| is_differentiable(i, &differentiable)),
            });
            shapes.push(shape.clone());
            let routes = matches!(node.kind, OpKind::Matmul).then(|| {
                dot_shapes(in_shapes[0][0], in_shapes[0][1], shape[1])
                    .map(|(sa, sb, mkn)| DotRoute::new(sa, sb, mkn, (1, 1)))
            });
            let (sums, dots) = match (&routes, node.kind) {
                (Some(routes), OpKind::Matmul) => {
                    let dots = dot_shapes(in_shapes[0][0], in_shapes[0][1], shape[1]);
                    ([0, 1, 2].map(|w| routes[w].tiny_sum(dots[w].2)), dots)
                }
                _ => ([None; 3], [((0, 0), (0, 0), (0, 0, 0)); 3]),
            };
            let zip = Zip::new(&in_shapes, &shape);
            steps.push(Step {
                kind: node.kind,
                inputs,
                in_shapes,
                shape,
                routes,
                sums,
                dots,
                scale: None,
                pre_relu: false,
                folded: false,
                ins: [In::Empty; MAX_INPUTS],
                arity: 0,
                zip,
                bytes: None,
                kernel: node.kernel().cloned(),
                factors: None,
                fused_outer: node.fused().map(|f| f.input),
                products: node.products().is_some(),
            });
        }
        drop(nodes);
        let (mut edges, mut untouched) = (Vec::new(), Vec::new());
        // What the caller reads (the last step among them: the replay ends
        // at the last node read) is never folded or drawn as bytes.
        let mut read = outputs.to_vec();
        read.push(loss);
        if !forward_only {
            fold_scalings(&mut steps, &consts, leaves, &read);
        }
        let masks = byte_masks(&mut steps, &samplers, leaves, &read);
        if !forward_only {
            (edges, untouched) = backward_edges(&steps, &differentiable, leaves, n_params, loss);
            fusions::plan_fusions(&mut edges, &steps, &shapes, leaves)?;
        }
        for step in steps.iter_mut() {
            step.ins = std::array::from_fn(|k| In::of(step.inputs.get(k), leaves));
        }
        fuse_products(&mut steps, leaves)?;
        for step in steps.iter_mut() {
            step.arity = step
                .ins
                .iter()
                .rposition(|i| *i != In::Empty)
                .map_or(0, |k| k + 1);
        }
        let size = |s: &[usize]| s.iter().product::<usize>();
        // Masks drawn as bytes have no float array.
        let values = shapes
            .iter()
            .enumerate()
            .map(|(i, s)| {
                if i < leaves || is_byte_draw(&steps[i - leaves]) {
                    Vec::new()
                } else {
                    vec![0.0; size(s)]
                }
            })
            .collect();
        // Parameter gradients live in `out_grads`; inputs get none.
        let grads = shapes
            .iter()
            .enumerate()
            .map(|(i, s)| {
                if i < leaves {
                    Vec::new()
                } else {
                    vec![0.0; size(s)]
                }
            })
            .collect();
        let out_grads = shapes[..n_params]
            .iter()
            .map(|s| ArcArray::zeros(IxDyn(s)))
            .collect();
        let kernel_scratch = steps
            .iter()
            .filter_map(|s| s.kernel.as_ref().map(|k| k.scratch_len()))
            .max()
            .unwrap_or(0);
        Ok(Plan {
            template: params
                .with_leaves(vec![Tensor::scalar(0.0); n_params])
                .expect("one placeholder per leaf"),
            input_template: inputs
                .with_leaves(vec![Tensor::scalar(0.0); leaves - n_params])
                .expect("one placeholder per leaf"),
            shapes: shapes[..leaves].to_vec(),
            accepted: None,
            params: n_params,
            leaves,
            loss_node: loss,
            steps,
            consts,
            values,
            grads,
            edges,
            untouched,
            leaf_copies: vec![Vec::new(); leaves],
            loss: ArcArray::zeros(IxDyn(&[])),
            out_grads,
            tmp: Vec::new(),
            scratch: Scratch {
                kernel: vec![0.0; kernel_scratch],
                ..Scratch::default()
            },
            masks,
            limit: exact_matmul_limit(),
            samplers,
            keys,
            int_args: Vec::new(),
            labels,
            aux_template: Tree::new(),
            aux: Vec::new(),
        })
    }

    /// The plan returning `outs`, in the structure of `aux`, besides the
    /// loss and gradients.
    fn with_aux(mut self, aux: &Tree, outs: Vec<Out>) -> Plan {
        self.aux_template = aux
            .with_leaves(vec![Tensor::scalar(0.0); outs.len()])
            .expect("one placeholder per leaf");
        self.aux = outs;
        self
    }

    /// The plan with `int_args` (per array of the inputs: whether it is an
    /// integer argument). A label operand whose array is not one (a trace
    /// that consumed it no longer) stays baked in.
    fn with_int_args(mut self, int_args: Vec<bool>) -> Plan {
        self.labels.retain(|l| int_args.get(l.array) == Some(&true));
        self.int_args = int_args;
        self
    }

    /// Whether `params` and `inputs` have the traced structures and shapes.
    fn accepts(&mut self, params: &Tree, inputs: &Tree, keys: usize) -> bool {
        let known = self
            .accepted
            .as_ref()
            .is_some_and(|(p, i)| p.is_of(params) && i.is_of(inputs));
        let structured = known
            || (params.same_structure(&self.template)
                && inputs.same_structure(&self.input_template));
        let fits = keys == self.keys
            && structured
            && params
                .leaves()
                .iter()
                .chain(inputs.leaves())
                .zip(&self.shapes)
                .all(|(a, s)| same_dims(a.shape(), s))
            && self.accepts_arrays(inputs);
        if fits && !known {
            self.accepted = Some((params.structure(), inputs.structure()));
        }
        fits
    }

    /// Whether the inputs' arrays fit: integer arguments of the traced
    /// dtype and shape, other arrays equal to the traced ones (baked in).
    fn accepts_arrays(&self, inputs: &Tree) -> bool {
        let traced = self.input_template.arrays();
        inputs.arrays().len() == traced.len()
            && inputs
                .arrays()
                .iter()
                .zip(traced)
                .zip(&self.int_args)
                .all(|((a, t), &arg)| {
                    if arg {
                        a.dtype() == t.dtype() && a.shape() == t.shape()
                    } else {
                        a == t
                    }
                })
    }

    /// Copies this call's integer labels into their constants, checking
    /// that each is a class of its logits (else the eager loss's error).
    fn read_labels(&mut self, inputs: &Tree) -> Result<()> {
        for arg in &self.labels {
            let values = inputs.arrays()[arg.array]
                .as_i32()
                .expect("an int32 argument (accepts checked)");
            let classes = *arg.logits.last().expect("at least 1-D");
            let dst = &mut self.consts[arg.konst];
            for (d, &l) in dst.iter_mut().zip(values.iter()) {
                if l < 0 || l as usize >= classes {
                    return Err(super::label_out_of_range(l, &arg.logits));
                }
                *d = l as f32;
            }
        }
        Ok(())
    }

    /// Replays forward and backward on `params`, drawing again from
    /// `keys`.
    fn run(
        &mut self,
        params: &Tree,
        inputs: &Tree,
        keys: &[Key],
        aux_out: &mut Option<Tree>,
    ) -> crate::Result<(Tensor, Tree)> {
        self.read_labels(inputs)?;
        let Plan {
            template,
            input_template: _,
            shapes: _,
            accepted: _,
            params: n_params,
            leaves,
            loss_node,
            steps,
            consts,
            values,
            grads,
            edges,
            untouched,
            leaf_copies,
            loss,
            out_grads,
            tmp,
            scratch,
            masks,
            limit,
            samplers,
            keys: _,
            int_args: _,
            labels: _,
            aux_template,
            aux,
        } = self;
        // The routes were decided outside a `vmap` layout and for this
        // limit; otherwise each product decides again.
        scratch.routes = current_layout().is_none() && exact_matmul_limit() == *limit;
        let (n_params, leaves) = (*n_params, *leaves);
        let mut leaf: SmallVec<[&[f32]; 16]> = SmallVec::new();
        let all = params.leaves().iter().chain(inputs.leaves());
        for (t, copy) in all.zip(leaf_copies.iter_mut()) {
            match t.data.as_slice() {
                Some(s) => leaf.push(s),
                None => {
                    copy.clear();
                    copy.extend(t.data.iter().copied());
                    let copy: &Vec<f32> = copy;
                    leaf.push(copy);
                }
            }
        }
        forward_pass(steps, samplers, consts, &leaf, values, masks, keys, scratch)?;
        // Backward, in the eager order. Parameter gradients go straight into
        // the output buffers (copied first only if the caller still holds
        // the previous results).
        let root = *loss_node;
        grads[root][0] = 1.0;
        for e in edges.iter() {
            let step = &steps[e.id - leaves];
            let (before, rest) = grads.split_at_mut(e.id);
            let g: &[f32] = &rest[0];
            let ins = step_inputs(step, &leaf, values, consts);
            let bytes = step.bytes.map(|b| &masks[b][..]);
            let acc: &mut [f32] = if e.target < n_params {
                out_grads[e.target].as_slice_mut().expect("row-major")
            } else {
                &mut before[e.target]
            };
            let bias = e.fused_bias.map(|f| {
                let x: &[f32] = if f.x < leaves {
                    leaf[f.x]
                } else {
                    &values[f.x]
                };
                let c = f.sign * scaled_cotangents::square_scale(rest[f.square - e.id][0]);
                (x, c)
            });
            // (Most cotangents are first ones: tested first.)
            if !e.accumulate {
                if let Some((x, c)) = bias {
                    if scaled_columns::scaled_column_sums(x, c, acc) {
                        continue;
                    }
                }
                backward(step, e.input, g, ins, bytes, &values[e.id], acc, scratch);
                continue;
            }
            if let Some((x, c)) = bias {
                tmp.resize(acc.len(), 0.0);
                if scaled_columns::scaled_column_sums(x, c, tmp) {
                    acc.iter_mut().zip(tmp.iter()).for_each(|(a, &t)| *a += t);
                    continue;
                }
            }
            match e.fusion {
                Fusion::Plain => {
                    tmp.resize(acc.len(), 0.0);
                    backward(step, e.input, g, ins, bytes, &values[e.id], tmp, scratch);
                    acc.iter_mut().zip(tmp.iter()).for_each(|(a, &t)| *a += t);
                }
                Fusion::Outer => {
                    let [a, b, ..] = ins;
                    let (u, w) = if e.input == 0 { (g, b) } else { (a, g) };
                    accumulate_outer(acc, u, w);
                }
                // The sigmoid's cotangent, final since its node was walked.
                Fusion::Sigmoid(s) => add_sigmoid_product(acc, &rest[s - e.id], &values[s]),
            }
        }
        for &l in untouched.iter() {
            out_grads[l].fill(0.0);
        }
        let out_leaves = out_grads
            .iter()
            .map(|buf| Tensor::constant(buf.clone()))
            .collect();
        loss.as_slice_mut().expect("scalar")[0] = values[root][0];
        let grads = template
            .with_leaves(out_leaves)
            .expect("one gradient per leaf");
        // No tree at all when there are no auxiliary outputs (an empty one
        // is an allocation).
        if !aux.is_empty() {
            let all: SmallVec<[&Tensor; 16]> =
                params.leaves().iter().chain(inputs.leaves()).collect();
            let aux_leaves = aux
                .iter()
                .map(|o| o.value(|id| &values[id], |i| all[i]))
                .collect();
            *aux_out = Some(
                aux_template
                    .with_leaves(aux_leaves)
                    .expect("one output per leaf"),
            );
        }
        Ok((Tensor::constant(loss.clone()), grads))
    }
}

/// The forward half of a plan, for compiled modules
/// ([`jit_forward`](super::jit_forward)): the same steps and kernels,
/// without gradients.
impl Plan {
    /// Plans the forward replay of `tape` up to `root`, whose first nodes
    /// are `leaves`' tensors; `keys` key arguments feed `samplers`; the
    /// caller reads the nodes `outputs` (and `root`).
    pub(crate) fn forward_only(
        tape: &Arc<Tape>,
        root: &Tensor,
        leaves: &Tree,
        samplers: Vec<Sampler>,
        keys: usize,
        outputs: &[usize],
    ) -> Result<Plan> {
        let mut plan = Plan::new(
            tape,
            root,
            &Tree::new(),
            leaves,
            samplers,
            keys,
            outputs,
            true,
        )?;
        // Nothing is differentiated: free the gradient buffers.
        plan.grads = Vec::new();
        Ok(plan)
    }

    /// Replays the forward pass on `leaves` (in the planned order and
    /// shapes), drawing again from `keys`; read results with
    /// [`value`](Plan::value).
    pub(crate) fn run_forward(&mut self, leaves: &[Tensor], keys: &[Key]) -> crate::Result<()> {
        self.scratch.routes = current_layout().is_none() && exact_matmul_limit() == self.limit;
        for (t, copy) in leaves.iter().zip(self.leaf_copies.iter_mut()) {
            if t.data.as_slice().is_none() {
                copy.clear();
                copy.extend(t.data.iter().copied());
            }
        }
        let leaf: SmallVec<[&[f32]; 16]> = leaves
            .iter()
            .zip(&self.leaf_copies)
            .map(|(t, copy)| t.data.as_slice().unwrap_or(copy))
            .collect();
        forward_pass(
            &self.steps,
            &self.samplers,
            &self.consts,
            &leaf,
            &mut self.values,
            &mut self.masks,
            keys,
            &mut self.scratch,
        )
    }

    /// The value of node `node` (an operation, not a leaf) after
    /// [`run_forward`](Plan::run_forward), row-major.
    pub(crate) fn value(&self, node: usize) -> &[f32] {
        &self.values[node]
    }

    /// How many keep masks the plan draws as bytes.
    #[cfg(test)]
    pub(crate) fn byte_mask_count(&self) -> usize {
        self.masks.len()
    }
}

/// One call's forward pass, shared by training steps and compiled modules:
/// draws this call's random numbers from `keys`, then computes every step
/// (but those folded into a select) into `values`, whose first
/// `leaf.len()` entries stand for the leaves, whose values are `leaf`
/// (keep masks drawn as bytes go to `masks`).
#[allow(clippy::too_many_arguments)]
fn forward_pass(
    steps: &[Step],
    samplers: &[Sampler],
    consts: &[Vec<f32>],
    leaf: &[&[f32]],
    values: &mut [Vec<f32>],
    masks: &mut [Vec<u8>],
    keys: &[Key],
    scratch: &mut Scratch,
) -> crate::Result<()> {
    let leaves = leaf.len();
    // A step with no draws skips the pass looking for them.
    if !samplers.is_empty() {
        for (s, step) in steps.iter().enumerate() {
            if let (OpKind::Sampled(i), None) = (step.kind, step.bytes) {
                values[leaves + s] = draw_again(&samplers[i], keys)?;
            }
        }
    }
    // The byte masks together, in the order of their buffers.
    if !masks.is_empty() {
        let drawn = steps
            .iter()
            .filter(|s| is_byte_draw(s))
            .map(|s| match s.kind {
                OpKind::Sampled(i) => &samplers[i],
                _ => unreachable!("a draw"),
            });
        draw_bytes_again(drawn, keys, masks)?;
    }
    let masks: &[Vec<u8>] = masks;
    for (s, step) in steps.iter().enumerate() {
        if step.folded {
            continue;
        }
        let (before, rest) = values.split_at_mut(leaves + s);
        let bytes = step.bytes.map(|b| &masks[b][..]);
        forward(
            step,
            step_inputs(step, leaf, before, consts),
            bytes,
            &mut rest[0],
            scratch,
        );
    }
    Ok(())
}

/// `step`'s input slices, `&[]` past its [`arity`](Step::arity): only the
/// inputs it has are looked up (most steps read one or two of the slots),
/// `values` holding the nodes before it (leaves' entries unused).
#[inline(always)]
fn step_inputs<'a>(
    step: &Step,
    leaf: &[&'a [f32]],
    values: &'a [Vec<f32>],
    consts: &'a [Vec<f32>],
) -> [&'a [f32]; MAX_INPUTS] {
    let mut ins: [&[f32]; MAX_INPUTS] = [&[]; MAX_INPUTS];
    for (slot, src) in ins.iter_mut().zip(&step.ins[..step.arity]) {
        *slot = match *src {
            In::Empty => &[],
            In::Leaf(i) => leaf[i],
            In::Value(i) => &values[i],
            In::Const(c) => &consts[c],
        };
    }
    ins
}

/// Whether two shapes are equal (a loop: shapes are short, and a call to
/// `memcmp` per leaf cost more than comparing).
fn same_dims(a: &[usize], b: &[usize]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// One cotangent of the backward pass: step `id`'s gradient carried to
/// its input `input`, node `target`, written there or (`accumulate`, a
/// later one) added to what is there, fused into it as the trace fused it
/// (`fusion`, see [`fusions::plan_fusions`]).
#[derive(Clone, Copy, Debug)]
struct Edge {
    id: usize,
    input: usize,
    target: usize,
    accumulate: bool,
    /// A bias gradient summed with its scaled cotangent's products fused
    /// in (see `scaled_cotangents`).
    fused_bias: Option<FusedBias>,
    fusion: Fusion,
}

/// The cotangents of the backward pass from the root (node `root`), in
/// the eager order (nodes from the root down, each node's inputs in order),
/// and the parameters (of `0..params`) none reaches. A node's gradient is
/// carried on only if one reached it, and only to inputs a gradient can
/// flow into (not constants, inputs, masks or labels): all known when
/// planned, so a replay walks the list.
fn backward_edges(
    steps: &[Step],
    differentiable: &[bool],
    leaves: usize,
    params: usize,
    root: usize,
) -> (Vec<Edge>, Vec<usize>) {
    let mut reached = vec![false; root + 1];
    reached[root] = true;
    let mut edges = Vec::new();
    for id in (leaves..=root).rev() {
        if !reached[id] {
            continue;
        }
        let step = &steps[id - leaves];
        for (input, src) in step.inputs.iter().enumerate() {
            let Src::Node(target) = *src else {
                continue;
            };
            if (step.kind == OpKind::Select && input == 0) || !differentiable[target] {
                continue;
            }
            edges.push(Edge {
                id,
                input,
                target,
                accumulate: reached[target],
                fused_bias: None,
                fusion: Fusion::Plain,
            });
            reached[target] = true;
        }
    }
    let untouched = (0..params).filter(|&l| !reached[l]).collect();
    let planned: Vec<PlannedEdge> = edges
        .iter()
        .map(|e| PlannedEdge {
            id: e.id,
            input: e.input,
            target: e.target,
        })
        .collect();
    let fused = plan_fused_biases(&planned, |i| {
        let step = steps.get(i.checked_sub(leaves)?)?;
        Some((step.kind, &step.shape[..], &step.in_shapes[..]))
    });
    for (e, f) in edges.iter_mut().zip(fused) {
        e.fused_bias = f;
    }
    (edges, untouched)
}

/// Where a step's input is read from in the replay: nothing (no such
/// input), leaf `i`, the value of node `i` (an operation), or constant
/// `c`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum In {
    Empty,
    Leaf(usize),
    Value(usize),
    Const(usize),
}

impl In {
    /// Where `src` (if any) is read from, the first `leaves` nodes being
    /// leaves.
    fn of(src: Option<&Src>, leaves: usize) -> In {
        match src {
            None => In::Empty,
            Some(&Src::Node(i)) if i < leaves => In::Leaf(i),
            Some(&Src::Node(i)) => In::Value(i),
            Some(&Src::Const(c)) => In::Const(c),
        }
    }
}

/// How a binary step's operands meet (see [`zip_into`]), decided when
/// planned from its shapes.
#[derive(Clone, Copy, Debug)]
enum Zip {
    /// `b` is one value (dropout's scaling).
    Scalar,
    /// Equal lengths.
    Same,
    /// `b` holds one value per row of `a` (rows of this length).
    Column(usize),
    /// `b` repeated along `a`'s leading axes.
    RowsOfA,
    /// `a` repeated along `b`'s leading axes.
    RowsOfB,
}

impl Zip {
    /// The pattern of a step with these input shapes and output shape
    /// ([`Zip::Same`] for a step with fewer than two inputs).
    fn new(in_shapes: &[Vec<usize>], shape: &[usize]) -> Zip {
        let [a, b, ..] = in_shapes else {
            return Zip::Same;
        };
        let size = |s: &[usize]| s.iter().product::<usize>();
        let (la, lb, lo) = (size(a), size(b), size(shape));
        if la == lo && lb == 1 {
            Zip::Scalar
        } else if la == lo && lb == lo {
            Zip::Same
        } else if is_column(b, shape) {
            Zip::Column(*shape.last().expect("at least 1-D"))
        } else if a[..] == *shape {
            Zip::RowsOfA
        } else {
            Zip::RowsOfB
        }
    }
}

/// Applies `f` over two operands in one of the replayable broadcast
/// patterns (equal shapes, or one operand repeated along leading axes).
/// Always inlined, so that it runs on the caller's widest vectors (a
/// function of its own is compiled for the baseline's SSE).
#[inline(always)]
fn zip_into(step: &Step, a: &[f32], b: &[f32], out: &mut [f32], f: impl Fn(f32, f32) -> f32) {
    match step.zip {
        Zip::Scalar => {
            // One tight loop.
            let y = b[0];
            for (o, &x) in out.iter_mut().zip(a) {
                *o = f(x, y);
            }
        }
        Zip::Same => {
            for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
                *o = f(x, y);
            }
        }
        Zip::Column(n) => {
            for ((orow, arow), &y) in out.chunks_exact_mut(n).zip(a.chunks_exact(n)).zip(b) {
                for (o, &x) in orow.iter_mut().zip(arow) {
                    *o = f(x, y);
                }
            }
        }
        Zip::RowsOfA => {
            for (orow, arow) in out.chunks_exact_mut(b.len()).zip(a.chunks_exact(b.len())) {
                for ((o, &x), &y) in orow.iter_mut().zip(arow).zip(b) {
                    *o = f(x, y);
                }
            }
        }
        Zip::RowsOfB => {
            for (orow, brow) in out.chunks_exact_mut(a.len()).zip(b.chunks_exact(a.len())) {
                for ((o, &x), &y) in orow.iter_mut().zip(a).zip(brow) {
                    *o = f(x, y);
                }
            }
        }
    }
}

/// Points each [`OpKind::ProductSum`] step at its product's factors: the
/// inputs of the multiply (the input twice for a square) become its inputs
/// 1 and 2 of `ins`, read with the multiply's broadcast pattern. The
/// product is still computed (its backward and other readers need it).
fn fuse_products(steps: &mut [Step], leaves: usize) -> Result<()> {
    for s in 0..steps.len() {
        if !matches!(
            steps[s].kind,
            OpKind::ProductSum { .. } | OpKind::ProductSumAxes { .. }
        ) {
            continue;
        }
        let producer = match steps[s].inputs[0] {
            Src::Node(p) if p >= leaves => &steps[p - leaves],
            _ => return Err(unsupported("a fused sum of no product".into())),
        };
        let (x, y, zip) = match producer.kind {
            OpKind::Mul => (producer.ins[0], producer.ins[1], producer.zip),
            OpKind::Unary(UnaryFn::Square, _) => (producer.ins[0], producer.ins[0], Zip::Same),
            kind => return Err(unsupported(format!("a fused sum of {kind:?}"))),
        };
        let step = &mut steps[s];
        step.ins[1] = x;
        step.ins[2] = y;
        step.factors = Some(zip);
    }
    Ok(())
}

/// The sum of all elements of a product (`product`, of the step's input
/// shape) of factors `x` and `y` fused as XLA fuses it
/// ([`crate::xla::reduce::product_sum`]), reading the factors with the
/// multiply's broadcast pattern; the plain sum of the product where XLA
/// does not fuse them.
#[inline(always)]
fn fused_product_sum(step: &Step, product: &[f32], x: &[f32], y: &[f32]) -> f32 {
    use crate::xla::reduce::{product_sum, ProductLoop};
    let shape = &step.in_shapes[0];
    let broadcast = ProductLoop::default();
    let fused = match step.factors {
        Some(Zip::Same) => {
            // A square reads its one factor once.
            let two_loads = ProductLoop {
                two_loads: !std::ptr::eq(x, y),
                ..broadcast
            };
            product_sum(shape, two_loads, |i| (x[i], y[i]))
        }
        Some(Zip::Scalar) => product_sum(shape, broadcast, |i| (x[i], y[0])),
        Some(Zip::Column(n)) => product_sum(shape, broadcast, |i| (x[i], y[i / n])),
        Some(Zip::RowsOfA) => product_sum(shape, broadcast, |i| (x[i], y[i % y.len()])),
        Some(Zip::RowsOfB) => product_sum(shape, broadcast, |i| (x[i % x.len()], y[i])),
        None => None,
    };
    fused.unwrap_or_else(|| crate::xla::reduce::sum_all(product, shape))
}

/// The sums over the axes in bit set `axes` of a product (`product`, of
/// the step's input shape) of factors `x` and `y`, fused as XLA fuses them
/// ([`crate::xla::reduce_products::product_sums`]), reading the factors
/// with the multiply's broadcast pattern; the plain sums of the product
/// ([`reduce::reduce_sum`]) where XLA does not fuse them. Times the `f32`
/// reciprocal of the count when `mean`. `buf`: see [`reduce::reduce_sum`].
#[inline(always)]
fn fused_product_sums(
    step: &Step,
    axes: u32,
    mean: bool,
    [product, x, y]: [&[f32]; 3],
    out: &mut [f32],
    buf: &mut Vec<f32>,
) {
    use crate::xla::reduce_products::{product_sums, Pair};
    let shape = &step.in_shapes[0];
    // The axes along which a broadcast factor of `len` elements changes:
    // the trailing ones it spans.
    let trailing = |len: usize| {
        let mut spanned = 1;
        (0..shape.len()).rev().fold(0u32, |m, a| {
            if spanned >= len {
                return m;
            }
            spanned *= shape[a];
            m | 1 << a
        })
    };
    let pair = match step.factors {
        _ if step.ins[1] == step.ins[2] => Pair::Square,
        Some(Zip::Same) => Pair::Full,
        Some(Zip::Scalar) => Pair::Broadcast { spread: Some(0) },
        // Every axis but the last.
        Some(Zip::Column(_)) => Pair::Broadcast {
            spread: Some((1 << (shape.len() - 1)) - 1),
        },
        Some(Zip::RowsOfA) => Pair::Broadcast {
            spread: Some(trailing(y.len())),
        },
        Some(Zip::RowsOfB) => Pair::Broadcast {
            spread: Some(trailing(x.len())),
        },
        None => Pair::Broadcast { spread: None },
    };
    let fused = match step.factors {
        Some(Zip::Same) => product_sums(shape, axes, pair, |i| (x[i], y[i]), out),
        Some(Zip::Scalar) => product_sums(shape, axes, pair, |i| (x[i], y[0]), out),
        Some(Zip::Column(n)) => product_sums(shape, axes, pair, |i| (x[i], y[i / n]), out),
        Some(Zip::RowsOfA) => product_sums(shape, axes, pair, |i| (x[i], y[i % y.len()]), out),
        Some(Zip::RowsOfB) => product_sums(shape, axes, pair, |i| (x[i % x.len()], y[i]), out),
        None => false,
    };
    if !fused {
        return reduce::reduce_sum(product, shape, axes, mean, out, buf);
    }
    if mean {
        let n: usize = (0..shape.len())
            .filter(|a| axes & (1 << a) != 0)
            .map(|a| shape[a])
            .product();
        let r = 1.0 / n as f32;
        out.iter_mut().for_each(|v| *v *= r);
    }
}

/// Whether `b` is `shape` with its last axis (of length > 1) reduced to 1.
fn is_column(b: &[usize], shape: &[usize]) -> bool {
    let n = shape.len();
    n > 0 && b.len() == n && b[n - 1] == 1 && shape[n - 1] > 1 && b[..n - 1] == shape[..n - 1]
}

/// Folds into each select the steps that feed its picked branch alone: a
/// scaling by a scalar constant (a product, or a division by a constant:
/// a dropout's `select(mask, x / keep, 0)`, or `x * (1 / keep)` as
/// jitted), and a `relu` before it. The select computes the branch's value
/// where it picks it and hands its cotangent on through the folded steps'
/// rules, so their arrays are neither written nor read (a dropout after a
/// `relu` then costs one pass over the activation forward and one backward,
/// as the `relu` alone). The same operations in the same order; and since
/// the cotangent still reaches the folded steps' input in the same place
/// among that input's other cotangents (no other reader of it lies between
/// the folded step and the select), the same sums.
/// `read`: the nodes the caller reads (the result among them), which are
/// read once more, so never folded.
fn fold_scalings(steps: &mut [Step], consts: &[Vec<f32>], leaves: usize, read: &[usize]) {
    let mut readers = vec![0usize; leaves + steps.len()];
    for &o in read {
        if let Some(r) = readers.get_mut(o) {
            *r += 1;
        }
    }
    for step in steps.iter() {
        for src in &step.inputs {
            if let Src::Node(i) = *src {
                readers[i] += 1;
            }
        }
    }
    for s in 0..steps.len() {
        if steps[s].kind != OpKind::Select {
            continue;
        }
        // The scaling, then the relu under it.
        if let Some((t, x)) = foldable(steps, s, leaves, &readers) {
            let step = &steps[t - leaves];
            let scaling = match (step.kind, step.inputs.get(1)) {
                (OpKind::Mul, Some(&Src::Const(c))) if consts[c].len() == 1 => {
                    Some(Scaling::Mul(consts[c][0]))
                }
                (OpKind::Div, Some(&Src::Const(c))) if consts[c].len() == 1 => {
                    Some(Scaling::Div(consts[c][0]))
                }
                _ => None,
            };
            if let Some(scaling) = scaling {
                steps[s].inputs[1] = Src::Node(x);
                steps[s].scale = Some(scaling);
                steps[t - leaves].folded = true;
            }
        }
        if let Some((t, x)) = foldable(steps, s, leaves, &readers) {
            if matches!(steps[t - leaves].kind, OpKind::Unary(UnaryFn::Relu, _)) {
                steps[s].inputs[1] = Src::Node(x);
                steps[s].pre_relu = true;
                steps[t - leaves].folded = true;
            }
        }
    }
}

/// The step `t` feeding select `s`'s picked branch and its first input
/// `x`, when `t` could fold into the select: an operation of the
/// branch's shape that only the select reads (not the caller), whose input
/// no step between `t` and the select reads.
fn foldable(steps: &[Step], s: usize, leaves: usize, readers: &[usize]) -> Option<(usize, usize)> {
    let Some(&Src::Node(t)) = steps[s].inputs.get(1) else {
        return None;
    };
    if t < leaves || readers[t] != 1 || steps[s].pre_relu {
        return None;
    }
    let step = &steps[t - leaves];
    let Some(&Src::Node(x)) = step.inputs.first() else {
        return None;
    };
    if step.folded || step.in_shapes[0] != step.shape {
        return None;
    }
    let reads_x = |step: &Step| {
        step.inputs
            .iter()
            .any(|src| matches!(*src, Src::Node(i) if i == x))
    };
    (!steps[t - leaves + 1..s].iter().any(reads_x)).then_some((t, x))
}

/// Marks the keep-mask draws (see [`Sampler::keep`]) that only selects
/// read, as their masks (a dropout's), to be drawn as bytes, and those
/// selects to read them so: the float mask, four bytes per element, is
/// then neither written by the draw nor read back forward and backward.
/// Returns the byte buffers, reused by every call. `read`: the nodes the
/// caller reads (the result, a compiled module's outputs, auxiliary
/// outputs).
fn byte_masks(
    steps: &mut [Step],
    samplers: &[Sampler],
    leaves: usize,
    read: &[usize],
) -> Vec<Vec<u8>> {
    let nodes = leaves + steps.len();
    // Per node: whether the caller or a step reads it other than as a
    // select's mask.
    let mut other_use = vec![false; nodes];
    for &o in read {
        if let Some(u) = other_use.get_mut(o) {
            *u = true;
        }
    }
    for step in steps.iter() {
        for (k, src) in step.inputs.iter().enumerate() {
            if let Src::Node(i) = *src {
                other_use[i] |= step.kind != OpKind::Select || k != 0;
            }
        }
    }
    let mut masks = Vec::new();
    let mut buffer = vec![None; nodes];
    for (s, step) in steps.iter_mut().enumerate() {
        if let OpKind::Sampled(i) = step.kind {
            if samplers[i].keep.is_some() && !other_use[leaves + s] {
                buffer[leaves + s] = Some(masks.len());
                step.bytes = Some(masks.len());
                masks.push(vec![0u8; step.shape.iter().product()]);
            }
        }
    }
    for step in steps.iter_mut().filter(|s| s.kind == OpKind::Select) {
        if let Some(&Src::Node(m)) = step.inputs.first() {
            step.bytes = buffer[m];
        }
    }
    masks
}

/// Whether a step is a keep mask drawn as bytes.
fn is_byte_draw(step: &Step) -> bool {
    matches!(step.kind, OpKind::Sampled(_)) && step.bytes.is_some()
}

/// Whether a gradient can reach a parameter through `src`.
fn is_differentiable(src: &Src, differentiable: &[bool]) -> bool {
    matches!(src, Src::Node(i) if differentiable[*i])
}

/// The length of the last axis of a step's (first) input.
fn last(step: &Step) -> usize {
    *step.in_shapes[0].last().expect("at least 1-D")
}

/// The forward computation of one step into `out`, on the widest vectors.
/// `bytes`: a select's mask drawn as bytes (its input 0 is then empty).
fn forward(
    step: &Step,
    ins: [&[f32]; MAX_INPUTS],
    bytes: Option<&[u8]>,
    out: &mut [f32],
    scratch: &mut Scratch,
) {
    if out.len() < WIDE_MIN {
        return forward_body(step, ins, bytes, out, scratch);
    }
    on_widest_vectors(
        #[inline(always)]
        || forward_body(step, ins, bytes, out, scratch),
    )
}

/// Steps with fewer outputs than this run their loops inline: the
/// dispatch to wider vectors costs more than it saves on tiny arrays
/// (measured on the 2-3-2 training step).
const WIDE_MIN: usize = 256;

/// The loops of [`forward`].
#[inline(always)]
fn forward_body(
    step: &Step,
    ins: [&[f32]; MAX_INPUTS],
    bytes: Option<&[u8]>,
    out: &mut [f32],
    scratch: &mut Scratch,
) {
    let [a, b, c, ..] = ins;
    match step.kind {
        OpKind::Neg => {
            for (o, &x) in out.iter_mut().zip(a) {
                *o = -x;
            }
        }
        // `relu` inline, on the widest vectors (`apply_into` is a function
        // of its own, compiled for SSE).
        OpKind::Unary(UnaryFn::Relu, _) => {
            let a = &a[..out.len()];
            for i in 0..out.len() {
                out[i] = relu(a[i]);
            }
        }
        OpKind::Unary(func, _) => unary_fn::apply_into(func, a, out),
        OpKind::Add => zip_into(step, a, b, out, |x, y| x + y),
        OpKind::Sub => zip_into(step, a, b, out, |x, y| x - y),
        OpKind::Mul => zip_into(step, a, b, out, mul_op),
        OpKind::Div | OpKind::DivTraced => zip_into(step, a, b, out, div_op),
        OpKind::Matmul => product(step, 0, a, b, out, scratch),
        OpKind::SumAll => out[0] = crate::xla::reduce::sum_all(a, &step.in_shapes[0]),
        OpKind::SumLast { mean, .. } => {
            let n = *step.in_shapes[0].last().expect("at least 2-D");
            crate::xla::reduce::row_sums(a, n, out);
            if mean {
                let r = 1.0 / n as f32;
                for v in out.iter_mut() {
                    *v *= r;
                }
            }
        }
        OpKind::SoftmaxLast(mode) => rows::softmax_rows(a, last(step), out, mode),
        OpKind::LogSoftmaxLast(mode) => rows::log_softmax_rows(a, last(step), out, mode),
        OpKind::MeanAll => {
            out[0] = crate::xla::reduce::sum_all(a, &step.in_shapes[0]) * (1.0 / a.len() as f32)
        }
        OpKind::ProductSum { mean, .. } => {
            let total = fused_product_sum(step, a, b, c);
            out[0] = if mean {
                total * (1.0 / a.len() as f32)
            } else {
                total
            };
        }
        // Drawn before the forward pass.
        OpKind::Sampled(_) => {}
        OpKind::Squeeze(_) | OpKind::StopGradient | OpKind::Reshape(_) => out.copy_from_slice(a),
        OpKind::SumAxes { axes, mean, .. } => {
            reduce::reduce_sum(a, &step.in_shapes[0], axes, mean, out, &mut scratch.rows)
        }
        OpKind::ProductSumAxes { axes, mean, .. } => {
            fused_product_sums(step, axes, mean, [a, b, c], out, &mut scratch.rows)
        }
        OpKind::Maximum => zip_into(step, a, b, out, nan_max),
        OpKind::Compare(c) => zip_into(step, a, b, out, |x, y| c.mask(x, y)),
        OpKind::BatchNorm(bn) => bn.forward(&step.in_shapes[0], [a, b, c], out),
        OpKind::MaxLastStopped => cross_entropy::max_rows_finite(a, last(step), out),
        OpKind::LabelLogits(_) => {
            let labels = b.iter().map(|&l| l as usize);
            cross_entropy::label_logits_rows(a, last(step), labels, out)
        }
        OpKind::Select => match bytes {
            Some(mask) => select_forward(step, out, mask, b, c),
            None => select_forward(step, out, a, b, c),
        },
        OpKind::Kernel(_) => {
            kernel_of(step).forward_into(&ins[..step.inputs.len()], out, &mut scratch.kernel)
        }
        OpKind::Other => unreachable!("planned steps are replayable"),
    }
}

/// An [`OpKind::Kernel`] step's computations (planned only with them).
fn kernel_of(step: &Step) -> &dyn Kernel {
    step.kernel
        .as_deref()
        .expect("a kernel step holds its kernel")
}

/// A select's mask: floats (picked where not zero, see [`picks`]) or the
/// bytes of a keep mask (picked where `1`).
trait Mask: Copy {
    /// Whether the select picks its first branch here.
    fn on(self) -> bool;
}

impl Mask for f32 {
    #[inline(always)]
    fn on(self) -> bool {
        picks(self)
    }
}

impl Mask for u8 {
    #[inline(always)]
    fn on(self) -> bool {
        self != 0
    }
}

/// A select's forward: `mask ? branch(t) : f` with the folded relu and
/// scaling in `branch` and `f` a scalar or an array.
#[inline(always)]
fn select_forward<M: Mask>(step: &Step, out: &mut [f32], mask: &[M], b: &[f32], c: &[f32]) {
    if let [f] = *c {
        // One loop per folded combination (each vectorizes).
        match (step.pre_relu, step.scale) {
            (false, None) => select_into(out, mask, b, f, |t| t),
            (false, Some(Scaling::Mul(r))) => select_into(out, mask, b, f, |t| mul_op(t, r)),
            (false, Some(Scaling::Div(d))) => select_into(out, mask, b, f, |t| div_op(t, d)),
            (true, None) => select_into(out, mask, b, f, relu),
            (true, Some(Scaling::Mul(r))) => select_into(out, mask, b, f, |t| mul_op(relu(t), r)),
            (true, Some(Scaling::Div(d))) => select_into(out, mask, b, f, |t| div_op(relu(t), d)),
        }
    } else {
        for (((o, &m), &t), &f) in out.iter_mut().zip(mask).zip(b).zip(c) {
            let t = if step.pre_relu { relu(t) } else { t };
            let t = step.scale.map_or(t, |r| r.apply(t));
            *o = if m.on() { t } else { f };
        }
    }
}

/// `out = mask ? branch(t) : f` elementwise.
#[inline(always)]
fn select_into<M: Mask>(
    out: &mut [f32],
    mask: &[M],
    t: &[f32],
    f: f32,
    branch: impl Fn(f32) -> f32,
) {
    for ((o, &m), &t) in out.iter_mut().zip(mask).zip(t) {
        *o = if m.on() { branch(t) } else { f };
    }
}

/// The cotangent of a select's branch `input` (1 or 2) from the select's
/// `g`: each branch gets it where it was picked, +0 elsewhere. A folded
/// scaling's cotangent follows: the select's, times the scaling's factor
/// (as its own rule: `g * y` or `g * (1 / y)`). A folded relu's after
/// that: `relu`'s rule at the branch's input `x`.
#[inline(always)]
fn select_backward<M: Mask>(
    step: &Step,
    input: usize,
    g: &[f32],
    mask: &[M],
    x: &[f32],
    dst: &mut [f32],
) {
    if input == 1 && (step.scale.is_some() || step.pre_relu) {
        let pick = |g: f32, m: M| if m.on() { g } else { 0.0 };
        let relu_rule = |g: f32, x: f32| UnaryFn::Relu.vjp(g, x, 0.0, false);
        // Index loops over slices cut to one length: a four-way `zip`'s
        // `fold` is not inlined into the wide-vector wrapper and ran on
        // SSE (26 us of CPU per 784-512-512-10 dropout step).
        let n = dst.len();
        let (g, mask, x) = (&g[..n], &mask[..n], &x[..n]);
        match (step.pre_relu, step.scale.map(Scaling::factor)) {
            (false, Some(r)) => {
                for i in 0..n {
                    dst[i] = pick(g[i], mask[i]) * r;
                }
            }
            (true, Some(r)) => {
                for i in 0..n {
                    dst[i] = relu_rule(pick(g[i], mask[i]) * r, x[i]);
                }
            }
            (true, None) => {
                for i in 0..n {
                    dst[i] = relu_rule(pick(g[i], mask[i]), x[i]);
                }
            }
            (false, None) => unreachable!("matched above"),
        }
    } else {
        let keep = input == 1;
        for ((d, &g), &m) in dst.iter_mut().zip(g).zip(mask) {
            *d = if m.on() == keep { g } else { 0.0 };
        }
    }
}

/// `relu` as its replayed step computes it.
#[inline(always)]
fn relu(x: f32) -> f32 {
    UnaryFn::Relu.f(x)
}

/// `acc[i, j] = fma(u[i], w[j], acc[i, j])`: an outer product's cotangent
/// added with one rounding per element, as XLA fuses a product whose
/// contraction has length 1 into the addition accumulating it (eager
/// backpropagation's `accumulate_outer`).
fn accumulate_outer(acc: &mut [f32], u: &[f32], w: &[f32]) {
    if w.is_empty() {
        return;
    }
    for (row, &ui) in acc.chunks_exact_mut(w.len()).zip(u) {
        for (a, &wj) in row.iter_mut().zip(w) {
            *a = ui.mul_add(wj, *a);
        }
    }
}

/// Sums `g` (of the step's output shape) down to input `input`'s length
/// (`dst`), as eager `sum_to` does: over several short leading axes (a
/// convolution's bias) in one pass, else column by column.
fn sum_rows_into(step: &Step, input: usize, g: &[f32], dst: &mut [f32]) {
    if dst.len() == g.len() {
        dst.copy_from_slice(g);
        return;
    }
    let target = step.in_shapes.get(input).map_or(&[][..], |s| &s[..]);
    crate::tensor::shape::sum_leading_into(g, &step.shape, target, dst);
}

/// `rule(g, a, b, out)` over the broadcast, then summed to the input's
/// length (`dst`), as eager `scale_grad` does.
#[allow(clippy::too_many_arguments)]
fn scaled_into(
    step: &Step,
    input: usize,
    g: &[f32],
    a: &[f32],
    b: &[f32],
    o: &[f32],
    rule: impl Rule,
    dst: &mut [f32],
    rows: &mut Vec<f32>,
) {
    let (la, lb) = (a.len(), b.len());
    let scaled = (0..g.len()).map(|j| rule(g[j], a[j % la], b[j % lb], o[j]));
    if dst.len() == g.len() {
        dst.iter_mut().zip(scaled).for_each(|(d, v)| *d = v);
    } else {
        rows.clear();
        rows.extend(scaled);
        sum_rows_into(step, input, rows, dst);
    }
}

/// The cotangent of a sum (or mean) over the axes in bit set `axes` of an
/// input of `shape`: each element gets its sum's cotangent, times the `f32`
/// reciprocal of the count for a mean, as eager `reduce_backward` computes
/// it.
fn sum_axes_backward(g: &[f32], shape: &[usize], axes: u32, mean: bool, dst: &mut [f32]) {
    let reduced = |a: usize| axes & (1 << a) != 0;
    let kept: SmallVec<[usize; 4]> = (0..shape.len())
        .map(|a| if reduced(a) { 1 } else { shape[a] })
        .collect();
    let g = ndarray::ArrayViewD::from_shape(IxDyn(&kept), g).expect("planned shape");
    ndarray::ArrayViewMutD::from_shape(IxDyn(shape), &mut *dst)
        .expect("planned shape")
        .assign(&g);
    if mean {
        let n: usize = (0..shape.len())
            .filter(|&a| reduced(a))
            .map(|a| shape[a])
            .product();
        let r = 1.0 / n as f32;
        dst.iter_mut().for_each(|v| *v *= r);
    }
}

/// Product `which` of a matmul step (0: forward `a @ b`, 1: `g @ b^T`, 2:
/// `a^T @ g`) of `x` and `y` into `out`, along its planned route when the
/// routes hold.
fn product(
    step: &Step,
    which: usize,
    x: &[f32],
    y: &[f32],
    out: &mut [f32],
    scratch: &mut Scratch,
) {
    let (sa, sb, mkn) = step.dots[which];
    match (&step.routes, step.sums[which]) {
        (Some(_), Some(sum)) if scratch.routes => {
            gathered_product(x, sa, y, sb, mkn, sum, out, &mut scratch.packed)
        }
        (Some(routes), _) if scratch.routes => {
            routes[which].run(x, sa, y, sb, mkn, out, &mut scratch.packed)
        }
        _ => matmul_slices_into(x, sa, y, sb, mkn.0, mkn.1, mkn.2, out),
    }
}

/// The gradient of input `input` of one step, given the output gradient
/// `g`, into `dst`, on the widest vectors.
#[allow(clippy::too_many_arguments)]
fn backward(
    step: &Step,
    input: usize,
    g: &[f32],
    ins: [&[f32]; MAX_INPUTS],
    bytes: Option<&[u8]>,
    out: &[f32],
    dst: &mut [f32],
    scratch: &mut Scratch,
) {
    if dst.len().max(g.len()) < WIDE_MIN {
        return backward_body(step, input, g, ins, bytes, out, dst, scratch);
    }
    on_widest_vectors(
        #[inline(always)]
        || backward_body(step, input, g, ins, bytes, out, dst, scratch),
    )
}

/// The loops of [`backward`].
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn backward_body(
    step: &Step,
    input: usize,
    g: &[f32],
    ins: [&[f32]; MAX_INPUTS],
    bytes: Option<&[u8]>,
    out: &[f32],
    dst: &mut [f32],
    scratch: &mut Scratch,
) {
    let rows = &mut scratch.rows;
    let [a, b, ..] = ins;
    match step.kind {
        OpKind::Neg => {
            for (d, &g) in dst.iter_mut().zip(g) {
                *d = -g;
            }
        }
        OpKind::Unary(UnaryFn::Relu, fused) => {
            let n = dst.len();
            let (g, a) = (&g[..n], &a[..n]);
            // `relu`'s rule reads only its input.
            for i in 0..n {
                dst[i] = UnaryFn::Relu.vjp(g[i], a[i], 0.0, fused);
            }
        }
        OpKind::Unary(func, fused) => unary_fn::vjp_into(func, dst, g, a, out, fused),
        OpKind::Add => sum_rows_into(step, input, g, dst),
        OpKind::Sub if input == 0 => sum_rows_into(step, input, g, dst),
        OpKind::Sub => {
            rows.clear();
            rows.extend(g.iter().map(|&x| -x));
            sum_rows_into(step, input, rows, dst)
        }
        // A scalar right operand's left cotangent, without a call per
        // element: the same arithmetic as the rules (`g * y`, `g * (1 / y)`,
        // `g / y`).
        OpKind::Mul if input == 0 && b.len() == 1 && dst.len() == g.len() => {
            let y = b[0];
            for (d, &g) in dst.iter_mut().zip(g) {
                *d = g * y;
            }
        }
        OpKind::Div if input == 0 && b.len() == 1 && dst.len() == g.len() => {
            let r = 1.0 / b[0];
            for (d, &g) in dst.iter_mut().zip(g) {
                *d = g * r;
            }
        }
        OpKind::DivTraced if input == 0 && b.len() == 1 && dst.len() == g.len() => {
            let y = b[0];
            for (d, &g) in dst.iter_mut().zip(g) {
                *d = g / y;
            }
        }
        OpKind::Mul if input == 0 => scaled_into(step, input, g, a, b, out, mul_da, dst, rows),
        OpKind::Mul => scaled_into(step, input, g, a, b, out, mul_db, dst, rows),
        OpKind::Div if input == 0 => scaled_into(step, input, g, a, b, out, div_da, dst, rows),
        OpKind::Div => scaled_into(step, input, g, a, b, out, div_db, dst, rows),
        OpKind::DivTraced if input == 0 => {
            scaled_into(step, input, g, a, b, out, div_traced_da, dst, rows)
        }
        OpKind::DivTraced => scaled_into(step, input, g, a, b, out, div_traced_db, dst, rows),
        // dA = g @ B^T ([m, n] @ [n, k]), dB = A^T @ g ([k, m] @ [m, n]).
        OpKind::Matmul if input == 0 => product(step, 1, g, b, dst, scratch),
        OpKind::Matmul => product(step, 2, a, g, dst, scratch),
        OpKind::SumAll => dst.fill(g[0]),
        OpKind::SumLast { mean, .. } => {
            let n = last(step);
            if n > 0 {
                for (row, &g) in dst.chunks_exact_mut(n).zip(g) {
                    row.fill(g);
                }
            }
            if mean {
                let r = 1.0 / n as f32;
                for v in dst.iter_mut() {
                    *v *= r;
                }
            }
        }
        OpKind::SoftmaxLast(mode) => {
            dst.copy_from_slice(g);
            let dot_row = rows::dot_row(&step.in_shapes[0], last(step));
            rows::softmax_rows_backward(dst, a, last(step), mode, dot_row);
        }
        OpKind::LogSoftmaxLast(mode) => {
            dst.copy_from_slice(g);
            let dot_row = rows::dot_row(&step.in_shapes[0], last(step));
            rows::log_softmax_rows_backward(dst, a, last(step), mode, dot_row);
        }
        OpKind::MeanAll => {
            dst.fill(g[0] * (1.0 / a.len() as f32));
        }
        OpKind::ProductSum { mean: false, .. } => dst.fill(g[0]),
        OpKind::ProductSum { mean: true, .. } => dst.fill(g[0] * (1.0 / dst.len() as f32)),
        OpKind::Select => match bytes {
            Some(mask) => select_backward(step, input, g, mask, b, dst),
            None => select_backward(step, input, g, a, b, dst),
        },
        OpKind::Sampled(_) => unreachable!("a draw has no inputs"),
        OpKind::Squeeze(_) => dst.copy_from_slice(g),
        OpKind::MaxLastStopped | OpKind::StopGradient | OpKind::Compare(_) => {
            unreachable!("not differentiable")
        }
        // The labels (input 1) are not differentiable.
        OpKind::LabelLogits(_) => {
            let labels = b.iter().map(|&l| l as usize);
            cross_entropy::label_logits_backward(g, last(step), labels, dst)
        }
        OpKind::Reshape(_) => dst.copy_from_slice(g),
        OpKind::Maximum if input == 0 => scaled_into(step, input, g, a, b, out, max_da, dst, rows),
        OpKind::Maximum => scaled_into(step, input, g, a, b, out, max_db, dst, rows),
        OpKind::SumAxes { axes, mean, .. } | OpKind::ProductSumAxes { axes, mean, .. } => {
            sum_axes_backward(g, &step.in_shapes[0], axes, mean, dst)
        }
        OpKind::BatchNorm(_) => unreachable!("planned forward only"),
        OpKind::Kernel(_) => kernel_of(step).backward_into(
            input,
            g,
            &ins[..step.inputs.len()],
            dst,
            &mut scratch.kernel,
        ),
        OpKind::Other => unreachable!("planned steps are replayable"),
    }
}

#[cfg(test)]
mod mask_tests;

#[cfg(test)]
mod product_tests;

#[cfg(test)]
mod fold_tests {
    use super::*;
    use crate::tensor::{as_jitted, value_and_grad};

    /// `select(mask, relu(w) scaled, 0)` compiled (with the scaling and the
    /// relu folded into the select where allowed) equals eager, bit for
    /// bit: products and divisions whose zeros keep or flip their sign, no
    /// scaling, the relu's output read again after the select (the relu
    /// stays), and a reader of it between the scaling and the select
    /// (nothing folds). Eager runs as jitted, as the compiled step traces.
    #[test]
    fn folded_steps_give_the_eager_bits() {
        let mask = Tensor::from_vec(vec![1.0, 0.0, 1.0, 0.0, 1.0, 1.0], &[2, 3]).unwrap();
        let scalings = [
            None,
            Some((1.25f32, false)),
            Some((-2.0, false)),
            Some((0.0, false)),
            Some((0.9, true)),
            Some((-0.3, true)),
        ];
        for scaling in scalings {
            for (between, tail) in [(false, false), (false, true), (true, false)] {
                let f = |p: &Tree, b: &Tree| -> crate::Result<Tensor> {
                    let x = p.tensor("w")?.relu();
                    let scaled = match scaling {
                        None => x.clone(),
                        Some((r, true)) => x.div(&Tensor::scalar(r))?,
                        Some((r, false)) => x.mul(&Tensor::scalar(r))?,
                    };
                    let other = if between {
                        x.square()
                    } else {
                        Tensor::zeros(&[2, 3])
                    };
                    let picked = Tensor::select(b.tensor("m")?, &scaled, &Tensor::zeros(&[]))?;
                    let y = picked.add(&other)?;
                    let y = if tail { y.add(&x)? } else { y };
                    Ok(y.square().sum_all())
                };
                let what = format!("{scaling:?}, between {between}, tail {tail}");
                let inputs = Tree::new().with("m", mask.clone());
                let mut step = jit_value_and_grad_with(f);
                for t in 0..3 {
                    let w: Vec<f32> = (0..6)
                        .map(|i| (i as f32 - 2.5) * (t as f32 + 0.5))
                        .collect();
                    let p = Tree::new().with("w", Tensor::from_vec(w, &[2, 3]).unwrap());
                    let (l, g) = step.call_with(&p, &inputs).unwrap();
                    let (le, ge) = as_jitted(|| value_and_grad(|p| f(p, &inputs), &p)).unwrap();
                    let bits =
                        |t: &Tensor| t.to_vec().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&l), bits(&le), "{what}");
                    let (gw, gew) = (g.tensor("w").unwrap(), ge.tensor("w").unwrap());
                    assert_eq!(bits(gw), bits(gew), "{what}");
                }
                let Some(Ok(plan)) = &step.plan else {
                    panic!("compiled")
                };
                let folded = plan.steps.iter().filter(|s| s.folded).count();
                // The relu folds when the select alone reads its output.
                let scaled = usize::from(scaling.is_some() && !between);
                let expected = scaled + usize::from(!between && !tail);
                assert_eq!(folded, expected, "{what}");
            }
        }
    }
}
