//! The [`Tensor`] type: storage, construction, conversion, printing.

use std::fmt;
use std::sync::Arc;

use ndarray::{ArcArray, Array, ArrayD, ArrayViewD, Dimension, IxDyn};
use smallvec::SmallVec;

use super::error::{Result, TensorError};
use super::item_view::ItemView;
use super::ops::product_sum::{Factors, XlaOrigin};
use super::ops::soft_cross_entropy::MergedRows;
use super::tape::{
    Backward, DotFactors, FusedOuter, InputGrads, Node, NodeExtra, OpKind, TangentRule, Tracer,
};

/// An n-dimensional `f32` array that records the operations applied to it
/// while it is being differentiated.
///
/// Storage is shared: `clone` is O(1), and so are `reshape` of contiguous
/// data, `transpose`/`permute`, `slice` and `index_axis`, which return views
/// of the same buffer. A tensor is immutable; every operation makes a new
/// one.
///
/// ```
/// use flaxen::tensor::Tensor;
/// use ndarray::array;
///
/// let x = Tensor::from(array![[1.0f32, 2.0], [3.0, 4.0]]);
/// assert_eq!(x.shape(), &[2, 2]);
/// let y = (&x * &x).sum_all();
/// assert_eq!(y.item().unwrap(), 30.0);
/// let back: ndarray::Array2<f32> = x.to_array_fixed().unwrap();
/// assert_eq!(back, array![[1.0, 2.0], [3.0, 4.0]]);
/// ```
#[derive(Clone)]
pub struct Tensor {
    pub(crate) data: ArcArray<f32, IxDyn>,
    pub(crate) tracer: Option<Tracer>,
    /// A product's factors, kept in a compiled region for a sum that XLA
    /// fuses with it (see [`Tensor::with_factors`]).
    pub(crate) factors: Option<Arc<Factors>>,
    /// Where XLA's compiled graph makes this tensor, when that changes the
    /// order of a sum fused with a product of it (see [`XlaOrigin`]).
    pub(crate) origin: Option<XlaOrigin>,
    /// Rows of a loss whose total XLA merges into one reduction (see
    /// [`MergedRows`]).
    pub(crate) merged: Option<Arc<MergedRows>>,
}

impl Tensor {
    /// A tensor from an `ndarray` array of any dimensionality, without
    /// copying.
    pub fn from_array<D: Dimension>(array: Array<f32, D>) -> Tensor {
        Tensor::constant(array.into_dyn().into_shared())
    }

    /// A tensor with `shape` holding `data` in row-major (C) order.
    ///
    /// ```
    /// use flaxen::tensor::Tensor;
    ///
    /// let t = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).unwrap();
    /// assert_eq!(t.to_vec(), [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    /// assert!(Tensor::from_vec(vec![1.0], &[2]).is_err());
    /// ```
    pub fn from_vec(data: Vec<f32>, shape: &[usize]) -> Result<Tensor> {
        let n = data.len();
        Array::from_shape_vec(IxDyn(shape), data)
            .map(Tensor::from_array)
            .map_err(|_| TensorError::Reshape {
                op: "from_vec",
                from: vec![n],
                to: shape.iter().map(|&d| d as isize).collect(),
            })
    }

    /// A 0-dimensional tensor (shape `[]`).
    pub fn scalar(value: f32) -> Tensor {
        Tensor::full(&[], value)
    }

    /// A tensor of `shape` filled with `value`.
    ///
    /// # Panics
    ///
    /// When `shape` has more elements than memory can hold (with the
    /// error [`Tensor::try_full`] returns), instead of aborting the process
    /// as a failed allocation would. Use [`Tensor::try_full`] for shapes
    /// that come from outside.
    pub fn full(shape: &[usize], value: f32) -> Tensor {
        Tensor::try_full(shape, value).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::full`] that fails with a typed error, instead of aborting
    /// the process, when `shape` has too many elements or its memory cannot
    /// be allocated.
    ///
    /// ```
    /// use flaxen::tensor::Tensor;
    /// assert!(Tensor::try_full(&[1 << 40, 1 << 30], 0.0).is_err());
    /// assert_eq!(Tensor::try_full(&[2], 1.5).unwrap().to_vec(), [1.5, 1.5]);
    /// ```
    pub fn try_full(shape: &[usize], value: f32) -> Result<Tensor> {
        let mut v = super::shape::try_alloc("full", shape)?;
        v.resize(v.capacity(), value);
        Ok(Tensor::from_array(
            ArrayD::from_shape_vec(IxDyn(shape), v).expect("length of the shape"),
        ))
    }

    /// A tensor of zeros.
    ///
    /// # Panics
    ///
    /// As [`Tensor::full`]; [`Tensor::try_zeros`] returns the error.
    pub fn zeros(shape: &[usize]) -> Tensor {
        Tensor::full(shape, 0.0)
    }

    /// A tensor of ones.
    ///
    /// # Panics
    ///
    /// As [`Tensor::full`]; [`Tensor::try_ones`] returns the error.
    pub fn ones(shape: &[usize]) -> Tensor {
        Tensor::full(shape, 1.0)
    }

    /// [`Tensor::zeros`] that fails with a typed error when `shape` cannot
    /// be allocated.
    pub fn try_zeros(shape: &[usize]) -> Result<Tensor> {
        Tensor::try_full(shape, 0.0)
    }

    /// [`Tensor::ones`] that fails with a typed error when `shape` cannot
    /// be allocated.
    pub fn try_ones(shape: &[usize]) -> Result<Tensor> {
        Tensor::try_full(shape, 1.0)
    }

    /// The shape, one length per axis.
    pub fn shape(&self) -> &[usize] {
        self.data.shape()
    }

    /// The number of axes.
    pub fn ndim(&self) -> usize {
        self.data.ndim()
    }

    /// The number of elements (the product of the shape).
    pub fn size(&self) -> usize {
        self.data.len()
    }

    /// A read-only view of the values.
    pub fn view(&self) -> ArrayViewD<'_, f32> {
        self.note_read();
        self.data.view()
    }

    /// The values as an owned `ndarray` array (a copy).
    pub fn to_array(&self) -> ArrayD<f32> {
        self.note_read();
        self.data.to_owned()
    }

    /// Notes on its tape that a traced tensor's values were read: a
    /// compiled step that did so is not replayed (it would bake in the
    /// branch taken while tracing, where JAX raises a concretization error).
    /// Operations whose result depends on the values without being
    /// recorded (comparisons, `argmax`) note it too.
    pub(crate) fn note_read(&self) {
        if let Some(tr) = &self.tracer {
            if tr.tape.is_open() {
                tr.tape.mark_read();
            }
        }
    }

    /// The values as an owned `ndarray` array; copies only when the storage
    /// is shared with another tensor. The array's logical contents are the
    /// tensor's; its memory order may differ from row-major after
    /// `transpose`, so use `to_vec` when a flat row-major buffer is needed.
    pub fn into_array(self) -> ArrayD<f32> {
        self.note_read();
        self.data.into_owned()
    }

    /// The values as an array of fixed dimensionality (`Array2<f32>`, ...).
    ///
    /// Fails with [`TensorError::Reshape`] when the number of axes differs.
    pub fn to_array_fixed<D: Dimension>(&self) -> Result<Array<f32, D>> {
        self.to_array()
            .into_dimensionality::<D>()
            .map_err(|_| TensorError::Reshape {
                op: "to_array_fixed",
                from: self.shape().to_vec(),
                to: D::NDIM
                    .map(|n| vec![-1; n])
                    .unwrap_or_else(|| self.shape().iter().map(|&d| d as isize).collect()),
            })
    }

    /// The values in row-major (C) order.
    pub fn to_vec(&self) -> Vec<f32> {
        self.note_read();
        self.data.iter().copied().collect()
    }

    /// The single value of a one-element tensor.
    ///
    /// ```
    /// use flaxen::tensor::Tensor;
    /// assert_eq!(Tensor::scalar(2.5).item().unwrap(), 2.5);
    /// assert!(Tensor::zeros(&[2]).item().is_err());
    /// ```
    pub fn item(&self) -> Result<f32> {
        self.note_read();
        if self.size() == 1 {
            Ok(*self.data.iter().next().unwrap())
        } else {
            Err(TensorError::Argument {
                op: "item",
                message: format!("a tensor of shape {:?} has no single value", self.shape()),
            })
        }
    }

    /// Whether operations on this tensor are being recorded by a running
    /// `grad`/`value_and_grad`/`vjp` call (true inside the function being
    /// differentiated, for the tree's tensors and what is computed from
    /// them).
    pub fn is_traced(&self) -> bool {
        self.tracer.as_ref().is_some_and(|tr| tr.tape.is_open())
    }

    /// An untraced tensor over `data`.
    pub(crate) fn constant(data: ArcArray<f32, IxDyn>) -> Tensor {
        Tensor {
            data,
            tracer: None,
            factors: None,
            origin: None,
            merged: None,
        }
    }

    /// Records an operation with output `value` on the tape of its traced
    /// inputs (the innermost one when they come from nested calls; inputs of
    /// other or closed tapes count as constants). Without traced inputs nothing is
    /// recorded and `backward` is dropped.
    #[track_caller]
    pub(crate) fn record<B>(value: ArcArray<f32, IxDyn>, inputs: &[&Tensor], backward: B) -> Tensor
    where
        B: Fn(ArrayD<f32>, &[bool]) -> InputGrads + Send + Sync + 'static,
    {
        Tensor::record_kind(value, inputs, OpKind::Other, backward)
    }

    /// [`record`](Tensor::record) for an operation a compiled step can
    /// replay; keeps the values of its constant inputs.
    #[track_caller]
    pub(crate) fn record_kind<B>(
        value: ArcArray<f32, IxDyn>,
        inputs: &[&Tensor],
        kind: OpKind,
        backward: B,
    ) -> Tensor
    where
        B: Fn(ArrayD<f32>, &[bool]) -> InputGrads + Send + Sync + 'static,
    {
        Tensor::record_fused(value, inputs, kind, backward, None, None)
    }

    /// [`record_kind`](Tensor::record_kind) with an input cotangent that is
    /// fused into its accumulation (see [`FusedOuter`]) and the factors of
    /// a matrix product's cotangents (see [`DotFactors`]).
    #[track_caller]
    pub(crate) fn record_fused<B>(
        value: ArcArray<f32, IxDyn>,
        inputs: &[&Tensor],
        kind: OpKind,
        backward: B,
        fused: Option<FusedOuter>,
        dot: Option<DotFactors>,
    ) -> Tensor
    where
        B: Fn(ArrayD<f32>, &[bool]) -> InputGrads + Send + Sync + 'static,
    {
        Tensor::record_node(
            value,
            inputs,
            kind,
            Backward::Rule(Box::new(backward)),
            fused,
            dot,
            None,
        )
    }

    /// [`record_kind`](Tensor::record_kind) with a built-in backward rule
    /// (not a boxed closure).
    #[track_caller]
    pub(crate) fn record_builtin(
        value: ArcArray<f32, IxDyn>,
        inputs: &[&Tensor],
        kind: OpKind,
        backward: Backward,
    ) -> Tensor {
        Tensor::record_node(value, inputs, kind, backward, None, None, None)
    }

    /// [`with_tangent`](Tensor::with_tangent) for a rule made from the
    /// recorded output itself.
    pub(crate) fn with_tangent_of(self, rule: impl FnOnce(&Tensor) -> TangentRule) -> Tensor {
        if let Some(tr) = &self.tracer {
            if tr.tape.records_tangents() && tr.tape.is_open() {
                let rule = rule(&self);
                tr.tape.nodes()[tr.node].set_tangent(rule);
            }
        }
        self
    }

    /// Attaches a tangent rule (made only when needed) to this freshly
    /// recorded tensor's node, when its tape does forward-mode
    /// differentiation ([`jvp`](super::jvp), [`linearize`](super::linearize)).
    /// Call it only on the result of a `record*` call.
    pub(crate) fn with_tangent(self, rule: impl FnOnce() -> TangentRule) -> Tensor {
        if let Some(tr) = &self.tracer {
            if tr.tape.records_tangents() && tr.tape.is_open() {
                tr.tape.nodes()[tr.node].set_tangent(rule());
            }
        }
        self
    }

    /// An item's view of a shared tensor (see [`Tensor::item_view`]): the
    /// same values, its own node.
    #[track_caller]
    pub(crate) fn record_view(shared: &Tensor, view: ItemView, kind: OpKind) -> Tensor {
        Tensor::record_node(
            shared.data.clone(),
            &[shared],
            kind,
            Backward::Rule(Box::new(|g, _| smallvec::smallvec![Some(g)])),
            None,
            None,
            Some(view),
        )
        .with_tangent(|| super::forward::linear(|t| Ok(t.clone())))
    }

    #[track_caller]
    fn record_node(
        value: ArcArray<f32, IxDyn>,
        inputs: &[&Tensor],
        kind: OpKind,
        backward: Backward,
        fused: Option<FusedOuter>,
        dot: Option<DotFactors>,
        view: Option<ItemView>,
    ) -> Tensor {
        super::debug_nans::note(&value, inputs, &kind, std::panic::Location::caller());
        let Some(tape) = inputs
            .iter()
            .filter_map(|t| t.tracer.as_ref())
            .filter(|tr| tr.tape.is_open())
            .max_by_key(|tr| tr.tape.id)
            .map(|tr| tr.tape.clone())
        else {
            return Tensor::constant(value);
        };
        let mixes_tapes = inputs
            .iter()
            .filter_map(|t| t.tracer.as_ref())
            .any(|tr| tr.tape.is_open() && tr.tape.id != tape.id);
        if mixes_tapes {
            tape.mark_nested();
        }
        let id_of = |t: &Tensor| {
            t.tracer
                .as_ref()
                .filter(|tr| Arc::ptr_eq(&tr.tape, &tape))
                .map(|tr| tr.node)
        };
        // One or two inputs written in place: collecting into the small
        // vector cost ~100 instructions per recorded operation.
        let ids: SmallVec<[Option<usize>; 2]> = match inputs {
            [a] => SmallVec::from_buf_and_len([id_of(a), None], 1),
            [a, b] => SmallVec::from_buf([id_of(a), id_of(b)]),
            _ => inputs.iter().map(|t| id_of(t)).collect(),
        };
        let consts =
            if kind == OpKind::Other || ids.iter().all(Option::is_some) || !tape.is_replayed() {
                Vec::new()
            } else {
                ids.iter()
                    .zip(inputs)
                    .map(|(id, t)| id.is_none().then(|| t.data.clone()))
                    .collect()
            };
        let node = tape.push(Node {
            inputs: ids,
            backward: Some(backward),
            kind,
            extra: NodeExtra::boxed(consts, fused, dot, view),
            site: std::panic::Location::caller(),
        });
        Tensor {
            data: value,
            tracer: Some(Tracer { tape, node }),
            factors: None,
            origin: None,
            merged: None,
        }
    }
}

impl<D: Dimension> From<Array<f32, D>> for Tensor {
    fn from(array: Array<f32, D>) -> Tensor {
        Tensor::from_array(array)
    }
}

impl From<f32> for Tensor {
    fn from(value: f32) -> Tensor {
        Tensor::scalar(value)
    }
}

impl From<Tensor> for ArrayD<f32> {
    fn from(t: Tensor) -> ArrayD<f32> {
        t.into_array()
    }
}

/// NumPy-style, as `print(x)` shows a JAX array:
///
/// ```
/// use flaxen::tensor::Tensor;
/// let t = Tensor::from_vec(vec![1.0, -2.5], &[2]).unwrap();
/// println!("{t}");
/// ```
impl fmt::Display for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&crate::array_format::format_array(&self.data.view()))
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tensor")
            .field("shape", &self.shape())
            .field("traced", &self.is_traced())
            .field("data", &format_args!("{self}"))
            .finish()
    }
}
