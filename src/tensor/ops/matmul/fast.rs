//! Products above the exact limit, through the `gemm` crate (its own
//! summation order, not XLA's).
//!
//! A large product is cut into blocks of columns (or of rows) that the
//! calling thread and rayon's pool share out ([`crate::pool::share_out`]),
//! each block one single-threaded `gemm` call. Handing the whole product
//! to `gemm`'s own rayon parallelism instead puts the caller to sleep at
//! each of its parallel phases (several per product: packing, then the
//! kernels, per block of the sum) when it is not a thread of the pool, as
//! an eager or compiled step's thread is not: a 784-512-512-10 training
//! step spent about a fifth of its time in those hand-offs.
//!
//! A block sums each output exactly as the whole product does: `gemm`
//! splits a sum into chunks whose length depends only on `k`, except in
//! products of at most 64 rows and 64 columns, which it chunks by 512
//! terms, and it has other kernels for products of at most 256 outputs or
//! with a single row or column. Blocks are cut only where none of these
//! differ between a block and the whole product (see [`Blocks::of`]), so
//! the results do not depend on the number of threads.

use smallvec::SmallVec;

/// Below this many multiply-adds a product runs on the calling thread.
const PARALLEL_THRESHOLD: usize = 48 * 48 * 48;

/// Blocks per thread of the pool: a thread that starts late takes fewer.
const BLOCKS_PER_THREAD: usize = 2;

/// Blocks start at multiples of this many rows or columns (whole vectors
/// of `gemm`'s kernels); each spans at least twice as many, less one.
const ALIGN: usize = 16;

/// `out = a @ b` through the `gemm` crate, for operands in slices with
/// non-negative (row, column) strides and a row-major `out` of `m * n`
/// elements.
pub(super) fn fast_matmul(
    x: &[f32],
    sa: (usize, usize),
    y: &[f32],
    sb: (usize, usize),
    (m, k, n): (usize, usize, usize),
    out: &mut [f32],
) {
    let threads = rayon::current_num_threads();
    let blocks = if m * n * k >= PARALLEL_THRESHOLD && threads > 1 {
        Blocks::of(m, k, n, threads * BLOCKS_PER_THREAD)
    } else {
        Blocks::Whole
    };
    in_blocks(blocks, x, sa, y, sb, (m, k, n), out)
}

/// [`fast_matmul`] cut into `blocks`.
fn in_blocks(
    blocks: Blocks,
    x: &[f32],
    sa: (usize, usize),
    y: &[f32],
    sb: (usize, usize),
    (m, k, n): (usize, usize, usize),
    out: &mut [f32],
) {
    assert!(out.len() == m * n && m > 0 && n > 0 && k > 0);
    // Every element the product reads must lie in its slice.
    assert!((m - 1) * sa.0 + (k - 1) * sa.1 < x.len());
    assert!((k - 1) * sb.0 + (n - 1) * sb.1 < y.len());
    match blocks {
        Blocks::Whole | Blocks::WholeParallel => {
            let parallelism = match blocks {
                Blocks::WholeParallel => gemm::Parallelism::Rayon(0),
                _ => gemm::Parallelism::None,
            };
            // SAFETY: the asserts above check that every element `(i, p)`
            // of `a` (offset `i*sa.0 + p*sa.1`, `i < m`, `p < k`) lies in
            // `x`, and every `(p, j)` of `b` in `y`; `out` is exclusively
            // borrowed, exactly `m * n` elements written row-major with
            // row stride `n`, and cannot alias `x` or `y` (shared borrows).
            unsafe {
                gemm_block(
                    x.as_ptr(),
                    sa,
                    y.as_ptr(),
                    sb,
                    (m, k, n),
                    out.as_mut_ptr(),
                    n,
                    parallelism,
                )
            }
        }
        Blocks::Rows(count) => {
            let mut parts: SmallVec<[(usize, &mut [f32]); 16]> = SmallVec::new();
            let mut rest = out;
            for b in 0..count {
                let rows = block_start(b + 1, m, count) - block_start(b, m, count);
                let (part, tail) = rest.split_at_mut(rows * n);
                parts.push((block_start(b, m, count), part));
                rest = tail;
            }
            crate::pool::share_out(parts, |(i0, o)| {
                let mb = o.len() / n;
                // SAFETY: rows `i0..i0 + mb` of `a` lie in `x` (the assert
                // above covers every row below `m`, and `i0 + mb <= m`),
                // all of `b` in `y`; `o` is this block's own exclusively
                // borrowed rows of `out`, `mb * n` elements, row stride `n`.
                unsafe {
                    gemm_block(
                        x[i0 * sa.0..].as_ptr(),
                        sa,
                        y.as_ptr(),
                        sb,
                        (mb, k, n),
                        o.as_mut_ptr(),
                        n,
                        gemm::Parallelism::None,
                    )
                }
            });
        }
        Blocks::Cols(count) => {
            let ptrs = Shared {
                x: x.as_ptr(),
                y: y.as_ptr(),
                out: out.as_mut_ptr(),
            };
            crate::pool::share_out(0..count, |b| {
                let p = &ptrs;
                let j0 = block_start(b, n, count);
                let nb = block_start(b + 1, n, count) - j0;
                // SAFETY: all of `a` lies in `x`, and columns `j0..j0 + nb`
                // of `b` in `y` (`j0 + nb <= n`, covered by the assert
                // above), so `y + j0 * sb.1` and `out + j0` stay within
                // their slices. This block writes only the elements
                // `i * n + j` of `out` with `j` in `j0..j0 + nb`: the
                // blocks' column ranges are disjoint, so no two threads
                // write the same element, and nothing reads `out` until
                // `share_out` has returned, after every block is done,
                // while `out` is still exclusively borrowed by this call.
                unsafe {
                    gemm_block(
                        p.x,
                        sa,
                        p.y.add(j0 * sb.1),
                        sb,
                        (m, k, nb),
                        p.out.add(j0),
                        n,
                        gemm::Parallelism::None,
                    )
                }
            });
        }
    }
}

/// Where block `b` of `count` along `len` starts (`len` for `b == count`):
/// `b * len / count` rounded down to a multiple of [`ALIGN`].
fn block_start(b: usize, len: usize, count: usize) -> usize {
    if b >= count {
        len
    } else {
        b * len / count / ALIGN * ALIGN
    }
}

/// How [`fast_matmul`] cuts a product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Blocks {
    /// One `gemm` call on the calling thread.
    Whole,
    /// One `gemm` call with its own parallelism (rayon's pool).
    WholeParallel,
    /// This many blocks of rows (see [`block_start`]).
    Rows(usize),
    /// This many blocks of columns.
    Cols(usize),
}

impl Blocks {
    /// Up to `pieces` blocks of `[m, k] @ [k, n]`: of columns when `m <=
    /// n` (each block packs A's rows again, the smaller operand then), of
    /// rows otherwise (each packs B again), each at least `2 * ALIGN`
    /// long on average (so at least `ALIGN + 1`). A block has more than
    /// 256 outputs and more than one row and column, as the whole product
    /// does; when the side not cut is at most 64 long and the sum longer
    /// than 512 terms, `gemm` would chunk a block's sums by 512 terms and
    /// the whole product's by its own length (or the other way round), so
    /// such a product, and one whose uncut side is shorter than [`ALIGN`],
    /// is left whole to `gemm`'s own parallelism instead.
    fn of(m: usize, k: usize, n: usize, pieces: usize) -> Blocks {
        let (along, other) = if m <= n { (n, m) } else { (m, n) };
        let count = pieces.min(along / (2 * ALIGN));
        let same_chunks = other >= ALIGN && (other > 64 || k <= 512);
        match (count >= 2, same_chunks) {
            (false, _) => Blocks::Whole,
            (true, false) => Blocks::WholeParallel,
            (true, true) if m <= n => Blocks::Cols(count),
            (true, true) => Blocks::Rows(count),
        }
    }
}

/// The operands' addresses, shared by the blocks of a [`Blocks::Cols`]
/// product (each writes its own columns of `out`).
struct Shared {
    x: *const f32,
    y: *const f32,
    out: *mut f32,
}

// SAFETY: the pointers are only read through (`x`, `y`) or written at
// disjoint elements (`out`, one range of columns per block; see
// `fast_matmul`) while the slices they come from are borrowed by
// `fast_matmul`, which returns only after every block is done.
unsafe impl Sync for Shared {}

/// `out = a @ b`, `[m, k] @ [k, n]`, `a` at `x` with (row, column) strides
/// `sa`, `b` at `y` with strides `sb`, `out` row-major with row stride
/// `rs`: one `gemm` call.
///
/// # Safety
///
/// Every element `(i, p)` of `a` (`i < m`, `p < k`) and `(p, j)` of `b` must
/// be readable at those strides; the `m * n` elements `i * rs + j` (`j <
/// n`) of `out` must be writable, and no other thread may access them
/// during the call.
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_block(
    x: *const f32,
    sa: (usize, usize),
    y: *const f32,
    sb: (usize, usize),
    (m, k, n): (usize, usize, usize),
    out: *mut f32,
    rs: usize,
    parallelism: gemm::Parallelism,
) {
    // SAFETY: the caller's contract is gemm's: reads of `a` and `b` and
    // writes of `out` within those elements. `read_dst = false`: gemm
    // overwrites `out` without reading it.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            out,
            1,
            rs as isize,
            false,
            x,
            sa.1 as isize,
            sa.0 as isize,
            y,
            sb.1 as isize,
            sb.0 as isize,
            0.0,
            1.0,
            false,
            false,
            false,
            parallelism,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Operands of `[m, k] @ [k, n]` with a few distinct values, B
    /// row-major or transposed (A's strides are the caller's).
    fn operands(m: usize, k: usize, n: usize, bt: bool) -> (Vec<f32>, Vec<f32>, (usize, usize)) {
        let val = |i: usize| ((i * 2654435761) % 1000) as f32 / 997.0 - 0.5;
        let x = (0..m * k).map(val).collect();
        let y = (0..k * n).map(|i| val(i + 7)).collect();
        (x, y, if bt { (1, k) } else { (n, 1) })
    }

    /// Every way of cutting gives the whole single-threaded product's
    /// bits, whatever the number of blocks, with A or B transposed.
    #[test]
    fn blocks_sum_as_the_whole_product() {
        for (m, k, n) in [
            (128, 784, 512),
            (784, 128, 512),
            (512, 600, 40),
            (40, 1100, 48),
            (48, 1100, 200),
            (300, 700, 30),
            (2048, 512, 36),
            (100, 3, 200),
            (70, 600, 2),
            (64, 64, 64),
        ] {
            for (at, bt) in [(false, false), (false, true), (true, false)] {
                let (x, y, sb) = operands(m, k, n, bt);
                let sa = if at { (1, m) } else { (k, 1) };
                let mut whole = vec![0.0; m * n];
                // SAFETY: the operands and `whole` have exactly the
                // product's sizes at these strides.
                unsafe {
                    gemm_block(
                        x.as_ptr(),
                        sa,
                        y.as_ptr(),
                        sb,
                        (m, k, n),
                        whole.as_mut_ptr(),
                        n,
                        gemm::Parallelism::None,
                    )
                };
                for pieces in [1, 2, 3, 4, 8] {
                    let blocks = Blocks::of(m, k, n, pieces);
                    let mut out = vec![f32::NAN; m * n];
                    in_blocks(blocks, &x, sa, &y, sb, (m, k, n), &mut out);
                    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&out), bits(&whole), "{m}x{k}x{n} {blocks:?}");
                }
            }
        }
    }

    #[test]
    fn blocks_are_cut_along_the_longer_side() {
        assert_eq!(Blocks::of(128, 784, 512, 4), Blocks::Cols(4));
        assert_eq!(Blocks::of(784, 128, 512, 4), Blocks::Rows(4));
        assert_eq!(Blocks::of(2048, 512, 36, 4), Blocks::Rows(4));
        assert_eq!(Blocks::of(64, 64, 64, 4), Blocks::Cols(2));
        assert_eq!(Blocks::of(512, 512, 40, 1), Blocks::Whole);
        // 40 columns: a block of 64 rows would chunk 1100 terms by 512.
        assert_eq!(Blocks::of(1000, 1100, 40, 4), Blocks::WholeParallel);
        assert_eq!(Blocks::of(1000, 100, 8, 4), Blocks::WholeParallel);
    }

    #[test]
    fn blocks_cover_the_side_once() {
        for len in [32, 33, 64, 100, 512, 784, 1000] {
            for count in 2..=(len / 32).min(8) {
                let starts: Vec<usize> = (0..=count).map(|b| block_start(b, len, count)).collect();
                assert_eq!((starts[0], starts[count]), (0, len));
                assert!(starts.windows(2).all(|w| w[1] - w[0] > ALIGN), "{starts:?}");
            }
        }
    }
}
