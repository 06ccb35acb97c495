//! Philox4x32-10, the counter-based block cipher behind TensorFlow's RNGs.
//!
//! This is Random123's `philox4x32` with ten rounds, as
//! `tensorflow::random::PhiloxRandom` implements it: a 128-bit counter and a
//! 64-bit key give one block of four `u32` words. Words are little-endian:
//! word 0 is the least significant.

/// Round key bump added to key word 0 after each round.
const W32A: u32 = 0x9E37_79B9;
/// Round key bump added to key word 1 after each round.
const W32B: u32 = 0xBB67_AE85;
/// Multiplier of counter word 0.
const M4X32A: u32 = 0xD251_1F53;
/// Multiplier of counter word 2.
const M4X32B: u32 = 0xCD9E_8D57;

/// One Philox4x32-10 block: the four output words for `counter` under `key`.
///
/// ```
/// use flaxen::random::tf::philox4x32_10;
/// // Random123's known-answer vector with a zero counter and key.
/// assert_eq!(
///     philox4x32_10([0, 0, 0, 0], [0, 0]),
///     [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]
/// );
/// ```
#[inline]
pub fn philox4x32_10(counter: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let mut x = counter;
    let mut k = key;
    for round in 0..10 {
        let p0 = u64::from(M4X32A) * u64::from(x[0]);
        let p1 = u64::from(M4X32B) * u64::from(x[2]);
        let (hi0, lo0) = ((p0 >> 32) as u32, p0 as u32);
        let (hi1, lo1) = ((p1 >> 32) as u32, p1 as u32);
        x = [hi1 ^ x[1] ^ k[0], lo1, hi0 ^ x[3] ^ k[1], lo0];
        if round < 9 {
            k[0] = k[0].wrapping_add(W32A);
            k[1] = k[1].wrapping_add(W32B);
        }
    }
    x
}

/// A Philox4x32-10 stream: a fixed key and a 128-bit counter that moves on
/// by one per block, as `tensorflow::random::PhiloxRandom`.
///
/// ```
/// use flaxen::random::tf::Philox;
/// let mut p = Philox::from_key_counter(0, [1, 0]);
/// assert_eq!(p.next_block(), [0xf8e4cca4, 0x5cb200db, 0xb1a574eb, 0x097eff67]);
/// assert_eq!(p.counter_u128(), 2);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Philox {
    key: [u32; 2],
    counter: u128,
}

impl Philox {
    /// A stream from key words `(k0, k1)` and counter words `(c0, c1, c2, c3)`.
    pub fn new(key: [u32; 2], counter: [u32; 4]) -> Philox {
        let counter = counter
            .iter()
            .rev()
            .fold(0u128, |acc, &w| (acc << 32) | u128::from(w));
        Philox { key, counter }
    }

    /// A stream from the `key: u64` and `counter: [u64; 2]` of TensorFlow's
    /// V2 kernels (`StatelessRandomNormalV2` and friends): key words are
    /// `(key lo32, key hi32)` and the counter is `counter[0] | counter[1] << 64`.
    pub fn from_key_counter(key: u64, counter: [u64; 2]) -> Philox {
        Philox {
            key: [key as u32, (key >> 32) as u32],
            counter: u128::from(counter[0]) | (u128::from(counter[1]) << 64),
        }
    }

    /// The key words `(k0, k1)`.
    pub fn key(&self) -> [u32; 2] {
        self.key
    }

    /// The key as one `u64` (`k0 | k1 << 32`).
    pub fn key_u64(&self) -> u64 {
        u64::from(self.key[0]) | (u64::from(self.key[1]) << 32)
    }

    /// The counter words `(c0, c1, c2, c3)`, least significant first.
    pub fn counter(&self) -> [u32; 4] {
        let c = self.counter;
        [
            c as u32,
            (c >> 32) as u32,
            (c >> 64) as u32,
            (c >> 96) as u32,
        ]
    }

    /// The counter as one 128-bit integer.
    pub fn counter_u128(&self) -> u128 {
        self.counter
    }

    /// Moves the counter on by `n` blocks (mod 2^128). The key never changes.
    pub fn skip(&mut self, n: u64) {
        self.counter = self.counter.wrapping_add(u128::from(n));
    }

    /// The block at `offset` blocks past the current counter, without moving it.
    #[inline]
    pub fn block_at(&self, offset: u64) -> [u32; 4] {
        let c = self.counter.wrapping_add(u128::from(offset));
        philox4x32_10(
            [
                c as u32,
                (c >> 32) as u32,
                (c >> 64) as u32,
                (c >> 96) as u32,
            ],
            self.key,
        )
    }

    /// The block at the current counter; then the counter moves on by one.
    #[inline]
    pub fn next_block(&mut self) -> [u32; 4] {
        let b = self.block_at(0);
        self.skip(1);
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random123_known_answers() {
        // The known-answer vectors of Random123 (kat_vectors, philox4x32_10).
        assert_eq!(
            philox4x32_10([0; 4], [0; 2]),
            [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]
        );
        assert_eq!(
            philox4x32_10([u32::MAX; 4], [u32::MAX; 2]),
            [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd]
        );
        assert_eq!(
            philox4x32_10(
                [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344],
                [0xa4093822, 0x299f31d0]
            ),
            [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1]
        );
        assert_eq!(
            philox4x32_10([1, 0, 0, 0], [0, 0]),
            [0xf8e4cca4, 0x5cb200db, 0xb1a574eb, 0x097eff67]
        );
    }

    #[test]
    fn skip_carries_across_words() {
        let mut p = Philox::new([5, 6], [u32::MAX, u32::MAX, u32::MAX, 0]);
        p.skip(1);
        assert_eq!(p.counter(), [0, 0, 0, 1]);
        let mut q = Philox::new([5, 6], [u32::MAX; 4]);
        q.skip(2);
        assert_eq!(q.counter(), [1, 0, 0, 0]);
        assert_eq!(q.key(), [5, 6]);
    }

    #[test]
    fn key_counter_layout() {
        let p = Philox::from_key_counter(0x0246_1E29_3EC8_F720, [0x1_0000_0002, 3]);
        assert_eq!(p.key(), [0x3EC8_F720, 0x0246_1E29]);
        assert_eq!(p.counter(), [2, 1, 3, 0]);
        assert_eq!(p.key_u64(), 0x0246_1E29_3EC8_F720);
    }
}
