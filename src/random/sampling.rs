//! Turning a key into an array: random words are produced block by block,
//! transformed in place, and large arrays are shared out over all cores.
//!
//! Every element depends only on the key and its flat index, so splitting the
//! output into blocks (and the blocks over threads) gives exactly the bits of
//! one sequential pass.

use ndarray::{ArrayD, IxDyn};
use rayon::prelude::*;

use super::error::{element_count, RandomError};
use super::key::Key;

/// Elements per block: small enough to stay in L1 cache, large enough to
/// amortize the per-block work.
const BLOCK: usize = 2048;

/// Arrays with fewer elements than this are sampled on the calling thread.
const PARALLEL_MIN: usize = 1 << 15;

/// Draws an array of `shape` from `key`: fills each block with the stream's
/// 32-bit words and hands them to `transform`, which writes the block's
/// outputs. `transform` must be a pure function of the words it is given.
pub(crate) fn sample<T, F>(
    function: &'static str,
    key: &Key,
    shape: &[usize],
    transform: F,
) -> Result<ArrayD<T>, RandomError>
where
    T: Copy + Default + Send,
    F: Fn(&[u32], &mut [T]) + Sync,
{
    let n = element_count(function, shape)?;
    let mut out = vec![T::default(); n];
    fill_blocks(key, &mut out, &transform);
    Ok(ArrayD::from_shape_vec(IxDyn(shape), out).expect("element count matches the shape"))
}

/// Fills `out` (the whole flat array) block by block, in parallel when large.
pub(crate) fn fill_blocks<T, F>(key: &Key, out: &mut [T], transform: &F)
where
    T: Copy + Send,
    F: Fn(&[u32], &mut [T]) + Sync,
{
    let total = out.len() as u64;
    let block = |(b, chunk): (usize, &mut [T])| {
        let mut words = [0u32; BLOCK];
        let words = &mut words[..chunk.len()];
        key.fill_bits(total, (b * BLOCK) as u64, words);
        simd(
            #[inline(always)]
            || transform(words, chunk),
        );
    };
    if out.len() >= PARALLEL_MIN {
        out.par_chunks_mut(BLOCK).enumerate().for_each(block);
    } else {
        out.chunks_mut(BLOCK).enumerate().for_each(block);
    }
}

/// Runs `f` compiled for the widest vector instructions the CPU has, so the
/// element-wise transforms (polynomials, logs) vectorize as the hash does.
#[inline(always)]
pub(crate) fn simd<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: AVX-512F is available, checked just above; it is the
            // only requirement of `run_avx512`.
            return unsafe { run_avx512(f) };
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: AVX2 and FMA are available, checked just above.
            return unsafe { run_avx2(f) };
        }
    }
    f()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn run_avx512<R>(f: impl FnOnce() -> R) -> R {
    f()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn run_avx2<R>(f: impl FnOnce() -> R) -> R {
    f()
}
