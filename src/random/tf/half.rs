//! Minimal `float16` and `bfloat16` types for TensorFlow's 16-bit random
//! outputs: storage, exact conversions to `f32`, round-to-nearest-even
//! conversions from `f32`, and arithmetic rounded through `f32` (as Eigen's
//! `half` and `bfloat16` compute on CPU).

use std::fmt;
use std::ops::{Add, Mul, Sub};

/// IEEE binary16 (`tf.float16`), stored as its bits.
///
/// ```
/// use flaxen::random::tf::F16;
/// assert_eq!(F16::from_f32(1.0).to_bits(), 0x3C00);
/// assert_eq!(F16::from_bits(0x3555).to_f32(), 0.33325195);
/// assert_eq!(F16::from_f32(65520.0).to_f32(), f32::INFINITY);
/// ```
#[derive(Clone, Copy, Default, PartialEq, PartialOrd)]
pub struct F16(u16);

/// bfloat16 (`tf.bfloat16`): the top half of an `f32`, stored as its bits.
///
/// ```
/// use flaxen::random::tf::BF16;
/// assert_eq!(BF16::from_f32(1.0).to_bits(), 0x3F80);
/// assert_eq!(BF16::from_f32(1.00390625).to_bits(), 0x3F80); // a tie rounds to even
/// ```
#[derive(Clone, Copy, Default, PartialEq, PartialOrd)]
pub struct BF16(u16);

impl F16 {
    /// The value with these bits.
    pub const fn from_bits(bits: u16) -> F16 {
        F16(bits)
    }

    /// The bits.
    pub const fn to_bits(self) -> u16 {
        self.0
    }

    /// The exact `f32` value.
    pub fn to_f32(self) -> f32 {
        let h = u32::from(self.0);
        let sign = (h & 0x8000) << 16;
        let exp = (h >> 10) & 0x1f;
        let man = h & 0x3ff;
        let bits = match (exp, man) {
            (0, 0) => sign,
            // Subnormal: man · 2^-24, exact in f32.
            (0, _) => {
                let v = man as f32 * f32::from_bits(0x3380_0000);
                return if sign != 0 { -v } else { v };
            }
            (0x1f, 0) => sign | 0x7f80_0000,
            (0x1f, _) => sign | 0x7fc0_0000 | (man << 13),
            _ => sign | ((exp + 112) << 23) | (man << 13),
        };
        f32::from_bits(bits)
    }

    /// `x` rounded to the nearest `float16`, ties to even (overflow to ±inf).
    pub fn from_f32(x: f32) -> F16 {
        let b = x.to_bits();
        let sign = ((b >> 16) & 0x8000) as u16;
        let a = b & 0x7fff_ffff;
        if a >= 0x7f80_0000 {
            // Inf or NaN (NaN stays quiet NaN).
            let nan = if a > 0x7f80_0000 { 0x200 } else { 0 };
            return F16(sign | 0x7c00 | nan);
        }
        if a >= 0x4780_0000 {
            // |x| >= 65536: overflows.
            return F16(sign | 0x7c00);
        }
        if a < 0x3880_0000 {
            // Below 2^-14: subnormal or zero. Round |x| / 2^-24 to an integer.
            let v = f32::from_bits(a) * f32::from_bits(0x4b80_0000); // · 2^24, exact
            return F16(sign | round_half_even(v) as u16);
        }
        // Normal: drop 13 mantissa bits with round-to-nearest-even; a carry
        // into the exponent (up to infinity) is correct.
        let e = a - (112 << 23);
        let rounded = e + 0xfff + ((e >> 13) & 1);
        F16(sign | (rounded >> 13) as u16)
    }
}

/// `v` (a non-negative `f32` below 2^24) rounded to an integer, ties to even.
fn round_half_even(v: f32) -> u32 {
    let t = v.trunc();
    let frac = v - t;
    let t = t as u32;
    if frac > 0.5 || (frac == 0.5 && t & 1 == 1) {
        t + 1
    } else {
        t
    }
}

impl BF16 {
    /// The value with these bits.
    pub const fn from_bits(bits: u16) -> BF16 {
        BF16(bits)
    }

    /// The bits.
    pub const fn to_bits(self) -> u16 {
        self.0
    }

    /// The exact `f32` value.
    pub fn to_f32(self) -> f32 {
        f32::from_bits(u32::from(self.0) << 16)
    }

    /// `x` rounded to the nearest `bfloat16`, ties to even.
    pub fn from_f32(x: f32) -> BF16 {
        let b = x.to_bits();
        if x.is_nan() {
            return BF16(((b >> 16) as u16) | 0x40);
        }
        let rounded = b.wrapping_add(0x7fff + ((b >> 16) & 1));
        BF16((rounded >> 16) as u16)
    }
}

macro_rules! ops_via_f32 {
    ($t:ident) => {
        impl Add for $t {
            type Output = $t;
            fn add(self, o: $t) -> $t {
                $t::from_f32(self.to_f32() + o.to_f32())
            }
        }
        impl Sub for $t {
            type Output = $t;
            fn sub(self, o: $t) -> $t {
                $t::from_f32(self.to_f32() - o.to_f32())
            }
        }
        impl Mul for $t {
            type Output = $t;
            fn mul(self, o: $t) -> $t {
                $t::from_f32(self.to_f32() * o.to_f32())
            }
        }
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.to_f32(), f)
            }
        }
        impl fmt::Debug for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&self.to_f32(), f)
            }
        }
        impl From<$t> for f32 {
            fn from(x: $t) -> f32 {
                x.to_f32()
            }
        }
    };
}
ops_via_f32!(F16);
ops_via_f32!(BF16);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_round_trips_every_finite_value() {
        for bits in 0..=u16::MAX {
            let h = F16::from_bits(bits);
            let f = h.to_f32();
            if f.is_nan() {
                assert!(F16::from_f32(f).to_f32().is_nan());
            } else {
                assert_eq!(F16::from_f32(f).to_bits(), bits, "{bits:#x}");
            }
        }
    }

    #[test]
    fn f16_rounds_to_nearest_even() {
        // Between two neighbours, the midpoint goes to the even one.
        for bits in [0x0001u16, 0x03ff, 0x0400, 0x3c00, 0x3c01, 0x7bfe] {
            let lo = F16::from_bits(bits).to_f32();
            let hi = F16::from_bits(bits + 1).to_f32();
            let mid = (f64::from(lo) + f64::from(hi)) / 2.0;
            let mid = mid as f32;
            assert_eq!(f64::from(mid), (f64::from(lo) + f64::from(hi)) / 2.0);
            let even = if bits & 1 == 0 { bits } else { bits + 1 };
            assert_eq!(F16::from_f32(mid).to_bits(), even, "{bits:#x}");
            assert_eq!(F16::from_f32(mid.next_up()).to_bits(), bits + 1);
            assert_eq!(F16::from_f32(mid.next_down()).to_bits(), bits);
        }
        assert_eq!(F16::from_f32(65519.0).to_bits(), 0x7bff);
        assert_eq!(F16::from_f32(65520.0).to_bits(), 0x7c00);
        assert_eq!(F16::from_f32(-1e-9).to_bits(), 0x8000);
    }

    #[test]
    fn bf16_round_trips_and_rounds() {
        for bits in 0..=u16::MAX {
            let f = BF16::from_bits(bits).to_f32();
            if !f.is_nan() {
                assert_eq!(BF16::from_f32(f).to_bits(), bits);
            }
        }
        assert_eq!(
            BF16::from_f32(f32::from_bits(0x3F80_8000)).to_bits(),
            0x3F80
        );
        assert_eq!(
            BF16::from_f32(f32::from_bits(0x3F81_8000)).to_bits(),
            0x3F82
        );
        assert_eq!(
            BF16::from_f32(f32::from_bits(0x3F80_8001)).to_bits(),
            0x3F81
        );
    }
}
