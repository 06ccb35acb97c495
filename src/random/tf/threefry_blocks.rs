//! Blocks for flaxen's Threefry generator: TensorFlow's generator state
//! layout over JAX's Threefry-2x32 (an extension; TensorFlow runs ThreeFry
//! only under XLA, whose streams flaxen does not model).
//!
//! The stream is defined as follows. The state is `[counter, key]` (two
//! `i64`, as TensorFlow's ThreeFry state). The Threefry key words are
//! `[key >> 32, key & 0xffffffff]`, the layout of `jax.random.key(key)`. For
//! a draw starting at `counter = c`, the block of four words at offset `j`
//! is `T(c + 2j) ++ T(c + 2j + 1)` with `T(x) = threefry2x32(keywords,
//! [x >> 32, x & 0xffffffff])` and additions wrapping mod 2^64. Everything
//! else (element layout, Box–Muller, truncation groups, `counter += 256·n`
//! per draw) is exactly as for Philox.

use crate::random::threefry2x32;

use super::sampler::BlockSource;

/// The blocks of one Threefry draw (see the module documentation).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ThreefryBlocks {
    key: [u32; 2],
    counter: u64,
}

impl ThreefryBlocks {
    /// The blocks of a draw with state `[counter, key]`.
    pub(crate) fn new(counter: u64, key: u64) -> ThreefryBlocks {
        ThreefryBlocks {
            key: [(key >> 32) as u32, key as u32],
            counter,
        }
    }

    #[inline]
    fn hash(&self, x: u64) -> [u32; 2] {
        threefry2x32(self.key, [(x >> 32) as u32, x as u32])
    }
}

impl BlockSource for ThreefryBlocks {
    #[inline]
    fn block(&self, offset: u64) -> [u32; 4] {
        let x = self.counter.wrapping_add(offset.wrapping_mul(2));
        let [a, b] = self.hash(x);
        let [c, d] = self.hash(x.wrapping_add(1));
        [a, b, c, d]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_threefry_pairs() {
        let t = ThreefryBlocks::new(u64::MAX, 0x0000_0001_0000_0002);
        let b = t.block(1);
        assert_eq!(&b[..2], &threefry2x32([1, 2], [0, 1]));
        assert_eq!(&b[2..], &threefry2x32([1, 2], [0, 2]));
    }
}
