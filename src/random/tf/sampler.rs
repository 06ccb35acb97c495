//! Filling output arrays from a stream of blocks: the fixed-sample layout
//! (spec §3) and the truncated normal's groups (spec §4).
//!
//! A [`BlockSource`] hands out the block at a given offset from the draw's
//! starting counter; Philox and flaxen's Threefry generator both implement it.

use ndarray::{ArrayD, IxDyn};
use rayon::prelude::*;

use super::dtype::{TfFloat, TfInt};
use super::error::TfRandomError;
use super::philox::Philox;

/// Blocks of four `u32` words at offsets from a draw's starting counter.
pub(crate) trait BlockSource: Sync {
    /// The block `offset` blocks past the start.
    fn block(&self, offset: u64) -> [u32; 4];
}

impl BlockSource for Philox {
    #[inline]
    fn block(&self, offset: u64) -> [u32; 4] {
        self.block_at(offset)
    }
}

/// `kReservedSamplesPerOutput`: the truncated normal reserves this many
/// samples (words) per output element.
const RESERVED_SAMPLES_PER_OUTPUT: u64 = 256;

/// Elements per parallel chunk; chunk boundaries fall on blocks, so the
/// result does not depend on how the work is split.
const CHUNK_BLOCKS: usize = 4096;

/// The number of elements of `shape`, or an error when it overflows or
/// when an array of that many `T`s cannot be allocated (checked by
/// reserving the memory and giving it back, before anything is drawn).
pub(crate) fn element_count<T>(shape: &[usize]) -> Result<usize, TfRandomError> {
    let size = std::mem::size_of::<T>().max(1);
    let overflow = || TfRandomError::ShapeOverflow {
        shape: shape.to_vec(),
    };
    let n = shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(overflow)?;
    let bytes = n
        .checked_mul(size)
        .filter(|&b| b <= isize::MAX as usize)
        .ok_or_else(overflow)?;
    let mut probe: Vec<T> = Vec::new();
    probe
        .try_reserve_exact(n)
        .map_err(|_| TfRandomError::OutOfMemory {
            shape: shape.to_vec(),
            bytes,
        })?;
    Ok(n)
}

/// Fills `n` elements, `per_block` from each consecutive block, with `fill`
/// writing the first `out.len()` elements of one block.
fn fill_fixed<T, S, F>(src: &S, n: usize, per_block: usize, fill: F) -> Vec<T>
where
    T: Copy + Default + Send,
    S: BlockSource + ?Sized,
    F: Fn([u32; 4], &mut [T]) + Sync,
{
    let mut out = vec![T::default(); n];
    let chunk = CHUNK_BLOCKS * per_block;
    let work = |(c, piece): (usize, &mut [T])| {
        let first_block = (c * CHUNK_BLOCKS) as u64;
        for (b, elems) in piece.chunks_mut(per_block).enumerate() {
            fill(src.block(first_block + b as u64), elems);
        }
    };
    if n > chunk {
        out.par_chunks_mut(chunk).enumerate().for_each(work);
    } else {
        out.chunks_mut(chunk).enumerate().for_each(work);
    }
    out
}

/// Wraps a flat row-major vector as an array of `shape`.
pub(crate) fn shaped<T>(shape: &[usize], v: Vec<T>) -> ArrayD<T> {
    ArrayD::from_shape_vec(IxDyn(shape), v).expect("length matches the shape")
}

/// Uniform `[0, 1)` floats.
pub(crate) fn uniform<T: TfFloat + Default, S: BlockSource + ?Sized>(src: &S, n: usize) -> Vec<T> {
    fill_fixed(src, n, T::UNIFORM_PER_BLOCK, T::uniform_block)
}

/// Standard normal floats (Box–Muller).
pub(crate) fn normal<T: TfFloat + Default, S: BlockSource + ?Sized>(src: &S, n: usize) -> Vec<T> {
    fill_fixed(src, n, T::NORMAL_PER_BLOCK, T::normal_block)
}

/// Full-range integers.
pub(crate) fn full_int<T: TfInt + Default, S: BlockSource + ?Sized>(src: &S, n: usize) -> Vec<T> {
    fill_fixed(src, n, T::PER_BLOCK, T::full_block)
}

/// Integers in `[minval, maxval)`; the caller has checked the range.
pub(crate) fn range_int<T: TfInt + Default, S: BlockSource + ?Sized>(
    src: &S,
    n: usize,
    minval: T,
    maxval: T,
) -> Vec<T> {
    fill_fixed(src, n, T::PER_BLOCK, |b, out| {
        T::range_block(b, minval, maxval, out)
    })
}

/// Standard normals truncated to `(-2, 2)`: each group of
/// `T::TRUNCATED_GROUP` elements restarts at block `g * S` with
/// `S = G * 256 / 4`, then takes words one at a time and keeps Box–Muller
/// values with `|x| < 2`, sine term first.
pub(crate) fn truncated_normal<T: TfFloat + Default, S: BlockSource + ?Sized>(
    src: &S,
    n: usize,
) -> Vec<T> {
    let g = T::TRUNCATED_GROUP;
    let stride = g as u64 * RESERVED_SAMPLES_PER_OUTPUT / 4;
    let mut out = vec![T::default(); n];
    let work = |(group, elems): (usize, &mut [T])| {
        let base = group as u64 * stride;
        let mut words = SingleWords::new(src, base);
        let mut filled = 0;
        let mut buf = [0u32; 4];
        loop {
            for w in buf.iter_mut().take(T::WORDS_PER_BOX_MULLER) {
                *w = words.next_word();
            }
            for v in T::truncated_pair(&buf[..T::WORDS_PER_BOX_MULLER])
                .into_iter()
                .flatten()
            {
                elems[filled] = v;
                filled += 1;
                if filled == elems.len() {
                    return;
                }
            }
        }
    };
    if n > 4096 {
        out.par_chunks_mut(g).enumerate().for_each(work);
    } else {
        out.chunks_mut(g).enumerate().for_each(work);
    }
    out
}

/// TensorFlow's `SingleSampleAdapter`: the words of successive blocks, one
/// at a time, in the order w0, w1, w2, w3, w0', …
struct SingleWords<'a, S: BlockSource + ?Sized> {
    src: &'a S,
    next_block: u64,
    block: [u32; 4],
    used: usize,
}

impl<'a, S: BlockSource + ?Sized> SingleWords<'a, S> {
    fn new(src: &'a S, first_block: u64) -> Self {
        SingleWords {
            src,
            next_block: first_block,
            block: [0; 4],
            used: 4,
        }
    }

    #[inline]
    fn next_word(&mut self) -> u32 {
        if self.used == 4 {
            self.block = self.src.block(self.next_block);
            self.next_block = self.next_block.wrapping_add(1);
            self.used = 0;
        }
        let w = self.block[self.used];
        self.used += 1;
        w
    }
}
