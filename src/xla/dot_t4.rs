//! The blocked kernel of [`super::dot_blocked`] for plans with four
//! partial sums per output (`tile_k = 4`: the YNNPACK kernels XLA picks for
//! narrow products such as `[512, 512] @ [512, 40]`), written with AVX-512
//! intrinsics.
//!
//! The generic kernel keeps each partial sum of an output in a vector of
//! its own: four sets of accumulators, so a block of six rows covers one
//! vector of columns, and each term costs seven loads for six FMAs. Here a
//! vector holds the four partial sums of four outputs (lane `4j + t`:
//! column `j`'s partial sum `t`). One FMA then takes four consecutive terms
//! of four columns: A's four terms are one 128-bit broadcast, B is packed
//! so that its four terms of four columns are one vector. A block of six
//! rows covers sixteen columns with 24 accumulators, ten loads for 24 FMAs,
//! and narrow products waste columns only up to a multiple of four.
//!
//! The arithmetic per output is the generic kernel's: term `p` of a chunk
//! goes to partial sum `p % 4` by a fused multiply-add (chunks start at
//! multiples of four), a chunk's partial sums are reduced as
//! `(s0 + s1) + (s2 + s3)` and added to the output so far; in the tail
//! chunk (`k mod 4` terms) the missing terms' partial sums stay `+0`
//! (here: `0 * 0` added to `+0`). So the same bits.

use std::arch::x86_64::{
    __m512, __m512i, __mmask16, _mm512_add_ps, _mm512_broadcast_f32x4, _mm512_fmadd_ps,
    _mm512_loadu_epi32, _mm512_maskz_loadu_ps, _mm512_permutex2var_ps, _mm512_permutexvar_ps,
    _mm512_setr_epi32, _mm512_setzero_ps, _mm512_shuffle_ps, _mm512_storeu_ps, _mm512_unpackhi_ps,
    _mm512_unpacklo_ps, _mm_loadu_ps,
};

use smallvec::SmallVec;

use super::dot::DotPlan;
use super::dot_avx512::{add_partial, load};
use super::dot_blocked::{panels, Operands};

/// Rows of A per block.
const MR: usize = 6;
/// Columns per panel: four groups of four.
const NR: usize = 16;
/// Floats per group of four terms of a packed panel: four column groups
/// of 16 lanes (a panel narrower than 16 columns is zero-padded).
const PW: usize = 64;
/// Floats per group of four terms of a packed block of A (`MR` rows of
/// four terms).
const AW: usize = MR * 4;

/// Below this many multiply-adds a product runs on the calling thread
/// (as [`super::dot_blocked`]'s kernels).
const PARALLEL_THRESHOLD: usize = 2 * 1024 * 1024;

/// Whether [`planned_t4`] runs `plan` for `k` terms: four partial sums per
/// output, no chain, chunks that start at multiples of four and hold at
/// least [`MIN_CHUNK`] terms, and a CPU with AVX-512F and FMA.
pub(crate) fn runs(plan: &DotPlan, k: usize) -> bool {
    fits(plan)
        && plan
            .tiles
            .iter()
            .all(|&(_, _, kc)| kc.min(k / 4 * 4) >= MIN_CHUNK)
        && super::dot_avx512::available()
}

/// Whether [`planned_t4`] computes `plan`'s sums: four partial sums per
/// output, no chain, chunks that start at multiples of four.
fn fits(plan: &DotPlan) -> bool {
    plan.tile_k == 4 && !plan.chain && plan.tiles.iter().all(|&(_, _, kc)| kc % 4 == 0)
}

/// The fewest terms per chunk for which [`planned_t4`] beats the generic
/// kernel: each chunk ends by reducing every output's partial sums across
/// vectors (a dozen shuffles and adds per row of sixteen outputs), which
/// very short chunks do not pay back. Measured, 2 cores, best of many
/// calls: at 16 terms `[512, 16] @ [16, 10]` 3.6 -> 2.7 us, `[2048, 16] @
/// [16, 100]` 35.9 -> 37.6 us; at 8 terms `[512, 8] @ [8, 100]` 10.0 ->
/// 11.7 us.
const MIN_CHUNK: usize = 16;

/// `out = a @ b` summed as `plan` says (see [`runs`]), for the operands of
/// [`super::dot_blocked::planned_matmul`]; `packed`: scratch, grown and
/// reused.
pub(crate) fn planned_t4(
    (x, sa, y, sb, (m, k, n), plan): Operands<'_>,
    out: &mut [f32],
    packed: &mut Vec<f32>,
) {
    debug_assert!(fits(plan) && out.len() == m * n);
    let kq = k.div_ceil(4);
    let count = panels(plan, NR).count();
    let blocks = m.div_ceil(MR);
    // A's rows are read in place when contiguous (packing them cost a
    // tenth of a `[2048, 512] @ [512, 36]` product); only a tail of `k mod
    // 4` terms is copied, zero-padded.
    let in_place = sa.1 == 1;
    let need_a = if in_place { 0 } else { blocks * kq * AW };
    let need_b = count * kq * PW;
    let scratch = super::dot_blocked::aligned_scratch(packed, need_b + need_a);
    let (bpack, apack) = scratch.split_at_mut(need_b);
    let parallel = m * n * k >= PARALLEL_THRESHOLD && rayon::current_num_threads() > 1;
    let panels_of_b = bpack.chunks_exact_mut(kq * PW).zip(panels(plan, NR));
    let pack =
        |(dst, (c0, w, _)): (&mut [f32], (usize, usize, usize))| pack_panel(y, sb, k, (c0, w), dst);
    if parallel {
        crate::pool::share_out(panels_of_b, pack);
    } else {
        panels_of_b.for_each(pack);
    }
    let bpack: &[f32] = bpack;
    let rows = |(b0, (o, a)): (usize, (&mut [f32], &mut [f32]))| {
        let nrows = o.len() / n;
        let i0 = b0 * MR;
        let a = if in_place {
            Rows::InPlace(&x[i0 * sa.0..], sa.0)
        } else {
            pack_rows(x, sa, k, (i0, nrows), a);
            Rows::Packed(a)
        };
        // SAFETY: `runs` checked that the CPU supports AVX-512F and FMA,
        // the only requirement of `rows_t4`.
        unsafe { rows_t4(a, bpack, (k, n), plan, nrows, o) };
    };
    if !parallel {
        return rows((0, (out, apack)));
    }
    // The blocks shared out evenly, a share per thread (see
    // `dot_blocked::run_body`).
    let per = blocks.div_ceil(rayon::current_num_threads());
    let a_per = if in_place { 0 } else { per * kq * AW };
    let mut apacks: SmallVec<[&mut [f32]; 8]> = SmallVec::new();
    let mut rest = apack;
    for _ in 0..blocks.div_ceil(per) {
        let len = a_per.min(rest.len());
        let (a, tail) = std::mem::take(&mut rest).split_at_mut(len);
        apacks.push(a);
        rest = tail;
    }
    let shares = out
        .chunks_mut(per * MR * n)
        .zip(apacks)
        .enumerate()
        .map(|(s, share)| (s * per, share));
    crate::pool::share_out(shares, rows);
}

/// Where [`rows_t4`] reads one block's rows of A.
#[derive(Clone, Copy)]
enum Block<'a> {
    /// Its rows in A itself.
    InPlace([&'a [f32]; MR]),
    /// Its packed terms (see [`pack_rows`]).
    Packed(&'a [f32]),
}

/// Where [`rows_t4`] reads the rows of A.
#[derive(Clone, Copy)]
enum Rows<'a> {
    /// Packed by [`pack_rows`].
    Packed(&'a [f32]),
    /// A itself from the first row on, rows contiguous and `.1` apart.
    InPlace(&'a [f32], usize),
}

/// Packs columns `c0..c0 + w` (`w <= 16`) of B (`[k, n]` in `y`, strides
/// `sb`) into `dst`: per group of four terms `q`, 64 floats, lane
/// `16g + 4j + t` holding `b[4q + t][c0 + 4g + j]`, zeros past `k` and `w`.
fn pack_panel(y: &[f32], sb: (usize, usize), k: usize, (c0, w): (usize, usize), dst: &mut [f32]) {
    if sb.1 == 1 {
        // SAFETY: `planned_t4`'s caller checked (`runs`) that the CPU
        // supports AVX-512F, the only requirement of `pack_row_major`.
        unsafe { pack_row_major(y, sb.0, k, (c0, w), dst) };
        return;
    }
    for (q, row) in dst.chunks_exact_mut(PW).enumerate() {
        for (c, lanes) in row.chunks_exact_mut(4).enumerate() {
            // Lanes `4c..4c + 4`: column `c` of the panel, terms `4q..`.
            if c >= w {
                lanes.fill(0.0);
                continue;
            }
            for (t, v) in lanes.iter_mut().enumerate() {
                let p = 4 * q + t;
                *v = if p < k {
                    y[p * sb.0 + (c0 + c) * sb.1]
                } else {
                    0.0
                };
            }
        }
    }
}

/// [`pack_panel`] for B's rows contiguous (`row` floats apart): per group
/// of four terms, the four rows' 16 columns (zero past `w` and `k`) are
/// interleaved by three two-source permutes per vector of the panel (a
/// scalar scatter was a sixth of a `[512, 512] @ [512, 40]` product).
///
/// # Safety
///
/// The CPU must support AVX-512F.
#[target_feature(enable = "avx512f")]
unsafe fn pack_row_major(
    y: &[f32],
    row: usize,
    k: usize,
    (c0, w): (usize, usize),
    dst: &mut [f32],
) {
    let mask: __mmask16 = ((1u32 << w) - 1) as u16;
    // Lanes 2j, 2j + 1 of the first permute: rows t and t + 1 at column
    // 4g + j; the second puts lane 4j + t of group g in place.
    let pairs: [__m512i; 4] = std::array::from_fn(|g| {
        let i: [i32; 16] = std::array::from_fn(|l| {
            let (j, second) = (l / 2, l % 2);
            if l < 8 {
                (4 * g + j) as i32 + 16 * second as i32
            } else {
                0
            }
        });
        _mm512_loadu_epi32(i.as_ptr())
    });
    let order: [i32; 16] = std::array::from_fn(|e| {
        let (j, t) = (e / 4, e % 4);
        (2 * j + t % 2 + 16 * (t / 2)) as i32
    });
    let order = _mm512_loadu_epi32(order.as_ptr());
    for (q, group) in dst.chunks_exact_mut(PW).enumerate() {
        let r: [__m512; 4] = std::array::from_fn(|t| {
            let p = 4 * q + t;
            if p < k {
                let src = &y[p * row + c0..p * row + c0 + w];
                // SAFETY: the mask selects the first `w` lanes, exactly the
                // elements of `src` (bounds checked above); masked-off
                // lanes are not read (and are zero).
                unsafe { _mm512_maskz_loadu_ps(mask, src.as_ptr()) }
            } else {
                _mm512_setzero_ps()
            }
        });
        for (g, out) in group.chunks_exact_mut(16).enumerate() {
            let ab = _mm512_permutex2var_ps(r[0], pairs[g], r[1]);
            let cd = _mm512_permutex2var_ps(r[2], pairs[g], r[3]);
            let v = _mm512_permutex2var_ps(ab, order, cd);
            // SAFETY: `out` is 16 f32s we may write (`chunks_exact_mut`);
            // `_mm512_storeu_ps` writes exactly those 64 bytes.
            unsafe { _mm512_storeu_ps(out.as_mut_ptr(), v) };
        }
    }
}

/// Packs rows `i0..i0 + rows` of A (`[m, k]` in `x`, strides `sa`) into
/// `dst`: blocks of `MR` rows, per group of four terms `q` the block's rows'
/// terms `4q..4q + 4` (`[q][r][t]`), zeros past `k` and the last row.
fn pack_rows(x: &[f32], sa: (usize, usize), k: usize, (i0, rows): (usize, usize), dst: &mut [f32]) {
    let kq = k.div_ceil(4);
    let kmain = k / 4 * 4;
    for (b, block) in dst.chunks_exact_mut(kq * AW).enumerate() {
        let r0 = b * MR;
        for r in 0..MR {
            let i = i0 + r0 + r;
            let live = r0 + r < rows;
            if live && sa.1 == 1 {
                // A row contiguous: four terms at a time (a copy of
                // constant size), then the tail.
                let src = &x[i * sa.0..i * sa.0 + k];
                let groups = block.chunks_exact_mut(AW).zip(src[..kmain].chunks_exact(4));
                for (dq, sq) in groups {
                    let d: &mut [f32; 4] = (&mut dq[r * 4..r * 4 + 4]).try_into().expect("4");
                    *d = sq.try_into().expect("4 terms");
                }
                if kmain < k {
                    let lanes = &mut block[(kq - 1) * AW + r * 4..(kq - 1) * AW + r * 4 + 4];
                    for (t, v) in lanes.iter_mut().enumerate() {
                        *v = src.get(kmain + t).copied().unwrap_or(0.0);
                    }
                }
                continue;
            }
            for q in 0..kq {
                let lanes = &mut block[q * AW + r * 4..q * AW + r * 4 + 4];
                for (t, v) in lanes.iter_mut().enumerate() {
                    let p = 4 * q + t;
                    *v = if live && p < k {
                        x[i * sa.0 + p * sa.1]
                    } else {
                        0.0
                    };
                }
            }
        }
    }
}

/// The four values `s[0..4]` in each 128-bit quarter of a vector.
#[target_feature(enable = "avx512f")]
#[inline]
fn broadcast4(s: &[f32; 4]) -> __m512 {
    // SAFETY: `s` is 4 initialized f32s; `_mm_loadu_ps` reads exactly those
    // 16 bytes, unaligned reads allowed.
    _mm512_broadcast_f32x4(unsafe { _mm_loadu_ps(s.as_ptr()) })
}

/// One chunk for one block: `a` the block's packed term groups of the chunk
/// (`AW` floats each), `b` the panel's (`PW` floats each), `NG` groups of
/// four columns. Lane `4j + t` of `acc[r][g]`: partial sum `t` of row `r`,
/// column `4g + j`.
#[target_feature(enable = "avx512f,fma")]
#[inline]
fn chunk<const NG: usize>(a: &[f32], b: &[f32]) -> [[__m512; NG]; MR] {
    let mut acc = [[_mm512_setzero_ps(); NG]; MR];
    for (bq, aq) in b.chunks_exact(PW).zip(a.chunks_exact(AW)) {
        let mut bv = [_mm512_setzero_ps(); NG];
        for (g, v) in bv.iter_mut().enumerate() {
            *v = load(bq, g * 16);
        }
        for (r, accr) in acc.iter_mut().enumerate() {
            let at: &[f32; 4] = aq[r * 4..r * 4 + 4].try_into().expect("4 terms");
            let av = broadcast4(at);
            for (x, &bx) in accr.iter_mut().zip(&bv) {
                *x = _mm512_fmadd_ps(av, bx, *x);
            }
        }
    }
    acc
}

/// [`chunk`] reading the block's rows in place: `rows[r]` holds row `r`'s
/// terms, the chunk's from `s` on (four per group of `b`).
#[target_feature(enable = "avx512f,fma")]
#[inline]
fn chunk_in_place<const NG: usize>(rows: &[&[f32]; MR], s: usize, b: &[f32]) -> [[__m512; NG]; MR] {
    let nq = b.len() / PW;
    // Plain loops (`array::map` was a call of its own per chunk).
    let mut cut: [&[f32]; MR] = [&[]; MR];
    for (c, r) in cut.iter_mut().zip(rows) {
        *c = &r[s..s + nq * 4];
    }
    let rows = cut;
    let mut acc = [[_mm512_setzero_ps(); NG]; MR];
    for (q, bq) in b.chunks_exact(PW).enumerate() {
        let mut bv = [_mm512_setzero_ps(); NG];
        for (g, v) in bv.iter_mut().enumerate() {
            *v = load(bq, g * 16);
        }
        for (accr, row) in acc.iter_mut().zip(&rows) {
            let at: &[f32; 4] = row[q * 4..q * 4 + 4].try_into().expect("4 terms");
            let av = broadcast4(at);
            for (x, &bx) in accr.iter_mut().zip(&bv) {
                *x = _mm512_fmadd_ps(av, bx, *x);
            }
        }
    }
    acc
}

/// The sums of sixteen columns from the partial sums of four groups
/// (`x[g]`, lanes `4j + t`: column `4g + j`'s partial sum `t`), lane `c`
/// for column `c`: `(s0 + s1) + (s2 + s3)` each.
#[target_feature(enable = "avx512f")]
#[inline]
fn column_sums(x: [__m512; 4]) -> __m512 {
    // A 4x4 transpose within each 128-bit quarter: `y[t]`, quarter `j`,
    // lane `g`: partial sum `t` of column `4g + j`.
    let t0 = _mm512_unpacklo_ps(x[0], x[1]);
    let t1 = _mm512_unpacklo_ps(x[2], x[3]);
    let t2 = _mm512_unpackhi_ps(x[0], x[1]);
    let t3 = _mm512_unpackhi_ps(x[2], x[3]);
    let y0 = _mm512_shuffle_ps::<0x44>(t0, t1);
    let y1 = _mm512_shuffle_ps::<0xEE>(t0, t1);
    let y2 = _mm512_shuffle_ps::<0x44>(t2, t3);
    let y3 = _mm512_shuffle_ps::<0xEE>(t2, t3);
    let sums = _mm512_add_ps(_mm512_add_ps(y0, y1), _mm512_add_ps(y2, y3));
    // Column `4g + j` from lane `4j + g`.
    let order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    _mm512_permutexvar_ps(order, sums)
}

/// A chunk's sums for the first `rows` rows of a block into the output
/// (`o`, `n` wide, the block's first output at `start`, `w` columns):
/// stored by the first chunk, added to the output so far by the others.
#[target_feature(enable = "avx512f")]
#[inline]
fn add_block<const NG: usize>(
    acc: &[[__m512; NG]; MR],
    rows: usize,
    o: &mut [f32],
    (start, n, w): (usize, usize, usize),
    first: bool,
) {
    for (r, accr) in acc.iter().enumerate().take(rows) {
        let mut groups = [_mm512_setzero_ps(); 4];
        groups[..NG].copy_from_slice(accr);
        let sums = column_sums(groups);
        let dst = &mut o[start + r * n..start + r * n + w.min(16)];
        add_partial(dst, sums, first);
    }
}

/// The `rows` rows of the product in `o` (row-major, `n` wide) from their
/// packed blocks (`apack`, see [`pack_rows`]) and B's packed panels
/// (`bpack`, see [`pack_panel`]): block by block, each over every panel,
/// chunk by chunk as the plan cuts `k`.
///
/// # Safety
///
/// The CPU must support AVX-512F and FMA.
#[target_feature(enable = "avx512f,fma")]
unsafe fn rows_t4(
    a: Rows<'_>,
    bpack: &[f32],
    (k, n): (usize, usize),
    plan: &DotPlan,
    rows: usize,
    o: &mut [f32],
) {
    let kq = k.div_ceil(4);
    let kmain = k / 4 * 4;
    for r0 in (0..rows).step_by(MR) {
        let br = MR.min(rows - r0);
        // The block's rows in place (past the last row, the first again:
        // computed, never stored) with their tail terms zero-padded, or
        // its packed terms.
        let mut tails = [[0.0f32; 4]; MR];
        let block = match a {
            Rows::InPlace(x, stride) => {
                let mut rows: [&[f32]; MR] = [&[]; MR];
                for (r, (row, t)) in rows.iter_mut().zip(&mut tails).enumerate() {
                    *row = &x[(r0 + r.min(br - 1)) * stride..][..k];
                    t[..k - kmain].copy_from_slice(&row[kmain..]);
                }
                Block::InPlace(rows)
            }
            Rows::Packed(p) => Block::Packed(&p[r0 / MR * kq * AW..][..kq * AW]),
        };
        for (panel, (c0, w, kc)) in bpack.chunks_exact(kq * PW).zip(panels(plan, NR)) {
            let mut s = 0;
            while s < k {
                // Chunks of the multiple of four, then the tail's own.
                let e = if s < kmain { (s + kc).min(kmain) } else { k };
                let (qs, qe) = (s / 4, e.div_ceil(4));
                let b = &panel[qs * PW..qe * PW];
                let at = (r0 * n + c0, n, w);
                let first = s == 0;
                macro_rules! run {
                    ($ng:literal) => {
                        match block {
                            Block::InPlace(rows) if s < kmain => {
                                add_block(&chunk_in_place::<$ng>(&rows, s, b), br, o, at, first)
                            }
                            Block::InPlace(_) => {
                                let mut rows: [&[f32]; MR] = [&[]; MR];
                                for (row, t) in rows.iter_mut().zip(&tails) {
                                    *row = t;
                                }
                                add_block(&chunk_in_place::<$ng>(&rows, 0, b), br, o, at, first)
                            }
                            Block::Packed(blk) => add_block(
                                &chunk::<$ng>(&blk[qs * AW..qe * AW], b),
                                br,
                                o,
                                at,
                                first,
                            ),
                        }
                    };
                }
                match w.div_ceil(4) {
                    1 => run!(1),
                    2 => run!(2),
                    3 => run!(3),
                    _ => run!(4),
                }
                s = e;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xla::dot_blocked::generic_for_tests;

    /// Values whose sums round differently in other orders, signed zeros,
    /// infinities and NaNs included.
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                match s >> 58 {
                    0 => -0.0,
                    1 => 0.0,
                    2 if s.is_multiple_of(5) => f32::NAN,
                    3 if s.is_multiple_of(7) => f32::INFINITY,
                    _ => ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 3.0,
                }
            })
            .collect()
    }

    #[test]
    fn same_bits_as_the_generic_kernel() {
        if !super::super::dot_avx512::available() {
            return;
        }
        // Tails of `k mod 4` terms, `k < 4`, partial groups and panels,
        // partial blocks of rows, several chunks and column tiles, and
        // products large enough to run on the pool.
        let shapes = [
            (1, 1, 1),
            (7, 3, 5),
            (13, 37, 130),
            (6, 5, 64),
            (31, 66, 40),
            (7, 130, 10),
            (128, 512, 10),
            (100, 300, 36),
            (521, 203, 37),
        ];
        for (m, k, n) in shapes {
            let (x, y) = (values(m * k, 3), values(k * n, 4));
            let kmain = (k / 4 * 4).max(4);
            // Whole and cut into chunks (shorter than `MIN_CHUNK` too: the
            // kernel is called directly).
            let plans = [
                DotPlan {
                    tile_k: 4,
                    tiles: vec![(0, n, kmain)],
                    chain: false,
                    signed_from: usize::MAX,
                },
                DotPlan {
                    tile_k: 4,
                    tiles: vec![(0, n / 3, 8), (n / 3, n, 12)],
                    chain: false,
                    signed_from: usize::MAX,
                },
                DotPlan {
                    tile_k: 4,
                    tiles: vec![(0, n / 2, 64), (n / 2, n, 128)],
                    chain: false,
                    signed_from: usize::MAX,
                },
            ];
            // A row-major and transposed; B row-major and transposed.
            let layouts = [((k, 1), (n, 1)), ((1, m), (n, 1)), ((k, 1), (1, k))];
            for plan in &plans {
                for (sa, sb) in layouts {
                    let args = (&x[..], sa, &y[..], sb, (m, k, n), plan);
                    let mut fast = vec![f32::NAN; m * n];
                    planned_t4(args, &mut fast, &mut Vec::new());
                    let mut generic = vec![0.0; m * n];
                    generic_for_tests(args, &mut generic);
                    // A NaN's sign and payload depend on which operand
                    // the CPU propagates, and so on the FMA form the
                    // compiler picked (`inf * 0` gives -NaN, `f32::NAN` is
                    // +NaN): NaNs compare as one value, all else by bits.
                    let bits = |v: &[f32]| {
                        v.iter()
                            .map(|f| if f.is_nan() { u32::MAX } else { f.to_bits() })
                            .collect::<Vec<_>>()
                    };
                    assert_eq!(
                        bits(&fast),
                        bits(&generic),
                        "{m}x{k}x{n} {sa:?} {sb:?} {plan:?}"
                    );
                }
            }
        }
    }
}
