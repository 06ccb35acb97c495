//! The error type of `flaxen::random::tf`.

use std::fmt;

use super::Algorithm;

/// Everything a caller can get wrong with TensorFlow-style random numbers.
///
/// Each variant corresponds to an input that TensorFlow refuses too, or to a
/// restored state that cannot belong to a generator.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TfRandomError {
    /// A stateless seed that does not have shape `[2]`.
    SeedShape {
        /// The number of elements the seed had.
        len: usize,
    },
    /// An integer range whose lower end is not below its upper end.
    EmptyRange {
        /// The lower end, printed.
        minval: String,
        /// The upper end, printed.
        maxval: String,
    },
    /// A bounded integer range on an unsigned dtype (TensorFlow refuses these).
    UnsignedRange {
        /// The dtype's name (`"uint32"` or `"uint64"`).
        dtype: &'static str,
    },
    /// A generator state with the wrong number of elements for its algorithm.
    StateLength {
        /// The algorithm of the generator.
        alg: Algorithm,
        /// The length that algorithm needs.
        expected: usize,
        /// The length given.
        got: usize,
    },
    /// A saved state of another algorithm than the generator's.
    AlgorithmMismatch {
        /// The generator's algorithm.
        expected: Algorithm,
        /// The saved state's algorithm.
        got: Algorithm,
    },
    /// A numeric algorithm id that is not one of TensorFlow's (1, 2, 3).
    UnknownAlgorithm {
        /// The id given.
        id: i64,
    },
    /// An algorithm name that is not one of TensorFlow's (`"philox"`,
    /// `"threefry"`, `"auto_select"`, compared as TF does: case, spaces,
    /// `-` and `_` ignored).
    UnknownAlgorithmName {
        /// The name given.
        name: String,
    },
    /// An algorithm that this operation cannot run, as TensorFlow's CPU
    /// kernels refuse ThreeFry.
    UnsupportedAlgorithm {
        /// The operation.
        op: &'static str,
        /// The algorithm given.
        alg: Algorithm,
    },
    /// A dtype name that is not one of the operation's dtypes.
    UnknownDType {
        /// The name given.
        name: String,
    },
    /// An integer draw without `maxval` (TensorFlow's default `None`, which
    /// integer dtypes refuse).
    MissingMaxval {
        /// The dtype's name.
        dtype: &'static str,
    },
    /// A bound that the dtype cannot hold.
    BoundOutOfRange {
        /// The bound given.
        value: i64,
        /// The dtype's name.
        dtype: &'static str,
    },
    /// The shape's element count does not fit in `usize`.
    ShapeOverflow {
        /// The requested shape.
        shape: Vec<usize>,
    },
    /// An array of this shape cannot be allocated.
    OutOfMemory {
        /// The requested shape.
        shape: Vec<usize>,
        /// The bytes it needs.
        bytes: usize,
    },
    /// A distribution strategy over no devices, or naming one twice.
    StrategyDevices {
        /// The devices given.
        devices: Vec<String>,
    },
    /// A replica id outside `0..replicas`.
    ReplicaOutOfRange {
        /// The replica asked for.
        replica: usize,
        /// The number of replicas.
        replicas: usize,
    },
}

impl fmt::Display for TfRandomError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TfRandomError::SeedShape { len } => write!(
                f,
                "a stateless seed must have shape [2], got {len} element(s)"
            ),
            TfRandomError::EmptyRange { minval, maxval } => write!(
                f,
                "need minval < maxval, got minval = {minval} and maxval = {maxval}"
            ),
            TfRandomError::UnsignedRange { dtype } => write!(
                f,
                "a bounded range is not supported for the unsigned dtype {dtype}; \
                 use a full-range draw instead"
            ),
            TfRandomError::StateLength { alg, expected, got } => write!(
                f,
                "a {alg:?} generator state has {expected} elements, got {got}"
            ),
            TfRandomError::AlgorithmMismatch { expected, got } => write!(
                f,
                "cannot restore a {got:?} state into a {expected:?} generator"
            ),
            TfRandomError::UnknownAlgorithm { id } => {
                write!(f, "unknown RNG algorithm id {id} (expected 1, 2 or 3)")
            }
            TfRandomError::UnknownAlgorithmName { name } => write!(
                f,
                "unknown RNG algorithm {name:?} (expected \"philox\", \"threefry\" or \"auto_select\")"
            ),
            TfRandomError::UnsupportedAlgorithm { op, alg } => write!(
                f,
                "{op} does not support the {alg:?} algorithm on CPU (TensorFlow's CPU kernels run Philox only)"
            ),
            TfRandomError::UnknownDType { name } => write!(
                f,
                "unknown dtype {name:?} (expected int32, int64, uint32 or uint64)"
            ),
            TfRandomError::MissingMaxval { dtype } => write!(
                f,
                "an integer draw of dtype {dtype} needs maxval (it has no default)"
            ),
            TfRandomError::BoundOutOfRange { value, dtype } => {
                write!(f, "the bound {value} does not fit in dtype {dtype}")
            }
            TfRandomError::OutOfMemory { shape, bytes } => write!(
                f,
                "cannot allocate {bytes} bytes for an array of shape {shape:?}"
            ),
            TfRandomError::StrategyDevices { devices } => write!(
                f,
                "a MirroredStrategy needs one or more distinct devices, got {devices:?}"
            ),
            TfRandomError::ReplicaOutOfRange { replica, replicas } => write!(
                f,
                "replica {replica} out of range: the strategy has {replicas} replicas"
            ),
            TfRandomError::ShapeOverflow { shape } => {
                write!(f, "the shape {shape:?} has more elements than fit in usize")
            }
        }
    }
}

impl std::error::Error for TfRandomError {}
