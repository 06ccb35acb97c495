//! NumPy arrays as Flax's checkpoints hold them: a dtype name, a shape and
//! the row-major bytes (`arr.tobytes('C')`, little-endian on every machine
//! Flax runs on).

use std::fmt;

use ndarray::{ArcArray, IxDyn};

use super::error::SerializationError;
use crate::random::ThreefryMode;
use crate::tensor::{Array, Tensor};

/// A NumPy dtype a checkpoint can hold, by its name (`arr.dtype.name`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NpDType {
    /// `bool`.
    Bool,
    /// `int8`.
    Int8,
    /// `int16`.
    Int16,
    /// `int32`.
    Int32,
    /// `int64`.
    Int64,
    /// `uint8`.
    UInt8,
    /// `uint16`.
    UInt16,
    /// `uint32`.
    UInt32,
    /// `uint64`.
    UInt64,
    /// `float16`.
    Float16,
    /// `bfloat16` (JAX's, from `ml_dtypes`).
    BFloat16,
    /// `float32`.
    Float32,
    /// `float64`.
    Float64,
}

const DTYPES: [NpDType; 13] = [
    NpDType::Bool,
    NpDType::Int8,
    NpDType::Int16,
    NpDType::Int32,
    NpDType::Int64,
    NpDType::UInt8,
    NpDType::UInt16,
    NpDType::UInt32,
    NpDType::UInt64,
    NpDType::Float16,
    NpDType::BFloat16,
    NpDType::Float32,
    NpDType::Float64,
];

impl NpDType {
    /// NumPy's name.
    pub fn name(self) -> &'static str {
        match self {
            NpDType::Bool => "bool",
            NpDType::Int8 => "int8",
            NpDType::Int16 => "int16",
            NpDType::Int32 => "int32",
            NpDType::Int64 => "int64",
            NpDType::UInt8 => "uint8",
            NpDType::UInt16 => "uint16",
            NpDType::UInt32 => "uint32",
            NpDType::UInt64 => "uint64",
            NpDType::Float16 => "float16",
            NpDType::BFloat16 => "bfloat16",
            NpDType::Float32 => "float32",
            NpDType::Float64 => "float64",
        }
    }

    /// The dtype with NumPy's name `name`.
    pub fn from_name(name: &str) -> Option<NpDType> {
        DTYPES.into_iter().find(|d| d.name() == name)
    }

    /// Bytes per element.
    pub fn itemsize(self) -> usize {
        match self {
            NpDType::Bool | NpDType::Int8 | NpDType::UInt8 => 1,
            NpDType::Int16 | NpDType::UInt16 | NpDType::Float16 | NpDType::BFloat16 => 2,
            NpDType::Int32 | NpDType::UInt32 | NpDType::Float32 => 4,
            NpDType::Int64 | NpDType::UInt64 | NpDType::Float64 => 8,
        }
    }
}

impl fmt::Display for NpDType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A NumPy array: dtype, shape and little-endian row-major bytes. The bytes
/// are kept as read, so every dtype round-trips, also those flaxen's
/// variables cannot hold (`float64`, `int64`, 16-bit floats).
///
/// ```
/// use flaxen::serialization::{NpArray, NpDType};
/// use flaxen::tensor::Tensor;
///
/// let a = NpArray::from_tensor(&Tensor::from_vec(vec![1.0, 2.0], &[2])?);
/// assert_eq!((a.dtype(), a.shape()), (NpDType::Float32, &[2][..]));
/// assert_eq!(a.to_tensor("x")?.to_vec(), [1.0, 2.0]);
/// assert!(NpArray::new(NpDType::Float32, vec![3], vec![0; 8]).is_err());
/// # Ok::<(), flaxen::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NpArray {
    dtype: NpDType,
    shape: Vec<usize>,
    data: Vec<u8>,
}

/// `shape`'s element count times `itemsize`, if it does not overflow.
pub(crate) fn byte_len(shape: &[usize], itemsize: usize) -> Option<usize> {
    shape
        .iter()
        .try_fold(itemsize, |acc, &d| acc.checked_mul(d))
}

impl NpArray {
    /// An array from its parts; the data must be exactly
    /// `product(shape) × itemsize` bytes.
    pub fn new(
        dtype: NpDType,
        shape: Vec<usize>,
        data: Vec<u8>,
    ) -> Result<NpArray, SerializationError> {
        Self::checked(dtype, shape, data, "")
    }

    pub(crate) fn checked(
        dtype: NpDType,
        shape: Vec<usize>,
        data: Vec<u8>,
        path: &str,
    ) -> Result<NpArray, SerializationError> {
        if byte_len(&shape, dtype.itemsize()) != Some(data.len()) {
            return Err(SerializationError::ArrayData {
                path: path.to_string(),
                dtype: dtype.name().to_string(),
                shape,
                bytes: data.len(),
            });
        }
        Ok(NpArray { dtype, shape, data })
    }

    /// The dtype.
    pub fn dtype(&self) -> NpDType {
        self.dtype
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The little-endian, row-major bytes.
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.data.len() / self.dtype.itemsize()
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// A `float32` array of the tensor's values.
    pub fn from_tensor(t: &Tensor) -> NpArray {
        let data = t.to_vec().iter().flat_map(|x| x.to_le_bytes()).collect();
        NpArray {
            dtype: NpDType::Float32,
            shape: t.shape().to_vec(),
            data,
        }
    }

    /// The array of an [`Array`]; keys become their `uint32` key data
    /// (shape `[..., 2]`, as `jax.random.key_data` gives: Flax cannot
    /// write typed keys, so users store the data).
    pub fn from_array(a: &Array) -> NpArray {
        fn le<T: Copy, const N: usize>(
            a: &ArcArray<T, IxDyn>,
            to: impl Fn(T) -> [u8; N],
        ) -> Vec<u8> {
            a.iter().flat_map(|&x| to(x)).collect()
        }
        let (dtype, shape, data) = match a {
            Array::I32(x) => (NpDType::Int32, x.shape(), le(x, i32::to_le_bytes)),
            Array::U32(x) => (NpDType::UInt32, x.shape(), le(x, u32::to_le_bytes)),
            Array::Bool(x) => (NpDType::Bool, x.shape(), le(x, |b| [u8::from(b)])),
            Array::Key { data, .. } => (NpDType::UInt32, data.shape(), le(data, u32::to_le_bytes)),
        };
        NpArray {
            dtype,
            shape: shape.to_vec(),
            data,
        }
    }

    /// The values as a tensor, if the dtype is `float32`
    /// ([`SerializationError::UnsupportedDType`] naming `path` otherwise).
    pub fn to_tensor(&self, path: &str) -> Result<Tensor, SerializationError> {
        if self.dtype != NpDType::Float32 {
            return Err(self.dtype_error(path, "float32"));
        }
        let v: Vec<f32> = self
            .data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        Ok(Tensor::from_vec(v, &self.shape).expect("length checked at construction"))
    }

    /// The values as an [`Array`] of the kind of `like` (same dtype; a key
    /// target takes `uint32` key data of shape `[..., 2]` and keeps its
    /// Threefry mode).
    pub fn to_array_like(&self, like: &Array, path: &str) -> Result<Array, SerializationError> {
        let shape = IxDyn(&self.shape);
        let words = |d: &[u8]| -> Vec<u32> {
            d.chunks_exact(4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect()
        };
        let out = match (like, self.dtype) {
            (Array::I32(_), NpDType::Int32) => {
                let v = self
                    .data
                    .chunks_exact(4)
                    .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect();
                Array::I32(ArcArray::from_shape_vec(shape, v).expect("length checked"))
            }
            (Array::U32(_), NpDType::UInt32) => Array::U32(
                ArcArray::from_shape_vec(shape, words(&self.data)).expect("length checked"),
            ),
            (Array::Bool(_), NpDType::Bool) => {
                let v = self.data.iter().map(|&b| b != 0).collect();
                Array::Bool(ArcArray::from_shape_vec(shape, v).expect("length checked"))
            }
            (Array::Key { mode, .. }, NpDType::UInt32) if self.shape.last() == Some(&2) => {
                let mode: ThreefryMode = *mode;
                Array::Key {
                    data: ArcArray::from_shape_vec(shape, words(&self.data))
                        .expect("length checked"),
                    mode,
                }
            }
            (Array::Key { .. }, NpDType::UInt32) => {
                return Err(SerializationError::Kind {
                    path: path.to_string(),
                    expected: "uint32 key data of shape [..., 2]".into(),
                    got: format!("uint32{:?}", self.shape),
                })
            }
            _ => return Err(self.dtype_error(path, like.dtype())),
        };
        Ok(out)
    }

    fn dtype_error(&self, path: &str, expected: &str) -> SerializationError {
        SerializationError::UnsupportedDType {
            path: path.to_string(),
            dtype: self.dtype.name().to_string(),
            expected: expected.to_string(),
        }
    }
}
