//! The element types TensorFlow's random ops produce, and how each one is
//! laid out over Philox blocks (spec §3).

use std::fmt::{Debug, Display};
use std::ops::{Add, Mul, Sub};

use super::convert::{box_muller_double, box_muller_float, uint32_to_float, uint64_to_double};
use super::half::{BF16, F16};

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
    impl Sealed for super::F16 {}
    impl Sealed for super::BF16 {}
    impl Sealed for i32 {}
    impl Sealed for i64 {}
    impl Sealed for u32 {}
    impl Sealed for u64 {}
}

/// A floating-point dtype of TensorFlow's random ops: `f32`, `f64`,
/// [`F16`] or [`BF16`].
///
/// The methods say how one Philox block of four `u32` words becomes
/// elements; they are public so that the layout is documented, but the
/// trait is sealed.
pub trait TfFloat:
    sealed::Sealed
    + Copy
    + Debug
    + Display
    + PartialOrd
    + Send
    + Sync
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + 'static
{
    /// TensorFlow's name of the dtype.
    const NAME: &'static str;
    /// Uniform elements per Philox block (4 for `f32`, 2 for `f64`).
    const UNIFORM_PER_BLOCK: usize;
    /// Normal elements per Philox block (4 for `f32`, 2 for `f64`).
    const NORMAL_PER_BLOCK: usize;
    /// Words one Box–Muller transform consumes (2 for `f32`, 4 for `f64`).
    const WORDS_PER_BOX_MULLER: usize;
    /// Elements per truncated-normal group (4 for `f32`, 2 for `f64`).
    const TRUNCATED_GROUP: usize;
    /// Zero.
    const ZERO: Self;
    /// One.
    const ONE: Self;

    /// Writes the first `out.len()` (at most [`Self::UNIFORM_PER_BLOCK`])
    /// uniform `[0, 1)` elements of a block.
    fn uniform_block(block: [u32; 4], out: &mut [Self]);

    /// Writes the first `out.len()` (at most [`Self::NORMAL_PER_BLOCK`])
    /// standard normal elements of a block.
    fn normal_block(block: [u32; 4], out: &mut [Self]);

    /// One Box–Muller transform of [`Self::WORDS_PER_BOX_MULLER`] words for
    /// the truncated normal: each of the two values, sine term first, if it
    /// is kept (`|x| < 2`, tested in `f32` for the 16-bit types).
    fn truncated_pair(words: &[u32]) -> [Option<Self>; 2];
}

impl TfFloat for f32 {
    const NAME: &'static str = "float32";
    const UNIFORM_PER_BLOCK: usize = 4;
    const NORMAL_PER_BLOCK: usize = 4;
    const WORDS_PER_BOX_MULLER: usize = 2;
    const TRUNCATED_GROUP: usize = 4;
    const ZERO: f32 = 0.0;
    const ONE: f32 = 1.0;

    #[inline]
    fn uniform_block(block: [u32; 4], out: &mut [f32]) {
        for (o, &w) in out.iter_mut().zip(&block) {
            *o = uint32_to_float(w);
        }
    }

    #[inline]
    fn normal_block(block: [u32; 4], out: &mut [f32]) {
        let a = box_muller_float(block[0], block[1]);
        let b = if out.len() > 2 {
            box_muller_float(block[2], block[3])
        } else {
            [0.0; 2]
        };
        for (o, v) in out.iter_mut().zip(a.into_iter().chain(b)) {
            *o = v;
        }
    }

    #[inline]
    fn truncated_pair(words: &[u32]) -> [Option<f32>; 2] {
        box_muller_float(words[0], words[1]).map(|v| (v.abs() < 2.0).then_some(v))
    }
}

impl TfFloat for f64 {
    const NAME: &'static str = "float64";
    const UNIFORM_PER_BLOCK: usize = 2;
    const NORMAL_PER_BLOCK: usize = 2;
    const WORDS_PER_BOX_MULLER: usize = 4;
    const TRUNCATED_GROUP: usize = 2;
    const ZERO: f64 = 0.0;
    const ONE: f64 = 1.0;

    #[inline]
    fn uniform_block(block: [u32; 4], out: &mut [f64]) {
        for (j, o) in out.iter_mut().enumerate() {
            *o = uint64_to_double(block[2 * j], block[2 * j + 1]);
        }
    }

    #[inline]
    fn normal_block(block: [u32; 4], out: &mut [f64]) {
        let v = box_muller_double(block);
        for (o, x) in out.iter_mut().zip(v) {
            *o = x;
        }
    }

    #[inline]
    fn truncated_pair(words: &[u32]) -> [Option<f64>; 2] {
        box_muller_double([words[0], words[1], words[2], words[3]])
            .map(|v| (v.abs() < 2.0).then_some(v))
    }
}

/// `float16` and `bfloat16`: uniform from the low 10 (7) bits of each word
/// as a mantissa of `[1, 2)` minus 1 (exact); normals are the `f32`
/// Box–Muller values rounded to nearest-even; truncation is decided on the
/// `f32` values. Arithmetic rounds through `f32`, as Eigen's half types do.
macro_rules! half_float {
    ($t:ident, $name:literal, $mant_bits:literal, $exp_one:literal) => {
        impl TfFloat for $t {
            const NAME: &'static str = $name;
            const UNIFORM_PER_BLOCK: usize = 4;
            const NORMAL_PER_BLOCK: usize = 4;
            const WORDS_PER_BOX_MULLER: usize = 2;
            const TRUNCATED_GROUP: usize = 4;
            const ZERO: $t = $t::from_bits(0);
            const ONE: $t = $t::from_bits($exp_one);

            #[inline]
            fn uniform_block(block: [u32; 4], out: &mut [$t]) {
                for (o, &w) in out.iter_mut().zip(&block) {
                    let bits = $exp_one | (w as u16 & ((1 << $mant_bits) - 1));
                    *o = $t::from_bits(bits) - $t::ONE;
                }
            }

            #[inline]
            fn normal_block(block: [u32; 4], out: &mut [$t]) {
                let mut v = [0.0f32; 4];
                <f32 as TfFloat>::normal_block(block, &mut v[..out.len()]);
                for (o, x) in out.iter_mut().zip(v) {
                    *o = $t::from_f32(x);
                }
            }

            #[inline]
            fn truncated_pair(words: &[u32]) -> [Option<$t>; 2] {
                <f32 as TfFloat>::truncated_pair(words).map(|v| v.map($t::from_f32))
            }
        }
    };
}

half_float!(F16, "float16", 10, 0x3C00);
half_float!(BF16, "bfloat16", 7, 0x3F80);

/// An integer dtype of TensorFlow's random ops: `i32`, `i64`, `u32`, `u64`.
pub trait TfInt:
    sealed::Sealed + Copy + Debug + Display + PartialOrd + Send + Sync + 'static
{
    /// TensorFlow's name of the dtype.
    const NAME: &'static str;
    /// Whether the dtype is signed (bounded ranges need a signed dtype).
    const SIGNED: bool;
    /// Elements per Philox block (4 for 32-bit, 2 for 64-bit types).
    const PER_BLOCK: usize;

    /// Writes the first `out.len()` full-range elements of a block. 64-bit
    /// elements are `w[2j] | w[2j+1] << 32` (first word low).
    fn full_block(block: [u32; 4], out: &mut [Self]);

    /// Writes the first `out.len()` elements of `[minval, maxval)` of a
    /// block: `minval + (bits % (maxval - minval))`, wrapping, with no
    /// rejection (TensorFlow's plain modulo).
    fn range_block(block: [u32; 4], minval: Self, maxval: Self, out: &mut [Self]);

    /// Sign-extends (or zero-extends) the value to a `u64` bit pattern.
    fn to_u64_bits(self) -> u64;
}

/// Combines words `2j` and `2j+1` of a block into one `u64`, first word low.
#[inline]
fn word_pair(block: &[u32; 4], j: usize) -> u64 {
    u64::from(block[2 * j]) | (u64::from(block[2 * j + 1]) << 32)
}

macro_rules! int32 {
    ($t:ty, $name:literal, $signed:literal) => {
        impl TfInt for $t {
            const NAME: &'static str = $name;
            const SIGNED: bool = $signed;
            const PER_BLOCK: usize = 4;

            #[inline]
            fn full_block(block: [u32; 4], out: &mut [$t]) {
                for (o, &w) in out.iter_mut().zip(&block) {
                    *o = w as $t;
                }
            }

            #[inline]
            fn range_block(block: [u32; 4], minval: $t, maxval: $t, out: &mut [$t]) {
                let range = (maxval as u32).wrapping_sub(minval as u32);
                for (o, &w) in out.iter_mut().zip(&block) {
                    *o = minval.wrapping_add((w % range) as $t);
                }
            }

            #[inline]
            fn to_u64_bits(self) -> u64 {
                #[allow(clippy::cast_lossless)]
                {
                    self as i64 as u64
                }
            }
        }
    };
}

macro_rules! int64 {
    ($t:ty, $name:literal, $signed:literal) => {
        impl TfInt for $t {
            const NAME: &'static str = $name;
            const SIGNED: bool = $signed;
            const PER_BLOCK: usize = 2;

            #[inline]
            fn full_block(block: [u32; 4], out: &mut [$t]) {
                for (j, o) in out.iter_mut().enumerate() {
                    *o = word_pair(&block, j) as $t;
                }
            }

            #[inline]
            fn range_block(block: [u32; 4], minval: $t, maxval: $t, out: &mut [$t]) {
                let range = (maxval as u64).wrapping_sub(minval as u64);
                for (j, o) in out.iter_mut().enumerate() {
                    *o = minval.wrapping_add((word_pair(&block, j) % range) as $t);
                }
            }

            #[inline]
            fn to_u64_bits(self) -> u64 {
                self as u64
            }
        }
    };
}

int32!(i32, "int32", true);
int32!(u32, "uint32", false);
int64!(i64, "int64", true);
int64!(u64, "uint64", false);

/// The dtype of a stateless seed (`i32` or `i64`). Seeds are sign-extended
/// to 64 bits, so `[-5i32, 1]` and `[-5i64, 1]` give the same numbers; the
/// dtype only decides what [`stateless_split`](super::stateless_split)
/// returns.
pub trait SeedInt: TfInt {}
impl SeedInt for i32 {}
impl SeedInt for i64 {}
