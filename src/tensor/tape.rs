//! The tape: the graph of operations recorded during one `grad` call.
//!
//! Every `grad`/`value_and_grad`/`vjp` call makes its own [`Tape`], shared
//! (through an `Arc`) by the tensors traced in that call only. There is no
//! global or thread-local tape, so two calls, on one thread or on many, never
//! see each other's nodes.
//!
//! This module is the data structure only; `backprop` walks it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use ndarray::{ArcArray, ArrayD, IxDyn};
use smallvec::SmallVec;

use super::item_view::ItemView;
use super::kernel::Kernel;
use super::unary_fn::UnaryFn;
use super::Tensor;

/// Gradients with respect to an operation's inputs, `None` where the input
/// needs none.
pub(crate) type InputGrads = SmallVec<[Option<ArrayD<f32>>; 2]>;

/// Maps the gradient of an operation's output (owned, so that it can be
/// reused in place) and which inputs need a gradient to the inputs'
/// gradients, each reduced to its input's shape.
pub(crate) type BackwardFn = Box<dyn Fn(ArrayD<f32>, &[bool]) -> InputGrads + Send + Sync>;

/// An operation's backward rule: the most common ones held inline (a boxed
/// closure per operation was a tenth of the allocations of an eager step
/// of a tiny MLP), any other as a boxed closure.
pub(crate) enum Backward {
    /// `a + b`, or `a - b` when `negate_b`, broadcasting: the output's
    /// gradient summed to each input's shape.
    Sum { a: IxDyn, b: IxDyn, negate_b: bool },
    /// An elementwise function (boxed: its two arrays would double the
    /// size of every node).
    Unary(Box<UnaryRule>),
    /// A sum over the axes that `kept` has as 1 (all of them for a scalar
    /// output), of an input of shape `input`, times the reciprocal of
    /// `divisor` when given (a mean).
    Reduce {
        input: IxDyn,
        kept: IxDyn,
        divisor: Option<f32>,
    },
    /// Any other rule.
    Rule(BackwardFn),
}

/// [`Backward::Unary`]: an elementwise function of `x` with output `out`;
/// `fused` as in [`OpKind::Unary`].
pub(crate) struct UnaryRule {
    pub(crate) func: UnaryFn,
    pub(crate) fused: bool,
    pub(crate) x: ArcArray<f32, IxDyn>,
    pub(crate) out: ArcArray<f32, IxDyn>,
}

impl Backward {
    /// The inputs' gradients for the output's gradient `g` (see
    /// [`BackwardFn`]).
    pub(crate) fn call(&self, g: ArrayD<f32>, needs: &[bool]) -> InputGrads {
        match self {
            Backward::Sum { a, b, negate_b } => {
                super::ops::binary::sum_backward(g, needs, a, b, *negate_b)
            }
            Backward::Unary(rule) => {
                let UnaryRule {
                    func,
                    fused,
                    x,
                    out,
                } = &**rule;
                super::ops::unary::unary_backward(*func, *fused, x, out, g)
            }
            Backward::Reduce {
                input,
                kept,
                divisor,
            } => super::ops::reduce::reduce_backward(g, input, kept, *divisor),
            Backward::Rule(rule) => rule(g, needs),
        }
    }
}

/// Which comparison a [`OpKind::Compare`] makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Comparison {
    Greater,
    GreaterEqual,
    Less,
    LessEqual,
    Equal,
}

impl Comparison {
    /// Whether `x` and `y` compare so. (Callers flush subnormals first,
    /// as XLA:CPU compares.)
    #[inline(always)]
    pub(crate) fn holds(self, x: f32, y: f32) -> bool {
        match self {
            Comparison::Greater => x > y,
            Comparison::GreaterEqual => x >= y,
            Comparison::Less => x < y,
            Comparison::LessEqual => x <= y,
            Comparison::Equal => x == y,
        }
    }

    /// The mask value of `x` compared with `y`: 1.0 or 0.0, subnormals
    /// counting as zeros.
    #[inline(always)]
    pub(crate) fn mask(self, x: f32, y: f32) -> f32 {
        if self.holds(super::ops::binary::flush(x), super::ops::binary::flush(y)) {
            1.0
        } else {
            0.0
        }
    }
}

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
    /// Division by a constant scalar (see `binary::div_da`).
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
    /// Sum (or mean) over other axes: bit `a` of `axes` set for each
    /// reduced axis `a` (a BatchNorm's statistics over the batch).
    SumAxes {
        axes: u32,
        mean: bool,
        keepdims: bool,
    },
    /// A sum (or mean) over all axes of a product that XLA fuses with it
    /// in a compiled region (see `ops::product_sum`): its input is the
    /// product (an `OpKind::Mul` or a square), whose factors the replay
    /// reads.
    ProductSum {
        mean: bool,
        keepdims: bool,
    },
    /// A sum (or mean) over the axes in bit set `axes` (not all of them)
    /// of a product that XLA fuses with it in a compiled region (see
    /// `ops::product_sum`): as [`OpKind::ProductSum`], its input the
    /// product, whose factors the replay reads.
    ProductSumAxes {
        axes: u32,
        mean: bool,
        keepdims: bool,
    },
    /// `jnp.maximum` (a variance clipped at 0).
    Maximum,
    /// A comparison's mask (1.0 where it holds, else 0.0), not
    /// differentiated.
    Compare(Comparison),
    /// The same row-major values in another shape.
    Reshape(Dims),
    /// `softmax` over the last axis, in JAX's computation of that mode.
    SoftmaxLast(crate::tensor::ops::rows::Softmax),
    /// `log_softmax` over the last axis, likewise.
    LogSoftmaxLast(crate::tensor::ops::rows::Softmax),
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
    /// A step of BatchNorm's forward pass as XLA compiles it inside a
    /// jitted module (`nn::Jit`, see [`crate::xla::batch_norm`]). Recorded
    /// only on the tape of a forward program, never differentiated;
    /// replayed forward only.
    BatchNorm(crate::xla::batch_norm::Step),
    /// An operation with computations of its own (a convolution, a window
    /// sum; named so), held by its node ([`Node::kernel`]).
    Kernel(&'static str),
}

/// A shape of at most [`Dims::MAX`] axes of at most `u32::MAX` elements
/// each, stored inline (and small) so that [`OpKind`] stays `Copy` and
/// cheap to move onto the tape.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Dims {
    len: u8,
    dims: [u32; Dims::MAX],
}

impl Dims {
    /// The most axes a replayed reshape may have.
    pub(crate) const MAX: usize = 6;

    /// `shape`, or `None` when it has too many axes or too long a one.
    pub(crate) fn new(shape: &[usize]) -> Option<Dims> {
        let mut dims = [0; Dims::MAX];
        for (d, &n) in dims.get_mut(..shape.len())?.iter_mut().zip(shape) {
            *d = u32::try_from(n).ok()?;
        }
        Some(Dims {
            len: shape.len() as u8,
            dims,
        })
    }

    /// The shape.
    pub(crate) fn shape(&self) -> Vec<usize> {
        self.dims[..self.len as usize]
            .iter()
            .map(|&n| n as usize)
            .collect()
    }
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

/// Computes an elementwise product's two factors (each in the input's
/// shape) from an output cotangent.
pub(crate) type ProductFactors =
    Box<dyn Fn(&ArrayD<f32>) -> (ArrayD<f32>, ArrayD<f32>) + Send + Sync>;

/// An input's cotangent that is an elementwise product `u * w` with one use
/// in its fusion, so that LLVM contracts it into the addition of the next
/// cotangent reaching the same input: `fma(u, w, next)` (a GRU step's
/// `z * ct_h`, added to the cotangent through `h W_hn`). It is held until
/// that cotangent arrives, and rounded on its own if none does. Deferred
/// only when it is the input's first cotangent (recorded only in compiled
/// regions).
pub(crate) struct DeferredProduct {
    /// Which input's cotangent this is.
    pub(crate) input: usize,
    /// `(u, w)` from the output's cotangent.
    pub(crate) factors: ProductFactors,
}

/// Computes input `k`'s cotangent's two factors (each in the output's
/// shape) from the output's cotangent `g`: `(g, k) -> (u, w)`.
pub(crate) type InputProductFactors =
    Box<dyn Fn(&ArrayD<f32>, usize) -> (ArrayD<f32>, ArrayD<f32>) + Send + Sync>;

/// Input cotangents that are elementwise products `u * w` inside one XLA
/// fusion (a sigmoid's `g * (s (1 - s))`, a fused sum of products' `g * b`
/// in a scan's body), which XLA keeps unrounded up to the addition that
/// accumulates them: carried through additions (whose transposes pass a
/// cotangent on unchanged, a bias broadcast over one row included) to a
/// value that already holds a cotangent, such as a scan's parameter
/// accumulating its steps', they are added there as `fma(u, w, acc)`.
/// The backward pass computes them only for inputs that are additions
/// (see `backprop`). Recorded only in compiled regions.
pub(crate) struct ProductCotangents {
    /// The factors of input `k`'s cotangent.
    pub(crate) factors: InputProductFactors,
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
    /// What only some operations record, boxed: every node is moved onto
    /// the tape, and keeping these inline made each move a copy of over
    /// 400 bytes.
    pub(crate) extra: Option<Box<NodeExtra>>,
    /// Where the operation was recorded (named when it has no tangent rule).
    pub(crate) site: &'static std::panic::Location<'static>,
}

/// The parts of a [`Node`] that most operations do not record.
#[derive(Default)]
pub(crate) struct NodeExtra {
    /// The values of constant inputs, kept for replay (only when `kind` is
    /// not `Other`, some input is a constant and the tape may be replayed;
    /// empty otherwise).
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
    /// An [`OpKind::Kernel`]'s computations, kept on tapes a compiled step
    /// may replay.
    pub(crate) kernel: Option<Arc<dyn Kernel>>,
    /// An input cotangent fused into the next one to reach that input.
    pub(crate) deferred: Option<DeferredProduct>,
    /// Input cotangents kept as products up to their accumulation.
    pub(crate) products: Option<ProductCotangents>,
}

impl NodeExtra {
    /// The parts an operation records besides its rule, boxed only when
    /// there is one (no tangent rule yet: see [`Node::set_tangent`]).
    pub(crate) fn boxed(
        consts: Vec<Option<ArcArray<f32, IxDyn>>>,
        fused: Option<FusedOuter>,
        dot: Option<DotFactors>,
        view: Option<ItemView>,
    ) -> Option<Box<NodeExtra>> {
        if consts.is_empty() && fused.is_none() && dot.is_none() && view.is_none() {
            return None;
        }
        Some(Box::new(NodeExtra {
            consts,
            fused,
            dot,
            view,
            tangent: None,
            kernel: None,
            deferred: None,
            products: None,
        }))
    }
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
            extra: None,
            site: std::panic::Location::caller(),
        }
    }

    /// The values of constant inputs kept for replay (see
    /// [`NodeExtra::consts`]).
    pub(crate) fn consts(&self) -> &[Option<ArcArray<f32, IxDyn>>] {
        self.extra.as_ref().map_or(&[], |e| &e.consts)
    }

    /// See [`NodeExtra::fused`].
    pub(crate) fn fused(&self) -> Option<&FusedOuter> {
        self.extra.as_ref()?.fused.as_ref()
    }

    /// See [`NodeExtra::dot`].
    pub(crate) fn dot(&self) -> Option<&DotFactors> {
        self.extra.as_ref()?.dot.as_ref()
    }

    /// See [`NodeExtra::view`].
    pub(crate) fn view(&self) -> Option<&ItemView> {
        self.extra.as_ref()?.view.as_ref()
    }

    /// See [`NodeExtra::tangent`].
    pub(crate) fn tangent(&self) -> Option<&TangentRule> {
        self.extra.as_ref()?.tangent.as_ref()
    }

    /// Records the tangent rule.
    pub(crate) fn set_tangent(&mut self, rule: TangentRule) {
        self.extra.get_or_insert_with(Default::default).tangent = Some(rule);
    }

    /// See [`NodeExtra::kernel`].
    pub(crate) fn kernel(&self) -> Option<&Arc<dyn Kernel>> {
        self.extra.as_ref()?.kernel.as_ref()
    }

    /// Records an [`OpKind::Kernel`]'s computations.
    pub(crate) fn set_kernel(&mut self, kernel: Arc<dyn Kernel>) {
        self.extra.get_or_insert_with(Default::default).kernel = Some(kernel);
    }

    /// See [`NodeExtra::deferred`].
    pub(crate) fn deferred(&self) -> Option<&DeferredProduct> {
        self.extra.as_ref()?.deferred.as_ref()
    }

    /// Records an input cotangent to defer (see [`DeferredProduct`]).
    pub(crate) fn set_deferred(&mut self, deferred: DeferredProduct) {
        self.extra.get_or_insert_with(Default::default).deferred = Some(deferred);
    }

    /// See [`NodeExtra::products`].
    pub(crate) fn products(&self) -> Option<&ProductCotangents> {
        self.extra.as_ref()?.products.as_ref()
    }

    /// Records input cotangents kept as products (see
    /// [`ProductCotangents`]).
    pub(crate) fn set_products(&mut self, products: ProductCotangents) {
        self.extra.get_or_insert_with(Default::default).products = Some(products);
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
    /// Whether a compiled step may replay the tape (see [`Tape::eager`]).
    replayed: bool,
    nodes: Mutex<Vec<Node>>,
}

static NEXT_TAPE_ID: AtomicU64 = AtomicU64::new(0);

/// Node vectors kept for reuse with at most this many slots (about 400
/// KiB), so that a large model's tape is not kept alive.
const SPARE_CAPACITY: usize = 1024;

thread_local! {
    /// The emptied node vector of this thread's last dropped tape: each
    /// eager step records a tape, and allocating its vector afresh cost a
    /// tenth of the tiny 2-3-2 step (a block over glibc's small sizes, which
    /// consolidates the freed small blocks first).
    static SPARE_NODES: std::cell::Cell<Vec<Node>> = const { std::cell::Cell::new(Vec::new()) };
}

/// An empty node vector, reusing the thread's spare one when there is one.
fn spare_nodes() -> Vec<Node> {
    let spare = SPARE_NODES.try_with(|s| s.take()).unwrap_or_default();
    if spare.capacity() == 0 {
        Vec::with_capacity(16)
    } else {
        spare
    }
}

impl Drop for Tape {
    fn drop(&mut self) {
        let mut nodes = std::mem::take(self.nodes.get_mut().unwrap_or_else(|e| e.into_inner()));
        // The nodes themselves (backward rules, kept values) go now.
        nodes.clear();
        if nodes.capacity() <= SPARE_CAPACITY {
            // During the thread's teardown there is nowhere to keep it.
            let _ = SPARE_NODES.try_with(|s| s.set(nodes));
        }
    }
}

impl Tape {
    pub(crate) fn new() -> Arc<Tape> {
        Tape::with_tangents(false)
    }

    /// A tape that is only ever differentiated (`grad`, `vjp`), never
    /// replayed by a compiled step: its nodes keep no constant inputs.
    pub(crate) fn eager() -> Arc<Tape> {
        Tape::build(false, false)
    }

    /// Whether a compiled step may replay this tape (its nodes then keep
    /// the values of their constant inputs).
    pub(crate) fn is_replayed(&self) -> bool {
        self.replayed
    }

    /// A tape whose operations also record their tangent rules when
    /// `forward` (forward-mode differentiation).
    pub(crate) fn with_tangents(forward: bool) -> Arc<Tape> {
        Tape::build(forward, true)
    }

    /// A tape recording tangent rules when `forward`, replayable when
    /// `replayed`.
    fn build(forward: bool, replayed: bool) -> Arc<Tape> {
        Arc::new(Tape {
            forward,
            replayed,
            id: NEXT_TAPE_ID.fetch_add(1, Ordering::Relaxed),
            open: AtomicBool::new(true),
            nested: AtomicBool::new(false),
            read: AtomicBool::new(false),
            views: AtomicBool::new(false),
            nodes: Mutex::new(spare_nodes()),
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
        if node.view().is_some() {
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
    /// The tape of the differentiation that traces the tensor.
    pub(crate) tape: Arc<Tape>,
    /// The tensor's node on that tape.
    pub(crate) node: usize,
}
