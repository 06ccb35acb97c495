//! Turning a key into an array: random words are produced block by block,
//! transformed in place, and large arrays are shared out over all cores.
//!
//! Every element depends only on the key and its flat index, so splitting the
//! output into blocks (and the blocks over threads) gives exactly the bits of
//! one sequential pass.

use ndarray::{ArrayD, IxDyn};
use smallvec::SmallVec;

use super::dtype::UInt;
use super::error::{checked_alloc, RandomError};
use super::key::Key;
use super::uint_bits::fill_uint;

/// Elements per block: its words and outputs (16 KiB for `f32`) stay in the
/// L1 cache between the hash and the transform; 1024 to 16384 measured the
/// same within noise, 512 slower.
const BLOCK: usize = 2048;

/// Arrays with fewer elements than this are sampled on the calling thread.
const PARALLEL_MIN: usize = 1 << 15;

/// Shares per thread in [`sample_all_into`]: small enough that a thread
/// of the pool woken late (10-25 us here) leaves the rest to the others.
const SHARES_PER_THREAD: usize = 8;

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
    if let Some(region) = region_for(shape) {
        let total = checked_total(function, &region.global)?;
        return sample_region(function, &region, 0u32, |words, start, out| {
            key.fill_bits(total, start, words);
            transform(words, out);
        });
    }
    let n = checked_alloc::<T>(function, shape)?;
    let mut out = output(n);
    fill_blocks(key, &mut out, &transform);
    Ok(ArrayD::from_shape_vec(IxDyn(shape), out).expect("element count matches the shape"))
}

/// [`sample`] into `out`, a buffer of `shape`'s element count that the
/// caller reuses from call to call (a compiled step's dropout masks): the
/// same elements, without allocating the array.
pub(crate) fn sample_into<T, F>(
    function: &'static str,
    key: &Key,
    shape: &[usize],
    out: &mut [T],
    transform: F,
) -> Result<(), RandomError>
where
    T: Copy + Default + Send,
    F: Fn(&[u32], &mut [T]) + Sync,
{
    let n = super::error::element_count_of(function, shape, 1)?;
    assert_eq!(n, out.len(), "the buffer holds the shape's elements");
    if region_for(shape).is_some() {
        // A shard of the draw: the region's path, copied.
        let drawn = sample(function, key, shape, transform)?;
        out.copy_from_slice(drawn.as_slice().expect("row-major"));
        return Ok(());
    }
    fill_blocks(key, out, &transform);
    Ok(())
}

/// [`sample_into`] for several arrays, `(key, shape, out)` each, with
/// `transform(i, words, out)` writing array `i`'s outputs (a compiled
/// step's dropout masks): their elements are shared out at once over the
/// calling thread and the pool, rather than in one job of the pool per
/// array that the caller sleeps through. Measured on two 128x512 masks
/// inside the 784-512-512-10 step: 32-37 µs, against 41-44 µs for one
/// share per thread and 42 µs for two `bernoulli` calls.
pub(crate) fn sample_all_into<T, F>(
    function: &'static str,
    arrays: &mut [(&Key, &[usize], &mut [T])],
    transform: F,
) -> Result<(), RandomError>
where
    T: Copy + Default + Send,
    F: Fn(usize, &[u32], &mut [T]) + Sync,
{
    let mut total = 0usize;
    for (_, shape, out) in arrays.iter() {
        let n = super::error::element_count_of(function, shape, 1)?;
        assert_eq!(n, out.len(), "the buffer holds the shape's elements");
        total = total.saturating_add(n);
    }
    // The region is this thread's: look it up before going parallel.
    let whole = arrays
        .iter()
        .all(|(_, shape, _)| region_for(shape).is_none());
    if arrays.len() < 2 || total < PARALLEL_MIN || !whole {
        for (i, (key, shape, out)) in arrays.iter_mut().enumerate() {
            sample_into(function, key, shape, out, |w: &[u32], o: &mut [T]| {
                transform(i, w, o)
            })?;
        }
        return Ok(());
    }
    // Shares of whole blocks, SHARES_PER_THREAD per thread of the pool,
    // taken in turn by the calling thread and the pool's jobs: a thread
    // of the pool that wakes late takes fewer, and the calling thread is
    // never idle while shares are left.
    let per_share = crate::pool::run_len(total, BLOCK, SHARES_PER_THREAD);
    let mut shares: SmallVec<[Share<'_, T>; 16]> = SmallVec::new();
    let mut room = 0;
    for (i, (key, _, out)) in arrays.iter_mut().enumerate() {
        let n = out.len() as u64;
        let mut rest: &mut [T] = out;
        let mut start = 0u64;
        while !rest.is_empty() {
            if room == 0 {
                shares.push(SmallVec::new());
                room = per_share;
            }
            let len = room.min(rest.len());
            let (piece, tail) = std::mem::take(&mut rest).split_at_mut(len);
            room -= len;
            shares
                .last_mut()
                .expect("pushed")
                .push((i, key, n, start, piece));
            start += len as u64;
            rest = tail;
        }
    }
    let transform = &transform;
    let draw = move |share: Share<'_, T>| {
        for (i, key, n, start, piece) in share {
            let mut words = [0u32; BLOCK];
            for (c, chunk) in piece.chunks_mut(BLOCK).enumerate() {
                let words = &mut words[..chunk.len()];
                key.fill_bits(n, start + (c * BLOCK) as u64, words);
                simd(
                    #[inline(always)]
                    || transform(i, words, chunk),
                );
            }
        }
    };
    // The calling thread waits awake for the pool's last shares: asleep at
    // the scope's end it was woken about 10 us after them (measured: two
    // 128x512 masks in 32-37 us instead of 41-44).
    crate::pool::share_out(shares, draw);
    Ok(())
}

/// A thread's part of [`sample_all_into`]'s arrays: pieces `(array, key,
/// the array's element count, the piece's first element, the piece)`.
type Share<'a, T> = SmallVec<[(usize, &'a Key, u64, u64, &'a mut [T]); 2]>;

/// Draws the stream's 32-bit words themselves (`bits`), hashed straight
/// into the array.
pub(crate) fn sample_words(
    function: &'static str,
    key: &Key,
    shape: &[usize],
) -> Result<ArrayD<u32>, RandomError> {
    if region_for(shape).is_some() {
        return sample(function, key, shape, |w: &[u32], o: &mut [u32]| {
            o.copy_from_slice(w)
        });
    }
    let n = checked_alloc::<u32>(function, shape)?;
    let mut out = output(n);
    let total = n as u64;
    let block = |(b, chunk): (usize, &mut [u32])| key.fill_bits(total, (b * BLOCK) as u64, chunk);
    if n >= PARALLEL_MIN {
        crate::pool::share_runs(&mut out, BLOCK, SHARES_PER_THREAD, |first, run| {
            for (b, chunk) in run.chunks_mut(BLOCK).enumerate() {
                block((first + b, chunk));
            }
        });
    } else {
        out.chunks_mut(BLOCK).enumerate().for_each(block);
    }
    Ok(ArrayD::from_shape_vec(IxDyn(shape), out).expect("element count matches the shape"))
}

/// Draws an array of `shape` from JAX's random bits of type `B`
/// (`bits(key, shape, dtype=B)`): fills each block with its elements' bits
/// and hands them to `transform`, which writes the block's outputs.
pub(crate) fn sample_as<B, T, F>(
    function: &'static str,
    key: &Key,
    shape: &[usize],
    transform: F,
) -> Result<ArrayD<T>, RandomError>
where
    B: UInt,
    T: Copy + Default + Send,
    F: Fn(&[B], &mut [T]) + Sync,
{
    if let Some(region) = region_for(shape) {
        let total = checked_total(function, &region.global)? as usize;
        return sample_region(function, &region, B::default(), |bits, start, out| {
            fill_uint(key, total, start as usize, bits);
            transform(bits, out);
        });
    }
    let n = checked_alloc::<T>(function, shape)?;
    let mut out = output(n);
    // `bits` is scratch, one per thread's run of blocks, overwritten by
    // `fill_uint` before `transform` reads it.
    run_blocks(&mut out, B::default(), |bits, b, chunk| {
        fill_uint(key, n, b * BLOCK, bits);
        transform(bits, chunk);
    });
    Ok(ArrayD::from_shape_vec(IxDyn(shape), out).expect("element count matches the shape"))
}

thread_local! {
    /// The block of the array being sampled that this thread computes, set
    /// by [`with_region`] (a device of a mesh computing its shard).
    static REGION: std::cell::RefCell<Option<Window>> = const { std::cell::RefCell::new(None) };
}

/// What a thread computes of the arrays it draws.
#[derive(Clone, Debug)]
pub(crate) enum Window {
    /// Draws of shape `region.global` compute `region`.
    Exact(Region),
    /// A device of a data-parallel computation holding rows
    /// `start..start + rows` of a batch of `global_rows`: a draw whose
    /// leading axis has `rows` elements is that block of the draw with
    /// `global_rows`.
    Batch {
        global_rows: usize,
        start: usize,
        rows: usize,
    },
}

/// A rectangular block of an array: the elements at
/// `start[d]..start[d] + shape[d]` along each axis `d` of an array of shape
/// `global`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Region {
    pub(crate) global: Vec<usize>,
    pub(crate) start: Vec<usize>,
    pub(crate) shape: Vec<usize>,
}

/// Runs `f` with draws of shape `region.global` computing only `region`'s
/// elements, each with the bits it has in the whole array (its global flat
/// index), and returning an array of `region.shape`.
///
/// Only element-wise samplers may run under a region: a sampler that
/// post-processes a draw of the same shape (sorting, a maximum over an
/// axis) would see only the block. The callers (`sharding::random`) name
/// the samplers one by one.
pub(crate) fn with_region<R>(region: Region, f: impl FnOnce() -> R) -> R {
    with_window(Window::Exact(region), f)
}

/// Runs `f` with `window` set for this thread (see [`Window`]).
pub(crate) fn with_window<R>(window: Window, f: impl FnOnce() -> R) -> R {
    struct Reset(Option<Window>);
    impl Drop for Reset {
        fn drop(&mut self) {
            let previous = self.0.take();
            REGION.with(|r| *r.borrow_mut() = previous);
        }
    }
    let previous = REGION.with(|r| r.borrow_mut().replace(window));
    let _reset = Reset(previous);
    f()
}

/// The region set for this thread, if a draw of `shape` is its array.
fn region_for(shape: &[usize]) -> Option<Region> {
    REGION.with(|r| match r.borrow().as_ref()? {
        Window::Exact(region) => (region.global == shape).then(|| region.clone()),
        Window::Batch {
            global_rows,
            start,
            rows,
        } => (shape.first() == Some(rows)).then(|| {
            let mut global = shape.to_vec();
            global[0] = *global_rows;
            let mut begin = vec![0; shape.len()];
            begin[0] = *start;
            Region {
                global,
                start: begin,
                shape: shape.to_vec(),
            }
        }),
    })
}

/// The element count of `shape`, checked, for the hash's counters.
fn checked_total(function: &'static str, shape: &[usize]) -> Result<u64, RandomError> {
    Ok(super::error::element_count_of(function, shape, 1)? as u64)
}

/// Samples the elements of `region` run by run: a run is a stretch that is
/// contiguous in the whole array, and `fill(scratch, start, out)` writes the
/// outputs of the elements at flat positions `start..start + out.len()`.
fn sample_region<S, T, F>(
    function: &'static str,
    region: &Region,
    zero: S,
    fill: F,
) -> Result<ArrayD<T>, RandomError>
where
    S: Copy,
    T: Copy + Default,
    F: Fn(&mut [S], u64, &mut [T]),
{
    let n = checked_alloc::<T>(function, &region.shape)?;
    let mut out = vec![T::default(); n];
    let rank = region.global.len();
    // Axes after `k` are whole, so a run spans region.shape[k] times the
    // elements of those axes.
    let k = (0..rank)
        .rev()
        .find(|&d| region.shape[d] != region.global[d])
        .unwrap_or(0);
    let inner: usize = region.global.get(k + 1..).map_or(1, |s| s.iter().product());
    let run = if rank == 0 {
        1
    } else {
        region.shape[k] * inner
    };
    let mut scratch = vec![zero; BLOCK.min(run.max(1))];
    if n > 0 {
        let outer = &region.shape[..k];
        let mut index = vec![0usize; outer.len()];
        for chunk in out.chunks_mut(run) {
            // The flat position of the run's first element in the whole array.
            let mut at = 0u64;
            for (d, (&g, &s)) in region.global.iter().zip(&region.start).enumerate() {
                let i = s + index.get(d).copied().unwrap_or(0);
                at = at * g as u64 + i as u64;
            }
            for (c, part) in chunk.chunks_mut(BLOCK).enumerate() {
                fill(&mut scratch[..part.len()], at + (c * BLOCK) as u64, part);
            }
            for d in (0..outer.len()).rev() {
                index[d] += 1;
                if index[d] < outer[d] {
                    break;
                }
                index[d] = 0;
            }
        }
    }
    Ok(ArrayD::from_shape_vec(IxDyn(&region.shape), out).expect("element count matches the shape"))
}

/// A zeroed buffer of `n` elements for a sampler to overwrite.
///
/// A large buffer is fresh memory from the kernel, and writing it the first
/// time costs a page fault per 4 KiB page, which for 2^24 floats took more
/// time than hashing them; asking for transparent huge pages makes that
/// one fault per 2 MiB.
fn output<T: Copy + Default>(n: usize) -> Vec<T> {
    // `vec!` of a zero value is `calloc`, which does not touch fresh pages,
    // so the advice comes before the first write.
    let mut out = vec![T::default(); n];
    advise_huge_pages(&mut out);
    out
}

/// Asks Linux to back the whole 2 MiB pages inside `buf` with huge pages
/// (`madvise(MADV_HUGEPAGE)`). Only a hint: contents are unchanged, and
/// where it is refused (or elsewhere than on Linux) nothing happens.
fn advise_huge_pages<T>(buf: &mut [T]) {
    #[cfg(target_os = "linux")]
    {
        use std::ffi::{c_int, c_void};
        extern "C" {
            fn madvise(addr: *mut c_void, len: usize, advice: c_int) -> c_int;
        }
        /// `MADV_HUGEPAGE` of Linux's `asm-generic/mman-common.h`, the same
        /// on every architecture.
        const MADV_HUGEPAGE: c_int = 14;
        /// The span of a transparent huge page.
        const HUGE_PAGE: usize = 2 << 20;

        let start = buf.as_mut_ptr() as usize;
        let end = start + std::mem::size_of_val(buf);
        let first = start.next_multiple_of(HUGE_PAGE);
        let last = end / HUGE_PAGE * HUGE_PAGE;
        if last > first {
            // SAFETY: `madvise` is libc's (std links libc on Linux) and has
            // exactly this signature. The range `first..last` is aligned to
            // 2 MiB, hence to the page size, and lies inside `buf`, memory
            // we own and that stays mapped during the call. MADV_HUGEPAGE
            // only sets the kernel's page-size policy for the range: it
            // never changes memory contents, so no Rust value is affected;
            // on failure (e.g. no THP support) it returns -1, ignored.
            unsafe {
                madvise(first as *mut c_void, last - first, MADV_HUGEPAGE);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = buf;
}

/// Fills `out` (the whole flat array) block by block, in parallel when large.
pub(crate) fn fill_blocks<T, F>(key: &Key, out: &mut [T], transform: &F)
where
    T: Copy + Send,
    F: Fn(&[u32], &mut [T]) + Sync,
{
    let total = out.len() as u64;
    // `words` is a scratch buffer, one per thread's run of blocks, every
    // word of which `fill_bits` overwrites before `transform` reads it.
    run_blocks(out, 0u32, |words, b, chunk| {
        key.fill_bits(total, (b * BLOCK) as u64, words);
        simd(
            #[inline(always)]
            || transform(words, chunk),
        );
    });
}

/// Calls `block(scratch, index, chunk)` for each block of `out`, in
/// parallel when `out` is large, with a scratch buffer of the chunk's
/// length (one buffer per thread's run of blocks, filled with `zero`).
fn run_blocks<S, T, F>(out: &mut [T], zero: S, block: F)
where
    S: Copy + Send + Sync,
    T: Send,
    F: Fn(&mut [S], usize, &mut [T]) + Sync,
{
    // The scratch lives on the stack (at most 16 KiB): a draw allocates
    // nothing but its output, and a redraw into a reused buffer nothing.
    let run = |scratch: &mut [S; BLOCK], (b, chunk): (usize, &mut [T])| {
        block(&mut scratch[..chunk.len()], b, chunk)
    };
    if out.len() >= PARALLEL_MIN {
        // Runs of blocks, SHARES_PER_THREAD per thread, shared between the
        // calling thread and the pool (see `share_runs`), each with its
        // scratch.
        crate::pool::share_runs(out, BLOCK, SHARES_PER_THREAD, |first, run_of| {
            let mut scratch = [zero; BLOCK];
            for (b, chunk) in run_of.chunks_mut(BLOCK).enumerate() {
                run(&mut scratch, (first + b, chunk));
            }
        });
    } else {
        let mut scratch = [zero; BLOCK];
        out.chunks_mut(BLOCK)
            .enumerate()
            .for_each(|b| run(&mut scratch, b));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::{self, ThreefryMode};

    /// Blocks, threads and the straight-into-the-array `bits` path give the
    /// words of one sequential pass over the stream, in both modes, for a
    /// length that is no multiple of a block or a hash batch.
    #[test]
    fn blocks_and_threads_give_one_pass() {
        let n = 3 * PARALLEL_MIN + 12_345;
        for mode in [ThreefryMode::Partitionable, ThreefryMode::NonPartitionable] {
            let key = random::key(42).with_mode(mode);
            let mut whole = vec![0u32; n];
            key.fill_bits(n as u64, 0, &mut whole);

            let bits = random::bits(key.clone(), &[n]).unwrap();
            assert_eq!(bits.as_slice().unwrap(), &whole[..], "{mode:?} bits");

            let copied = sample("copy", &key, &[n], |w: &[u32], o: &mut [u32]| {
                o.copy_from_slice(w)
            })
            .unwrap();
            assert_eq!(copied.as_slice().unwrap(), &whole[..], "{mode:?} sample");
        }
    }
}
