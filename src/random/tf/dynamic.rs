//! TensorFlow's `dtype=` argument chosen at run time: the integer dtypes,
//! arrays of either kind, and the conversions of Python-style scalar
//! arguments to the dtype. Float dtypes and arrays are
//! [`crate::random::FloatDType`] and [`crate::random::FloatArray`], shared
//! with JAX's samplers (16-bit values as the `half` crate's types).

use std::fmt;
use std::str::FromStr;

use ndarray::ArrayD;

use super::error::TfRandomError;
use super::half::{BF16, F16};

/// An integer dtype of TensorFlow's random ops, chosen at run time.
///
/// Parses from TensorFlow's names:
///
/// ```
/// use flaxen::random::tf::TfIntDType;
/// let d: TfIntDType = "uint64".parse().unwrap();
/// assert_eq!(d, TfIntDType::UInt64);
/// assert!("int8".parse::<TfIntDType>().is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TfIntDType {
    /// `tf.int32`.
    Int32,
    /// `tf.int64`.
    Int64,
    /// `tf.uint32`.
    UInt32,
    /// `tf.uint64`.
    UInt64,
}

impl TfIntDType {
    /// TensorFlow's name of the dtype.
    pub fn name(self) -> &'static str {
        match self {
            TfIntDType::Int32 => "int32",
            TfIntDType::Int64 => "int64",
            TfIntDType::UInt32 => "uint32",
            TfIntDType::UInt64 => "uint64",
        }
    }
}

impl fmt::Display for TfIntDType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for TfIntDType {
    type Err = TfRandomError;

    /// An integer dtype from its name; anything else is
    /// [`TfRandomError::UnknownDType`].
    fn from_str(name: &str) -> Result<Self, TfRandomError> {
        Ok(match name {
            "int32" => TfIntDType::Int32,
            "int64" => TfIntDType::Int64,
            "uint32" => TfIntDType::UInt32,
            "uint64" => TfIntDType::UInt64,
            _ => {
                return Err(TfRandomError::UnknownDType {
                    name: name.to_string(),
                })
            }
        })
    }
}

/// An integer array of the dtype a run-time draw produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IntArray {
    /// `int32` values.
    I32(ArrayD<i32>),
    /// `int64` values.
    I64(ArrayD<i64>),
    /// `uint32` values.
    U32(ArrayD<u32>),
    /// `uint64` values.
    U64(ArrayD<u64>),
}

impl IntArray {
    /// The dtype of the values.
    pub fn dtype(&self) -> TfIntDType {
        match self {
            IntArray::I32(_) => TfIntDType::Int32,
            IntArray::I64(_) => TfIntDType::Int64,
            IntArray::U32(_) => TfIntDType::UInt32,
            IntArray::U64(_) => TfIntDType::UInt64,
        }
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        match self {
            IntArray::I32(a) => a.shape(),
            IntArray::I64(a) => a.shape(),
            IntArray::U32(a) => a.shape(),
            IntArray::U64(a) => a.shape(),
        }
    }

    /// The values, exactly, as `i128`.
    pub fn to_i128(&self) -> ArrayD<i128> {
        match self {
            IntArray::I32(a) => a.mapv(i128::from),
            IntArray::I64(a) => a.mapv(i128::from),
            IntArray::U32(a) => a.mapv(i128::from),
            IntArray::U64(a) => a.mapv(i128::from),
        }
    }
}

/// A Python float argument (`mean`, `minval`, …) converted to the dtype as
/// TensorFlow converts it: to `float32` first, then to a 16-bit dtype (two
/// roundings, which differ from one just past a tie of the 16-bit type).
pub(crate) trait FromF64 {
    fn from_f64(x: f64) -> Self;
}

impl FromF64 for f32 {
    fn from_f64(x: f64) -> f32 {
        x as f32
    }
}

impl FromF64 for f64 {
    fn from_f64(x: f64) -> f64 {
        x
    }
}

impl FromF64 for F16 {
    fn from_f64(x: f64) -> F16 {
        F16::from_f32(x as f32)
    }
}

impl FromF64 for BF16 {
    fn from_f64(x: f64) -> BF16 {
        BF16::from_f32(x as f32)
    }
}

/// A Python int argument converted to the dtype; a value the dtype cannot
/// hold is refused (TensorFlow refuses it while converting, before any
/// state moves).
pub(crate) trait FromI64: Sized {
    fn from_i64(x: i64, dtype: TfIntDType) -> Result<Self, TfRandomError>;
}

macro_rules! from_i64 {
    ($($t:ty),*) => {$(
        impl FromI64 for $t {
            fn from_i64(x: i64, dtype: TfIntDType) -> Result<$t, TfRandomError> {
                <$t>::try_from(x).map_err(|_| TfRandomError::BoundOutOfRange {
                    value: x,
                    dtype: dtype.name(),
                })
            }
        }
    )*};
}
from_i64!(i32, i64, u32, u64);

/// TensorFlow's 16-bit float arrays are the `half` crate's already.
pub(crate) fn f16_array(a: ArrayD<F16>) -> ArrayD<half::f16> {
    a
}

/// See [`f16_array`].
pub(crate) fn bf16_array(a: ArrayD<BF16>) -> ArrayD<half::bf16> {
    a
}

/// Runs `$body` with the type `$t` of a run-time float dtype and wraps its
/// `Result<ArrayD<$t>, _>` as a [`crate::random::FloatArray`].
macro_rules! dispatch_float {
    ($dtype:expr, |$t:ident| $body:expr) => {{
        use $crate::random::tf::dynamic::{bf16_array, f16_array};
        match $dtype {
            FloatDType::Float16 => {
                type $t = $crate::random::tf::F16;
                $body.map(|a| FloatArray::F16(f16_array(a)))
            }
            FloatDType::BFloat16 => {
                type $t = $crate::random::tf::BF16;
                $body.map(|a| FloatArray::BF16(bf16_array(a)))
            }
            FloatDType::Float32 => {
                type $t = f32;
                $body.map(FloatArray::F32)
            }
            FloatDType::Float64 => {
                type $t = f64;
                $body.map(FloatArray::F64)
            }
        }
    }};
}

/// Runs `$body` with the type `$t` of a run-time integer dtype and wraps
/// its `Result<ArrayD<$t>, _>` as an [`IntArray`].
macro_rules! dispatch_int {
    ($dtype:expr, |$t:ident| $body:expr) => {{
        match $dtype {
            TfIntDType::Int32 => {
                type $t = i32;
                $body.map(IntArray::I32)
            }
            TfIntDType::Int64 => {
                type $t = i64;
                $body.map(IntArray::I64)
            }
            TfIntDType::UInt32 => {
                type $t = u32;
                $body.map(IntArray::U32)
            }
            TfIntDType::UInt64 => {
                type $t = u64;
                $body.map(IntArray::U64)
            }
        }
    }};
}

pub(crate) use {dispatch_float, dispatch_int};
