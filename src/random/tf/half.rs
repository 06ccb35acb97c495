//! TensorFlow's `float16` and `bfloat16` outputs are the `half` crate's
//! [`half::f16`] and [`half::bf16`], under TensorFlow's names: storage,
//! exact conversions to `f32`, round-to-nearest-even conversions from
//! `f32`, and arithmetic rounded through `f32` — as Eigen's `half` and
//! `bfloat16` compute on CPU.
//!
//! ```
//! use flaxen::random::tf::{BF16, F16};
//! assert_eq!(F16::from_f32(1.0).to_bits(), 0x3C00);
//! assert_eq!(F16::from_bits(0x3555).to_f32(), 0.33325195);
//! assert_eq!(F16::from_f32(65520.0).to_f32(), f32::INFINITY);
//! assert_eq!(BF16::from_f32(1.00390625).to_bits(), 0x3F80); // a tie rounds to even
//! ```

/// IEEE binary16 (`tf.float16`): [`half::f16`].
pub type F16 = half::f16;

/// bfloat16 (`tf.bfloat16`): [`half::bf16`].
pub type BF16 = half::bf16;

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
