//! Generator seeds and TensorFlow's `create_rng_state` (spec §6): how an
//! integer of any size or an array becomes a generator state, with no
//! scrambling.

/// A seed for [`Generator::from_seed`](super::Generator::from_seed), as
/// TensorFlow accepts it: an integer of any size or an integer array.
///
/// ```
/// use flaxen::random::tf::{Algorithm, RngSeed};
/// // An integer is cut into little-endian 64-bit chunks.
/// assert_eq!(RngSeed::from(1).to_state(Algorithm::Philox), vec![1, 0, 0]);
/// assert_eq!(RngSeed::from((1i128 << 70) + 5).to_state(Algorithm::Philox), vec![5, 64, 0]);
/// assert_eq!(RngSeed::from(-1).to_state(Algorithm::Philox), vec![-1, -1, -1]);
/// // An array is truncated, then padded with zeros on the left.
/// assert_eq!(RngSeed::from([7]).to_state(Algorithm::Philox), vec![0, 0, 7]);
/// assert_eq!(RngSeed::from([1, 2, 3, 4]).to_state(Algorithm::Philox), vec![1, 2, 3]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RngSeed {
    /// An integer, by the low 192 bits of its two's complement (a negative
    /// integer is extended with ones), least significant 64-bit chunk first.
    /// Bits above 192 do not matter to any algorithm.
    Int([u64; 3]),
    /// An integer array, already cast to `int64` and flattened.
    Array(Vec<i64>),
}

impl RngSeed {
    /// An integer of any size from its sign and magnitude (64-bit limbs,
    /// least significant first), as Python's arbitrary-precision `int`.
    ///
    /// ```
    /// use flaxen::random::tf::RngSeed;
    /// // -(2**64) in 192-bit two's complement.
    /// assert_eq!(RngSeed::from_big_int(true, &[0, 1]), RngSeed::Int([0, u64::MAX, u64::MAX]));
    /// ```
    pub fn from_big_int(negative: bool, magnitude_le: &[u64]) -> RngSeed {
        let mut w = [0u64; 3];
        for (d, &s) in w.iter_mut().zip(magnitude_le) {
            *d = s;
        }
        if negative {
            let mut carry = true;
            for d in &mut w {
                let (v, c) = (!*d).overflowing_add(u64::from(carry));
                *d = v;
                carry = c;
            }
        }
        RngSeed::Int(w)
    }

    /// The initial state for `alg` (`create_rng_state`): an integer gives its
    /// first `state_size` 64-bit chunks; an array is truncated to
    /// `state_size` values and padded with zeros on the left.
    pub fn to_state(&self, alg: super::Algorithm) -> Vec<i64> {
        let size = alg.state_size();
        match self {
            RngSeed::Int(w) => w[..size].iter().map(|&x| x as i64).collect(),
            RngSeed::Array(v) => {
                let kept = &v[..v.len().min(size)];
                let mut s = vec![0i64; size - kept.len()];
                s.extend_from_slice(kept);
                s
            }
        }
    }
}

macro_rules! from_signed {
    ($($t:ty),*) => {$(
        impl From<$t> for RngSeed {
            fn from(x: $t) -> RngSeed {
                let x = x as i128;
                RngSeed::Int([x as u64, (x >> 64) as u64, (x >> 127) as u64])
            }
        }
    )*};
}
macro_rules! from_unsigned {
    ($($t:ty),*) => {$(
        impl From<$t> for RngSeed {
            fn from(x: $t) -> RngSeed {
                let x = x as u128;
                RngSeed::Int([x as u64, (x >> 64) as u64, 0])
            }
        }
    )*};
}
from_signed!(i8, i16, i32, i64, i128, isize);
from_unsigned!(u8, u16, u32, u64, u128, usize);

impl From<Vec<i64>> for RngSeed {
    fn from(v: Vec<i64>) -> RngSeed {
        RngSeed::Array(v)
    }
}

impl From<&[i64]> for RngSeed {
    fn from(v: &[i64]) -> RngSeed {
        RngSeed::Array(v.to_vec())
    }
}

impl<const N: usize> From<[i64; N]> for RngSeed {
    fn from(v: [i64; N]) -> RngSeed {
        RngSeed::Array(v.to_vec())
    }
}

impl From<&[u64]> for RngSeed {
    /// Unsigned values are reinterpreted as `int64`, as TensorFlow's `_uint_to_int`.
    fn from(v: &[u64]) -> RngSeed {
        RngSeed::Array(v.iter().map(|&x| x as i64).collect())
    }
}

impl From<&[i32]> for RngSeed {
    fn from(v: &[i32]) -> RngSeed {
        RngSeed::Array(v.iter().map(|&x| i64::from(x)).collect())
    }
}
