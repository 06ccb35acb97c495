//! Turning Philox words into numbers: TensorFlow's `Uint32ToFloat`,
//! `Uint64ToDouble` and its Box–Muller transforms, in the exact order of
//! operations of the CPU kernels (`random_distributions.h`).

use super::math;

/// `Uint32ToFloat`: the low 23 bits of `w` as a float in `[0, 1 - 2^-23]`.
///
/// ```
/// use flaxen::random::tf::uint32_to_float;
/// assert_eq!(uint32_to_float(0xf8e4cca4), 0.78749514);
/// assert_eq!(uint32_to_float(0x0080_0000), 0.0);
/// ```
#[inline]
pub fn uint32_to_float(w: u32) -> f32 {
    f32::from_bits(0x3F80_0000 | (w & 0x7F_FFFF)) - 1.0
}

/// `Uint64ToDouble`: 52 bits from two words as a double in `[0, 1)`. The
/// first word gives the high 20 mantissa bits, the second the low 32.
#[inline]
pub fn uint64_to_double(a: u32, b: u32) -> f64 {
    let mantissa = (u64::from(a & 0xF_FFFF) << 32) | u64::from(b);
    f64::from_bits((1023u64 << 52) | mantissa) - 1.0
}

/// `BoxMullerFloat`: two words to two standard normal `f32`s, sine term first.
///
/// `v1` is computed as the double product `2π · u` rounded once to `f32`,
/// as the C++ `2.0f * M_PI` (a double) makes it; `logf` and `sincosf` are
/// [`math::logf`] and [`math::sincosf`].
#[inline]
pub fn box_muller_float(x0: u32, x1: u32) -> [f32; 2] {
    let mut u1 = uint32_to_float(x0);
    if u1 < 1.0e-7 {
        u1 = 1.0e-7;
    }
    let v1 = (2.0 * std::f64::consts::PI * f64::from(uint32_to_float(x1))) as f32;
    let u2 = (-2.0f32 * math::logf(u1)).sqrt();
    let (s, c) = math::sincosf(v1);
    [s * u2, c * u2]
}

/// `BoxMullerDouble`: four words to two standard normal `f64`s, sine term first.
#[inline]
pub fn box_muller_double(x: [u32; 4]) -> [f64; 2] {
    let mut u1 = uint64_to_double(x[0], x[1]);
    if u1 < 1.0e-7 {
        u1 = 1.0e-7;
    }
    let v1 = 2.0 * std::f64::consts::PI * uint64_to_double(x[2], x[3]);
    let u2 = (-2.0 * math::log(u1)).sqrt();
    let (s, c) = math::sincos(v1);
    [s * u2, c * u2]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_worked_example() {
        // The worked example of the spec (from_seed(1).normal([]), block at counter 1).
        let u1 = uint32_to_float(0xf8e4cca4);
        assert_eq!(u1.to_bits(), 0x3f499948);
        let [f0, _] = box_muller_float(0xf8e4cca4, 0x5cb200db);
        assert_eq!(f0.to_bits(), 0x3ee078f2);
    }

    #[test]
    fn uniform_ends() {
        assert_eq!(uint32_to_float(u32::MAX), 1.0 - f32::EPSILON);
        assert_eq!(uint64_to_double(0, 0), 0.0);
        assert_eq!(uint64_to_double(u32::MAX, u32::MAX), 1.0 - f64::EPSILON);
        assert_eq!(uint64_to_double(0, 1), f64::EPSILON);
    }
}
