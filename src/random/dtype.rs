//! JAX's dtypes for samplers: the element types `bits` and the float
//! samplers can return, as sealed traits ([`UInt`], [`Float`]) for the
//! typed API and as enums ([`UIntDType`], [`FloatDType`]) for a dtype
//! chosen at run time, and JAX's `jax_enable_x64` switch ([`X64`]).
//!
//! Each [`Float`] type carries the arithmetic XLA's CPU backend does in
//! that dtype: `float32` and `float64` natively (a multiply fused into the
//! add that consumes it), `float16` and `bfloat16` one operation at a time
//! in `f32`, rounded back after each (XLA converts `bfloat16` operations so;
//! LLVM promotes `half` operations so on x86 without AVX512-FP16; with it,
//! `float16` is native and a multiply is fused into its add, see
//! `native_f16`), and the special functions of [`crate::xla::math`] in
//! `f32` for both 16-bit types.

use std::fmt;
use std::str::FromStr;

use half::{bf16, f16};

use super::error::RandomError;
use crate::xla::math as m32;
use crate::xla::math_f64 as m64;

/// JAX's `jax_enable_x64`: whether 64-bit dtypes exist.
///
/// Without it (JAX's default) JAX silently computes a `float64` request as
/// `float32` and a `uint64` request as `uint32`; the run-time dtype API
/// ([`FloatDType::canonical`], [`super::uniform_dtype`], ...) does the same,
/// and returns the 32-bit array JAX returns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum X64 {
    /// `jax_enable_x64=False`, JAX's default: 64-bit requests become 32-bit.
    #[default]
    Disabled,
    /// `jax_enable_x64=True`.
    Enabled,
}

/// A float dtype JAX's samplers accept, chosen at run time.
///
/// Parses from JAX's (NumPy's) names: `"float16"`, `"bfloat16"`,
/// `"float32"`, `"float64"`.
///
/// ```
/// use flaxen::random::{FloatDType, X64};
/// let d: FloatDType = "float64".parse().unwrap();
/// assert_eq!(d.canonical(X64::Disabled), FloatDType::Float32);
/// assert!("float8".parse::<FloatDType>().is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FloatDType {
    /// IEEE half precision, [`half::f16`].
    Float16,
    /// bfloat16, [`half::bf16`].
    BFloat16,
    /// `f32`.
    Float32,
    /// `f64`.
    Float64,
}

/// An unsigned integer dtype for `bits`, chosen at run time.
///
/// Parses from `"uint8"`, `"uint16"`, `"uint32"`, `"uint64"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UIntDType {
    /// `u8`.
    UInt8,
    /// `u16`.
    UInt16,
    /// `u32`.
    UInt32,
    /// `u64`.
    UInt64,
}

impl FloatDType {
    /// JAX's name of the dtype.
    pub fn name(self) -> &'static str {
        match self {
            FloatDType::Float16 => "float16",
            FloatDType::BFloat16 => "bfloat16",
            FloatDType::Float32 => "float32",
            FloatDType::Float64 => "float64",
        }
    }

    /// The dtype JAX computes in: `float64` becomes `float32` unless x64
    /// is enabled (JAX's `dtypes.canonicalize_dtype`).
    pub fn canonical(self, x64: X64) -> FloatDType {
        match (self, x64) {
            (FloatDType::Float64, X64::Disabled) => FloatDType::Float32,
            (d, _) => d,
        }
    }
}

impl UIntDType {
    /// JAX's name of the dtype.
    pub fn name(self) -> &'static str {
        match self {
            UIntDType::UInt8 => "uint8",
            UIntDType::UInt16 => "uint16",
            UIntDType::UInt32 => "uint32",
            UIntDType::UInt64 => "uint64",
        }
    }

    /// The dtype JAX computes in: `uint64` becomes `uint32` unless x64 is
    /// enabled.
    pub fn canonical(self, x64: X64) -> UIntDType {
        match (self, x64) {
            (UIntDType::UInt64, X64::Disabled) => UIntDType::UInt32,
            (d, _) => d,
        }
    }
}

impl fmt::Display for FloatDType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for UIntDType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for FloatDType {
    type Err = RandomError;

    /// A float dtype from its name; anything else is [`RandomError::DType`].
    fn from_str(name: &str) -> Result<Self, RandomError> {
        Ok(match name {
            "float16" => FloatDType::Float16,
            "bfloat16" => FloatDType::BFloat16,
            "float32" => FloatDType::Float32,
            "float64" => FloatDType::Float64,
            _ => {
                return Err(RandomError::DType {
                    function: "FloatDType::from_str",
                    name: name.to_string(),
                    expected: "float16, bfloat16, float32, float64",
                })
            }
        })
    }
}

impl FromStr for UIntDType {
    type Err = RandomError;

    /// An unsigned dtype from its name; anything else is
    /// [`RandomError::DType`].
    fn from_str(name: &str) -> Result<Self, RandomError> {
        Ok(match name {
            "uint8" => UIntDType::UInt8,
            "uint16" => UIntDType::UInt16,
            "uint32" => UIntDType::UInt32,
            "uint64" => UIntDType::UInt64,
            _ => {
                return Err(RandomError::DType {
                    function: "UIntDType::from_str",
                    name: name.to_string(),
                    expected: "uint8, uint16, uint32, uint64",
                })
            }
        })
    }
}

/// An unsigned integer element type of `bits`: `u8`, `u16`, `u32`, `u64`.
/// Sealed: the set is JAX's.
pub trait UInt:
    sealed::UIntBits + Copy + Default + Send + Sync + PartialEq + fmt::Debug + fmt::Display + 'static
{
    /// The run-time name of this type.
    const DTYPE: UIntDType;
}

/// A float element type of the samplers: [`f16`](struct@f16), [`bf16`], `f32`, `f64`.
/// Sealed: the set is JAX's.
pub trait Float:
    sealed::FloatOps
    + std::ops::Neg<Output = Self>
    + Copy
    + Default
    + Send
    + Sync
    + PartialOrd
    + fmt::Debug
    + fmt::Display
    + 'static
{
    /// The run-time name of this type.
    const DTYPE: FloatDType;
}

pub(crate) mod sealed {
    /// What the samplers need of an unsigned type (not implementable
    /// outside the crate).
    pub trait UIntBits: Sized {
        /// The width in bits.
        const BITS: u32;
        /// The low `BITS` bits of `x`.
        fn truncate(x: u64) -> Self;
        /// The value, widened.
        fn widen(self) -> u64;
    }

    /// The dtype's arithmetic as XLA's CPU backend does it (see the module
    /// documentation).
    pub trait FloatOps: Sized + Copy {
        /// The random bits JAX draws per element: the float's width, or 8
        /// for `bfloat16` (JAX draws at least 8 bits, and bfloat16 has 7
        /// mantissa bits).
        type Bits: super::UInt;
        /// A float in `[0, 1)` from the bits: the top mantissa-many bits
        /// below an exponent of 1, minus 1 (JAX's `_uniform`).
        fn unit(bits: Self::Bits) -> Self;
        /// A Python float converted to the dtype (round to nearest even).
        fn from_f64(x: f64) -> Self;
        /// The exact value as `f64`.
        fn to_f64(self) -> f64;
        /// `a - b`, rounded to the dtype.
        fn sub(self, b: Self) -> Self;
        /// `a * b`, rounded to the dtype.
        fn mul(self, b: Self) -> Self;
        /// `u * scale + offset` as XLA computes it: one fused rounding for
        /// `f32`/`f64` (and `float16` where it is native), two roundings
        /// for the 16-bit types otherwise.
        fn mul_add(self, scale: Self, offset: Self) -> Self;
        /// NaN test.
        fn is_nan(self) -> bool;
        /// XLA's `log`.
        fn log(self) -> Self;
        /// XLA's `log1p`.
        fn log1p(self) -> Self;
        /// XLA's `erf`.
        fn erf(self) -> Self;
        /// XLA's `erf_inv`.
        fn erf_inv(self) -> Self;
        /// `x / sqrt(2)` as XLA simplifies it: `x` times the reciprocal of
        /// the dtype's `sqrt(2)`, the reciprocal rounded to the type XLA
        /// computes in.
        fn div_sqrt2(self) -> Self;
        /// `nextafter(x, +inf)`.
        fn next_up(self) -> Self;
        /// `nextafter(x, -inf)`.
        fn next_down(self) -> Self;
        /// `sqrt(2)` rounded to the dtype.
        const SQRT2: Self;
        /// The smallest positive normal number (`finfo.tiny`).
        const TINY: Self;
        /// One.
        const ONE: Self;
        /// Zero.
        const ZERO: Self;
        /// `nextafter(-1, 0)`, the lower end of `normal`'s uniform draw.
        const ABOVE_MINUS_ONE: Self;
    }
}

use sealed::{FloatOps, UIntBits};

macro_rules! uint {
    ($t:ty, $d:ident) => {
        impl UIntBits for $t {
            const BITS: u32 = <$t>::BITS;
            #[inline(always)]
            fn truncate(x: u64) -> Self {
                x as $t
            }
            #[inline(always)]
            fn widen(self) -> u64 {
                u64::from(self)
            }
        }
        impl UInt for $t {
            const DTYPE: UIntDType = UIntDType::$d;
        }
    };
}
uint!(u8, UInt8);
uint!(u16, UInt16);
uint!(u32, UInt32);
uint!(u64, UInt64);

/// `max(lo, x)` as XLA's `max`: NaN propagates.
#[inline(always)]
pub(crate) fn xla_max<T: Float>(lo: T, x: T) -> T {
    if x.is_nan() || x > lo {
        x
    } else {
        lo
    }
}

/// Whether XLA computes `float16` natively on this CPU: x86 with
/// AVX512-FP16, where LLVM keeps `half` operations in `half` and fuses a
/// multiply into the add that consumes it (checked against JAX on an Intel
/// Xeon, Emerald Rapids: `uniform` with a range and `truncated_normal`);
/// elsewhere it promotes each operation to `f32` and rounds back.
fn native_f16() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        // Detected once: std caches what CPUID says.
        std::arch::is_x86_feature_detected!("avx512fp16")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The 16-bit types: every operation in `f32`, rounded back; where the
/// type is native (`$native`), a multiply fused into its add.
macro_rules! half_ops {
    ($t:ty, $bits:ty, $shift:expr, $one:expr, $inf:expr, $inv_sqrt2:expr, $d:ident, $native:expr) => {
        impl FloatOps for $t {
            type Bits = $bits;
            #[inline(always)]
            fn unit(bits: $bits) -> Self {
                let f = <$t>::from_bits((bits as u16 >> $shift) | $one);
                <$t>::from_f32(f.to_f32() - 1.0)
            }
            fn from_f64(x: f64) -> Self {
                <$t>::from_f64(x)
            }
            fn to_f64(self) -> f64 {
                <$t>::to_f64(self)
            }
            #[inline(always)]
            fn sub(self, b: Self) -> Self {
                <$t>::from_f32(self.to_f32() - b.to_f32())
            }
            #[inline(always)]
            fn mul(self, b: Self) -> Self {
                <$t>::from_f32(self.to_f32() * b.to_f32())
            }
            #[inline(always)]
            fn mul_add(self, scale: Self, offset: Self) -> Self {
                if $native {
                    // One rounding: the product of two 16-bit floats is
                    // exact in f64, and so is its sum with the offset for
                    // the samplers' operands (within 2^31 of each other).
                    <$t>::from_f64(self.to_f64() * scale.to_f64() + offset.to_f64())
                } else {
                    <$t>::from_f32(FloatOps::mul(self, scale).to_f32() + offset.to_f32())
                }
            }
            #[inline(always)]
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
            #[inline(always)]
            fn log(self) -> Self {
                <$t>::from_f32(m32::log(self.to_f32()))
            }
            #[inline(always)]
            fn log1p(self) -> Self {
                <$t>::from_f32(m32::log1p(self.to_f32()))
            }
            #[inline(always)]
            fn erf(self) -> Self {
                <$t>::from_f32(m32::erf(self.to_f32()))
            }
            #[inline(always)]
            fn erf_inv(self) -> Self {
                <$t>::from_f32(m32::erf_inv(self.to_f32()))
            }
            fn div_sqrt2(self) -> Self {
                <$t>::from_f32(self.to_f32() * $inv_sqrt2)
            }
            fn next_up(self) -> Self {
                <$t>::from_bits(next_up_bits(self.to_bits(), $inf, self.is_nan()))
            }
            fn next_down(self) -> Self {
                -FloatOps::next_up(-self)
            }
            const SQRT2: Self = <$t>::from_f64_const(std::f64::consts::SQRT_2);
            const TINY: Self = <$t>::MIN_POSITIVE;
            const ONE: Self = <$t>::ONE;
            const ZERO: Self = <$t>::ZERO;
            const ABOVE_MINUS_ONE: Self = <$t>::from_bits(($one | 0x8000) - 1);
        }
        impl Float for $t {
            const DTYPE: FloatDType = FloatDType::$d;
        }
    };
}

// float16: 16 random bits, 10 mantissa bits. XLA's `x / sqrt(2)` is
// `x * 0.70703` (float16's reciprocal of float16's sqrt(2)).
half_ops!(
    f16,
    u16,
    6,
    0x3C00,
    0x7C00,
    f16::from_f32(1.0 / 1.414_062_5).to_f32(),
    Float16,
    native_f16()
);
// bfloat16: 8 random bits, 7 mantissa bits. XLA multiplies by the f32
// reciprocal of bfloat16's sqrt(2), 1 / 1.4140625 = 0.707182348.
half_ops!(
    bf16,
    u8,
    1,
    0x3F80,
    0x7F80,
    1.0f32 / 1.414_062_5,
    BFloat16,
    false
);

/// `nextafter(x, +inf)` on the bits of a 16-bit float whose `+inf` is `inf`.
fn next_up_bits(bits: u16, inf: u16, nan: bool) -> u16 {
    const SIGN: u16 = 0x8000;
    if nan || bits == inf {
        bits
    } else if bits == SIGN || bits == 0 {
        1
    } else if bits & SIGN == 0 {
        bits + 1
    } else {
        bits - 1
    }
}

/// The arithmetic `f32` and `f64` share: native operations, a multiply
/// fused into the add that consumes it (as LLVM contracts XLA's code).
macro_rules! native_ops {
    ($t:ident) => {
        fn from_f64(x: f64) -> Self {
            x as $t
        }
        fn to_f64(self) -> f64 {
            self as f64
        }
        #[inline(always)]
        fn sub(self, b: Self) -> Self {
            self - b
        }
        #[inline(always)]
        fn mul(self, b: Self) -> Self {
            self * b
        }
        #[inline(always)]
        fn mul_add(self, scale: Self, offset: Self) -> Self {
            $t::mul_add(self, scale, offset)
        }
        #[inline(always)]
        fn is_nan(self) -> bool {
            $t::is_nan(self)
        }
        const SQRT2: Self = std::$t::consts::SQRT_2;
        const TINY: Self = $t::MIN_POSITIVE;
        const ONE: Self = 1.0;
        const ZERO: Self = 0.0;
        const ABOVE_MINUS_ONE: Self = -1.0 + $t::EPSILON / 2.0;
    };
}

impl FloatOps for f32 {
    type Bits = u32;
    native_ops!(f32);
    #[inline(always)]
    fn unit(bits: u32) -> Self {
        super::distributions::unit_float(bits)
    }
    #[inline(always)]
    fn log(self) -> Self {
        m32::log(self)
    }
    #[inline(always)]
    fn log1p(self) -> Self {
        m32::log1p(self)
    }
    #[inline(always)]
    fn erf(self) -> Self {
        m32::erf(self)
    }
    #[inline(always)]
    fn erf_inv(self) -> Self {
        m32::erf_inv(self)
    }
    fn div_sqrt2(self) -> Self {
        // XLA's constant 0.707106769: 1 / sqrt(2) of f32, rounded.
        self * (1.0 / std::f32::consts::SQRT_2)
    }
    fn next_up(self) -> Self {
        super::distributions::next_up(self)
    }
    fn next_down(self) -> Self {
        super::distributions::next_down(self)
    }
}

impl Float for f32 {
    const DTYPE: FloatDType = FloatDType::Float32;
}

impl FloatOps for f64 {
    type Bits = u64;
    native_ops!(f64);
    #[inline(always)]
    fn unit(bits: u64) -> Self {
        f64::from_bits((bits >> 12) | 0x3FF0_0000_0000_0000) - 1.0
    }
    fn log(self) -> Self {
        m64::log(self)
    }
    fn log1p(self) -> Self {
        m64::log1p(self)
    }
    fn erf(self) -> Self {
        m64::erf(self)
    }
    fn erf_inv(self) -> Self {
        m64::erf_inv(self)
    }
    fn div_sqrt2(self) -> Self {
        // 1 / 1.4142135623730951, rounded: 0.70710678118654746.
        self * (1.0 / std::f64::consts::SQRT_2)
    }
    fn next_up(self) -> Self {
        if self.is_nan() || self == f64::INFINITY {
            self
        } else if self == 0.0 {
            f64::from_bits(1)
        } else if self > 0.0 {
            f64::from_bits(self.to_bits() + 1)
        } else {
            f64::from_bits(self.to_bits() - 1)
        }
    }
    fn next_down(self) -> Self {
        -FloatOps::next_up(-self)
    }
}

impl Float for f64 {
    const DTYPE: FloatDType = FloatDType::Float64;
}
