//! The error type of `flaxen::tensor`.

use std::fmt;

/// Everything a caller can get wrong when computing with tensors.
///
/// Methods return it; the arithmetic operators (`+ - * /` on tensors), which
/// cannot return a `Result`, panic with exactly its [`Display`](fmt::Display)
/// message.
///
/// ```
/// use flaxen::tensor::{Tensor, TensorError};
///
/// let a = Tensor::zeros(&[2, 3]);
/// let b = Tensor::zeros(&[4]);
/// let err = a.add(&b).unwrap_err();
/// assert!(matches!(err, TensorError::Incompatible { .. }));
/// assert_eq!(err.to_string(), "add: incompatible shapes [2, 3] and [4]");
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum TensorError {
    /// Two shapes that the operation cannot combine (broadcasting, matmul,
    /// concatenation, `select`).
    Incompatible {
        /// The operation.
        op: &'static str,
        /// The first operand's shape.
        lhs: Vec<usize>,
        /// The second operand's shape.
        rhs: Vec<usize>,
    },
    /// An axis that the tensor does not have.
    Axis {
        /// The operation.
        op: &'static str,
        /// The requested axis (negative counts from the end).
        axis: isize,
        /// The tensor's number of dimensions.
        ndim: usize,
    },
    /// A target shape with a different number of elements, or that the
    /// source shape cannot be broadcast to.
    Reshape {
        /// The operation.
        op: &'static str,
        /// The tensor's shape.
        from: Vec<usize>,
        /// The requested shape, as given (`-1` is "infer").
        to: Vec<isize>,
    },
    /// Any other invalid argument (an empty list of tensors, an index out of
    /// bounds, a permutation that is not one).
    Argument {
        /// The operation.
        op: &'static str,
        /// What is wrong.
        message: String,
    },
    /// `grad` or `value_and_grad` of a function whose result is not a scalar
    /// (shape `[]`).
    NotScalar {
        /// The shape the function returned.
        shape: Vec<usize>,
    },
    /// Two trees that do not have the same structure.
    TreeStructure {
        /// Where they differ.
        message: String,
    },
    /// A path that is not in the tree, or that names a subtree rather than a
    /// tensor.
    MissingKey {
        /// The path asked for.
        path: String,
    },
    /// Under [`set_debug_nans`](super::set_debug_nans): the first operation
    /// whose output held a NaN.
    NanProduced {
        /// The operation (`log`, `div`, ...).
        op: String,
        /// The shapes of its inputs.
        input_shapes: Vec<Vec<usize>>,
    },
}

impl fmt::Display for TensorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TensorError::Incompatible { op, lhs, rhs } => {
                write!(f, "{op}: incompatible shapes {lhs:?} and {rhs:?}")
            }
            TensorError::Axis { op, axis, ndim } => write!(
                f,
                "{op}: axis {axis} is out of range for a tensor with {ndim} dimensions"
            ),
            TensorError::Reshape { op, from, to } => {
                write!(f, "{op}: cannot turn shape {from:?} into {to:?}")
            }
            TensorError::Argument { op, message } => write!(f, "{op}: {message}"),
            TensorError::NotScalar { shape } => write!(
                f,
                "grad requires a function with a scalar (shape []) result, got shape {shape:?}"
            ),
            TensorError::TreeStructure { message } => {
                write!(f, "trees differ in structure: {message}")
            }
            TensorError::MissingKey { path } => write!(f, "no tensor at path {path:?}"),
            TensorError::NanProduced { op, input_shapes } => write!(
                f,
                "debug_nans: {op} produced a NaN (input shapes {input_shapes:?})"
            ),
        }
    }
}

impl std::error::Error for TensorError {}

/// `Result` with [`TensorError`].
pub type Result<T> = std::result::Result<T, TensorError>;
