//! The tape: the graph of operations recorded during one `grad` call.
//!
//! Every `grad`/`value_and_grad`/`vjp` call makes its own [`Tape`], shared
//! (through an `Arc`) by the tensors traced in that call only. There is no
//! global or thread-local tape, so two calls, on one thread or on many, never
//! see each other's nodes.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use std::collections::HashMap;

use ndarray::{ArcArray, ArrayD, Axis, IxDyn};
use smallvec::SmallVec;

use super::batched::{Contribution, ItemView};
use super::ops::matmul::matmul_raw;
use super::ops::unary::UnaryFn;
use super::Tensor;

/// Gradients with respect to an operation's inputs, `None` where the input
/// needs none.
pub(crate) type InputGrads = SmallVec<[Option<ArrayD<f32>>; 2]>;

/// Maps the gradient of an operation's output (owned, so that it can be
/// reused in place) and which inputs need a gradient to the inputs'
/// gradients, each reduced to its input's shape.
pub(crate) type Backward = Box<dyn Fn(ArrayD<f32>, &[bool]) -> InputGrads + Send + Sync>;

/// What an operation is, for the operations that a compiled step
/// ([`jit_value_and_grad`](super::jit_value_and_grad)) can replay;
/// everything else is `Other`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum OpKind {
    Other,
    Neg,
    Add,
    Sub,
    Mul,
    /// Division by a constant scalar (see `binary::DIV_DA`).
    Div,
    /// Division by anything else.
    DivTraced,
    /// An elementwise function; `true` when recorded in a
    /// [compiled region](super::compiled), where its backward rule is fused.
    Unary(UnaryFn, bool),
    /// 2-D by 2-D.
    Matmul,
    SumAll,
    MeanAll,
    /// Sum (or mean) over the last axis.
    SumLast {
        mean: bool,
        keepdims: bool,
    },
    SoftmaxLast,
    LogSoftmaxLast,
    /// `jnp.where(mask, on_true, on_false)` (inputs in that order; the
    /// mask is not differentiated).
    Select,
    /// A random draw that a compiled step with keys repeats on every call
    /// (see [`Tensor::sampled`](super::Tensor::sampled)); its sampler's
    /// index.
    Sampled(usize),
    /// The same values without axis `.0` (of length 1): `squeeze`.
    Squeeze(usize),
    /// `stop_gradient`: the input's values, no gradient.
    StopGradient,
    /// The maximum over the last axis, keeping it, with 0 where it is not
    /// finite, and no gradient: `jax.nn.logsumexp`'s stop-gradient shift.
    MaxLastStopped,
    /// Per row of `[..., classes]` logits, the logit at the row's integer
    /// label (the cross-entropy's `take_along_axis`); the labels are the
    /// second input, as `f32`. `Some(j)`: they are integer array `j` of a
    /// compiled step's inputs, read again on every call.
    LabelLogits(Option<usize>),
}

/// Computes an outer product's two vectors from an output cotangent.
pub(crate) type OuterFactors = Box<dyn Fn(&ArrayD<f32>) -> (Vec<f32>, Vec<f32>) + Send + Sync>;

/// A cotangent that XLA never rounds on its own inside a compiled region:
/// a matrix product whose contraction has length 1 is rewritten as a
/// broadcast multiply, the outer product `u ⊗ w`, and fused into the
/// addition that accumulates it, so each element is `fma(u_i, w_j, acc)`.
/// (Scan's backward accumulates a broadcast kernel's cotangents that way.)
pub(crate) struct FusedOuter {
    /// Which input's cotangent this is.
    pub(crate) input: usize,
    /// `(u, w)` from the output's cotangent.
    pub(crate) factors: OuterFactors,
}

/// For a matrix product, input `i`'s cotangent as `(a, b, shape)`: the
/// cotangent is `a^T @ b` in `shape`, from the output's cotangent.
pub(crate) type DotFactors =
    Box<dyn Fn(&ArrayD<f32>, usize) -> (ArrayD<f32>, ArrayD<f32>, Vec<usize>) + Send + Sync>;

/// One recorded operation.
pub(crate) struct Node {
    /// Node ids of the inputs traced on this tape (`None`: a constant).
    pub(crate) inputs: SmallVec<[Option<usize>; 2]>,
    /// `None` for a leaf (a differentiated argument).
    pub(crate) backward: Option<Backward>,
    /// The operation, when a compiled step can replay it.
    pub(crate) kind: OpKind,
    /// The values of constant inputs, kept for replay (only when `kind` is
    /// not `Other` and some input is a constant; empty otherwise).
    pub(crate) consts: Vec<Option<ArcArray<f32, IxDyn>>>,
    /// Input cotangents that are outer products fused into their
    /// accumulation (only recorded in compiled regions).
    pub(crate) fused: Option<FusedOuter>,
    /// For a matrix product: its cotangents as products, kept unevaluated
    /// when they reach an item's view of a shared tensor.
    pub(crate) dot: Option<DotFactors>,
    /// Set when this node is an item's view of a tensor shared by the items
    /// of a `vmap` ([`Tensor::item_view`](super::Tensor::item_view)).
    pub(crate) view: Option<ItemView>,
    /// The tangent rule, recorded only on tapes of forward-mode
    /// differentiation ([`Tape::records_tangents`]).
    pub(crate) tangent: Option<TangentRule>,
    /// Where the operation was recorded (named when it has no tangent rule).
    pub(crate) site: &'static std::panic::Location<'static>,
}

impl Node {
    /// A node without inputs or backward rule: a traced argument
    /// (`OpKind::Other`) or a random draw (`OpKind::Sampled`).
    #[track_caller]
    pub(crate) fn leaf(kind: OpKind) -> Node {
        Node {
            inputs: SmallVec::new(),
            backward: None,
            kind,
            consts: Vec::new(),
            fused: None,
            dot: None,
            view: None,
            tangent: None,
            site: std::panic::Location::caller(),
        }
    }
}

/// An operation's tangent rule: its output's tangent from its inputs'
/// tangents (`None`: a zero tangent, as JAX's symbolic zeros), computed
/// with JAX's jvp rule in JAX's order. Returns `None` for a zero output
/// tangent.
pub(crate) type TangentRule =
    Box<dyn Fn(&[Option<Tensor>]) -> crate::Result<Option<Tensor>> + Send + Sync>;

/// The nodes of one differentiation.
pub(crate) struct Tape {
    /// Distinguishes tapes; later tapes have larger ids (nested calls).
    pub(crate) id: u64,
    /// Whether operations are still being recorded: the tape closes when
    /// the function being differentiated returns, so tensors that escape it
    /// (auxiliary outputs) do not keep growing the tape.
    open: AtomicBool,
    /// Whether an operation on this tape also read a tensor traced by an
    /// enclosing differentiation (a `grad` inside a `grad`): its backward
    /// would need recording, which first-order flaxen does not do.
    nested: AtomicBool,
    /// Whether the values of a tensor traced on this tape were read (a
    /// value-dependent branch: a compiled step must not replay it).
    read: AtomicBool,
    /// Whether the tape holds an item's view of a shared tensor (a `vmap`
    /// traced in place): only then do products keep [`DotFactors`].
    views: AtomicBool,
    /// Whether operations record their tangent rules (`jvp`, `linearize`).
    forward: bool,
    nodes: Mutex<Vec<Node>>,
}

static NEXT_TAPE_ID: AtomicU64 = AtomicU64::new(0);

impl Tape {
    pub(crate) fn new() -> Arc<Tape> {
        Tape::with_tangents(false)
    }

    /// A tape whose operations also record their tangent rules when
    /// `forward` (forward-mode differentiation).
    pub(crate) fn with_tangents(forward: bool) -> Arc<Tape> {
        Arc::new(Tape {
            forward,
            id: NEXT_TAPE_ID.fetch_add(1, Ordering::Relaxed),
            open: AtomicBool::new(true),
            nested: AtomicBool::new(false),
            read: AtomicBool::new(false),
            views: AtomicBool::new(false),
            nodes: Mutex::new(Vec::with_capacity(16)),
        })
    }

    /// Whether operations on this tape record tangent rules.
    pub(crate) fn records_tangents(&self) -> bool {
        self.forward
    }

    /// Notes that an operation mixed this tape with an enclosing one.
    pub(crate) fn mark_nested(&self) {
        self.nested.store(true, Ordering::Relaxed);
    }

    /// Whether an operation mixed this tape with an enclosing one.
    pub(crate) fn is_nested(&self) -> bool {
        self.nested.load(Ordering::Relaxed)
    }

    /// Notes that a traced tensor's values were read.
    pub(crate) fn mark_read(&self) {
        self.read.store(true, Ordering::Relaxed);
    }

    /// Whether a traced tensor's values were read while recording.
    pub(crate) fn was_read(&self) -> bool {
        self.read.load(Ordering::Relaxed)
    }

    /// Whether operations on this tape's tensors are still recorded.
    pub(crate) fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    /// Stops recording; later operations treat this tape's tensors as
    /// constants.
    pub(crate) fn close(&self) {
        self.open.store(false, Ordering::Release);
    }

    /// The nodes; a poisoned lock (a panic in another thread of the same
    /// call) still holds a consistent vector, since pushes are atomic.
    pub(crate) fn nodes(&self) -> MutexGuard<'_, Vec<Node>> {
        self.nodes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether an item's view was recorded on this tape.
    pub(crate) fn has_views(&self) -> bool {
        self.views.load(Ordering::Relaxed)
    }

    /// Appends a node and returns its id.
    pub(crate) fn push(&self, node: Node) -> usize {
        if node.view.is_some() {
            self.views.store(true, Ordering::Relaxed);
        }
        let mut nodes = self.nodes();
        nodes.push(node);
        nodes.len() - 1
    }
}

/// A tensor's place on a tape.
#[derive(Clone)]
pub(crate) struct Tracer {
    pub(crate) tape: Arc<Tape>,
    pub(crate) node: usize,
}

/// Runs the backward pass from node `root` with output gradient `seed`;
/// returns the accumulated gradient of each node in `wanted`.
pub(crate) fn backward(
    tape: &Tape,
    root: usize,
    seed: ArrayD<f32>,
    wanted: &[usize],
) -> Vec<Option<ArrayD<f32>>> {
    backward_from(tape, vec![(root, seed)], wanted)
}

/// [`backward`] from several nodes at once, each with its output gradient
/// (seeds of the same node are added in order).
pub(crate) fn backward_from(
    tape: &Tape,
    seeds: Vec<(usize, ArrayD<f32>)>,
    wanted: &[usize],
) -> Vec<Option<ArrayD<f32>>> {
    let Some(root) = seeds.iter().map(|(r, _)| *r).max() else {
        return vec![None; wanted.len()];
    };
    let nodes = tape.nodes();
    let mut grads: Vec<Option<ArrayD<f32>>> = Vec::new();
    grads.resize_with(root + 1, || None);
    for (r, seed) in seeds {
        accumulate(&mut grads[r], seed);
    }
    // Cotangents of items' views, per view in arrival order, and the views'
    // groups waiting for their other items.
    let mut views: HashMap<usize, Vec<Contribution>> = HashMap::new();
    let mut groups: HashMap<u64, Vec<Option<Vec<Contribution>>>> = HashMap::new();
    let is_view = |i: usize| nodes[i].view.is_some();
    // Inputs always have smaller ids than the nodes using them, so walking
    // ids downwards visits a node only after all its uses.
    for id in (0..=root).rev() {
        let node = &nodes[id];
        if let Some(view) = &node.view {
            let list = views.remove(&id).unwrap_or_default();
            let items = groups
                .entry(view.group.id)
                .or_insert_with(|| (0..view.group.items).map(|_| None).collect());
            items[view.item] = Some(list);
            if items.iter().all(Option::is_some) {
                let items = groups.remove(&view.group.id).expect("present");
                let lists = items.into_iter().map(Option::unwrap).collect();
                if let (Some(input), Some(total)) = (node.inputs[0], combine_items(lists)) {
                    accumulate(&mut grads[input], total);
                }
            }
            continue;
        }
        let Some(backward) = &node.backward else {
            continue;
        };
        let Some(g) = grads[id].take() else {
            continue;
        };
        let mut needs: SmallVec<[bool; 4]> = node.inputs.iter().map(|i| i.is_some()).collect();
        if let Some(dot) = &node.dot {
            for (k, input) in node.inputs.iter().enumerate() {
                if let Some(i) = input.filter(|&i| is_view(i)) {
                    let (a, b, shape) = dot(&g, k);
                    views
                        .entry(i)
                        .or_default()
                        .push(Contribution::Dot(a, b, shape));
                    needs[k] = false;
                }
            }
        }
        if let Some(f) = &node.fused {
            // Only an accumulation is fused: a first cotangent is the plain
            // product, which the regular rule computes.
            if let Some(Some(acc)) = node.inputs[f.input].map(|i| grads[i].as_mut()) {
                let (u, w) = (f.factors)(&g);
                accumulate_outer(acc, &u, &w);
                needs[f.input] = false;
            }
        }
        let input_grads = backward(g, &needs);
        for (input, grad) in node.inputs.iter().zip(input_grads) {
            if let (Some(input), Some(grad)) = (input, grad) {
                if is_view(*input) {
                    views
                        .entry(*input)
                        .or_default()
                        .push(Contribution::Dense(grad));
                } else {
                    accumulate(&mut grads[*input], grad);
                }
            }
        }
    }
    drop(nodes);
    wanted
        .iter()
        .map(|&w| if w <= root { grads[w].take() } else { None })
        .collect()
}

/// The cotangent of a shared tensor from its items' views' cotangents, as
/// JAX's batched transpose computes it: each use summed over the items
/// (one reduction, or one product over the items' stacked rows), then the
/// uses added in the order their cotangents arrived. Items whose uses
/// differ are summed item by item instead.
fn combine_items(lists: Vec<Vec<Contribution>>) -> Option<ArrayD<f32>> {
    let uses = lists[0].len();
    let aligned = lists.iter().all(|l| {
        l.len() == uses
            && l.iter().zip(&lists[0]).all(|(a, b)| {
                matches!(
                    (a, b),
                    (Contribution::Dense(_), Contribution::Dense(_))
                        | (Contribution::Dot(..), Contribution::Dot(..))
                )
            })
    });
    let mut total: Option<ArrayD<f32>> = None;
    if aligned {
        let mut columns: Vec<Vec<Contribution>> = (0..uses).map(|_| Vec::new()).collect();
        for list in lists {
            for (u, c) in list.into_iter().enumerate() {
                columns[u].push(c);
            }
        }
        for column in columns {
            accumulate(&mut total, reduce_items(column));
        }
    } else {
        for list in lists {
            let mut item: Option<ArrayD<f32>> = None;
            for c in list {
                accumulate(&mut item, evaluate(c));
            }
            if let Some(item) = item {
                accumulate(&mut total, item);
            }
        }
    }
    total
}

/// One contribution's value.
fn evaluate(c: Contribution) -> ArrayD<f32> {
    match c {
        Contribution::Dense(g) => g,
        Contribution::Dot(a, b, shape) => matmul_raw(a.t().into_dyn(), b.view())
            .expect("factor shapes agree")
            .into_shape_with_order(IxDyn(&shape))
            .expect("the view's size"),
    }
}

/// One use's cotangents of every item, summed over the items.
fn reduce_items(column: Vec<Contribution>) -> ArrayD<f32> {
    if matches!(column[0], Contribution::Dense(_)) {
        let parts: Vec<Tensor> = column
            .into_iter()
            .map(|c| Tensor::constant(evaluate(c).into_shared()))
            .collect();
        let stacked = Tensor::stack(&parts, 0).expect("every item's cotangent has one shape");
        return stacked
            .sum(&[0], false)
            .expect("axis 0 exists")
            .data
            .into_owned();
    }
    let (mut lhs, mut rhs, mut shape) = (Vec::new(), Vec::new(), Vec::new());
    for c in column {
        if let Contribution::Dot(a, b, s) = c {
            lhs.push(a);
            rhs.push(b);
            shape = s;
        }
    }
    let cat = |parts: &[ArrayD<f32>]| {
        let views: Vec<_> = parts.iter().map(|p| p.view()).collect();
        ndarray::concatenate(Axis(0), &views).expect("factors agree but for their rows")
    };
    let (a, b) = (cat(&lhs), cat(&rhs));
    matmul_raw(a.t().into_dyn(), b.view())
        .expect("factor shapes agree")
        .into_shape_with_order(IxDyn(&shape))
        .expect("the view's size")
}

/// `acc[i, j] = fma(u[i], w[j], acc[i, j])`: the outer product added with
/// one rounding per element.
fn accumulate_outer(acc: &mut ArrayD<f32>, u: &[f32], w: &[f32]) {
    debug_assert_eq!(acc.shape(), [u.len(), w.len()]);
    for (mut row, &ui) in acc.outer_iter_mut().zip(u) {
        for (a, &wj) in row.iter_mut().zip(w) {
            *a = ui.mul_add(wj, *a);
        }
    }
}

/// Adds `grad` into `slot`, in place when the slot already holds a buffer.
fn accumulate(slot: &mut Option<ArrayD<f32>>, grad: ArrayD<f32>) {
    match slot {
        None => *slot = Some(grad),
        Some(acc) => {
            if acc.is_standard_layout() && grad.is_standard_layout() {
                let (a, g) = (acc.as_slice_mut().unwrap(), grad.as_slice().unwrap());
                a.iter_mut().zip(g).for_each(|(a, g)| *a += g);
            } else {
                *acc += &grad;
            }
        }
    }
}
