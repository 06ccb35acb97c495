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
    __m512, __mmask16, _mm512_add_ps, _mm512_broadcast_f32x4, _mm512_fmadd_ps, _mm512_loadu_epi32,
    _mm512_maskz_loadu_ps, _mm512_permutex2var_ps, _mm512_permutexvar_ps, _mm512_setr_epi32,
    _mm512_setzero_ps, _mm512_shuffle_ps, _mm512_unpackhi_ps, _mm512_unpacklo_ps, _mm_loadu_ps,
};

use super::dot::DotPlan;
use super::dot_avx512::{add_partial, load, store, PanelRows};
use super::dot_blocked::Operands;
use super::dot_panels::{run_panels, PanelKernel};

/// Rows of A per block.
const MR: usize = 6;
/// Columns per panel: four groups of four.
const NR: usize = 16;
/// Floats per group of four terms of a packed panel: four column groups
/// of 16 lanes (a panel narrower than 16 columns is zero-padded).
const PW: usize = 64;

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
/// reused. Run by [`run_panels`]: B packed as the first block of rows of
/// a share reads it, blocks as high as their rows, as many rows per
/// thread (a pass packing B first was 7% of a `[128, 512] @ [512, 784]`
/// product, and blocks of six computed 132 rows for 128).
pub(crate) fn planned_t4(args: Operands<'_>, out: &mut [f32], packed: &mut Vec<f32>) {
    debug_assert!(fits(args.5) && out.len() == args.4 .0 * args.4 .2);
    // SAFETY: `runs` checked that the CPU supports AVX-512F and FMA, the
    // only requirement of `run_panels`.
    unsafe { run_panels::<T4>(args, out, packed) }
}

/// [`panel_t4`] as a kernel of [`run_panels`].
struct T4;

/// A slab's rows of A for [`panel_t4`]: rows `stride` apart from the
/// first, each at least `k` terms (A itself when its rows are contiguous,
/// else a copy of the rows).
#[derive(Clone, Copy)]
pub(crate) struct ARows<'a> {
    x: &'a [f32],
    stride: usize,
}

impl PanelKernel for T4 {
    const MR: usize = MR;
    const NR: usize = NR;
    // Reading B in place interleaves it (permutes), for every block.
    const IN_PLACE_AT_ONCE: bool = false;
    type Rows<'a> = ARows<'a>;

    fn panel_len(k: usize) -> usize {
        k.div_ceil(4) * PW
    }

    fn a_len(rows: usize, sa: (usize, usize), k: usize) -> usize {
        // A's rows are read in place when contiguous (packing them cost a
        // tenth of a `[2048, 512] @ [512, 36]` product).
        if sa.1 == 1 {
            0
        } else {
            rows * k
        }
    }

    fn pack_panel(y: &[f32], sb: (usize, usize), k: usize, cols: (usize, usize), dst: &mut [f32]) {
        pack_panel(y, sb, k, cols, dst);
    }

    fn reads_rows(sb: (usize, usize), _: usize, _: usize) -> bool {
        // Masked loads: panels of any width.
        sb.1 == 1
    }

    fn rows<'a>(
        x: &'a [f32],
        sa: (usize, usize),
        k: usize,
        (i0, rows): (usize, usize),
        scratch: &'a mut [f32],
    ) -> ARows<'a> {
        if sa.1 == 1 {
            return ARows {
                x: &x[i0 * sa.0..],
                stride: sa.0,
            };
        }
        let dst = &mut scratch[..rows * k];
        // Sixteen terms at a time, so that the reads of A stored
        // transposed stay in a few cache lines.
        for p0 in (0..k).step_by(16) {
            for (r, row) in dst.chunks_exact_mut(k).enumerate() {
                let i = i0 + r;
                for (p, v) in row.iter_mut().enumerate().take((p0 + 16).min(k)).skip(p0) {
                    *v = x[i * sa.0 + p * sa.1];
                }
            }
        }
        ARows { x: dst, stride: k }
    }

    unsafe fn panel(
        a: &ARows<'_>,
        b: PanelRows<'_>,
        kn: (usize, usize),
        cols: (usize, usize, usize),
        _chain: Option<usize>,
        rows: usize,
        o: &mut [f32],
    ) {
        // SAFETY: the caller's contract (AVX-512F and FMA).
        unsafe { panel_t4(*a, b, kn, cols, rows, o) }
    }
}

/// Packs columns `c0..c0 + w` (`w <= 16`) of B (`[k, n]` in `y`, strides
/// `sb`) into `dst`: per group of four terms `q`, 64 floats, lane
/// `16g + 4j + t` holding `b[4q + t][c0 + 4g + j]`, zeros past `k` and `w`.
/// (B with contiguous rows is packed by [`panel_t4`] as it reads it.)
fn pack_panel(y: &[f32], sb: (usize, usize), k: usize, (c0, w): (usize, usize), dst: &mut [f32]) {
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

/// Indices of the permutes that interleave four rows of B's panel (terms
/// `4q..4q + 4`, 16 columns each) into a packed group of four terms:
/// per column group `g`, lanes `2j, 2j + 1` hold rows `t`, `t + 1` at
/// column `4g + j` (from two rows; the upper lanes unused).
const PAIRS: [[i32; 16]; 4] = {
    let mut p = [[0; 16]; 4];
    let mut g = 0;
    while g < 4 {
        let mut l = 0;
        while l < 8 {
            p[g][l] = (4 * g + l / 2) as i32 + 16 * (l % 2) as i32;
            l += 1;
        }
        g += 1;
    }
    p
};

/// Lane `4j + t` of a packed group from two of [`PAIRS`]' pairs (rows
/// 0, 1 and rows 2, 3).
const ORDER: [i32; 16] = {
    let mut o = [0; 16];
    let mut e = 0;
    while e < 16 {
        let (j, t) = (e / 4, e % 4);
        o[e] = (2 * j + t % 2 + 16 * (t / 2)) as i32;
        e += 1;
    }
    o
};

/// Group `g` (columns `4g..4g + 4`, lane `4j + t`: row `t`, column `4g +
/// j`) of the four rows `r`: three two-source permutes. The indices are
/// loaded where used, not kept in registers across a panel (the kernels
/// that read B packed then spilled accumulators).
#[target_feature(enable = "avx512f")]
#[inline]
fn interleave(r: &[__m512; 4], g: usize) -> __m512 {
    // SAFETY: each index array is 16 i32s; the loads read exactly those
    // 64 bytes, unaligned reads allowed.
    let (pairs, order) = unsafe {
        (
            _mm512_loadu_epi32(PAIRS[g].as_ptr()),
            _mm512_loadu_epi32(ORDER.as_ptr()),
        )
    };
    let ab = _mm512_permutex2var_ps(r[0], pairs, r[1]);
    let cd = _mm512_permutex2var_ps(r[2], pairs, r[3]);
    _mm512_permutex2var_ps(ab, order, cd)
}

/// Where one block reads one chunk's groups of four terms of the panel.
enum Src<'a> {
    /// Packed, `PW` floats per group.
    Packed(&'a [f32]),
    /// B's rows (`stride` apart, from the chunk's first term and the
    /// panel's first column, the first lanes of `mask`), interleaved as
    /// read.
    Rows(&'a [f32], usize, __mmask16),
    /// As [`Src::Rows`], each group also stored into the packed panel.
    Pack(&'a [f32], usize, __mmask16, &'a mut [f32]),
}

/// [`chunk`]'s ways of reading B: [`Src::Packed`], [`Src::Rows`],
/// [`Src::Pack`].
const PACKED: u8 = 0;
const ROWS: u8 = 1;
const PACK: u8 = 2;

/// How many groups of four terms ahead [`chunk`] fetches B's rows when
/// it reads B itself: its rows lie a row of B apart, in the shared cache
/// or in memory (as `dot_avx512`'s packing, 16 terms).
const PREFETCH: usize = 8;

/// The first `NG` column groups of group of terms `q` of the panel, from
/// `b` as `SRC` says (rows `stride` apart, `mask`'s columns, see
/// [`Src`]); with `PACK`, all four groups stored into `dst` too.
#[target_feature(enable = "avx512f")]
#[inline]
fn group_vectors<const NG: usize, const SRC: u8>(
    b: &[f32],
    (stride, mask): (usize, __mmask16),
    dst: &mut [f32],
    q: usize,
) -> [__m512; NG] {
    let mut bv = [_mm512_setzero_ps(); NG];
    if SRC == PACKED {
        for (g, v) in bv.iter_mut().enumerate() {
            *v = load(b, q * PW + g * 16);
        }
        return bv;
    }
    let w = mask.count_ones() as usize;
    let r: [__m512; 4] = std::array::from_fn(|t| {
        let src = &b[(4 * q + t) * stride..(4 * q + t) * stride + w];
        // SAFETY: the mask selects the first `w` lanes, exactly the
        // elements of `src` (bounds checked above); masked-off lanes are
        // not read (and are zero).
        unsafe { _mm512_maskz_loadu_ps(mask, src.as_ptr()) }
    });
    if SRC == PACK {
        let d: &mut [f32; PW] = (&mut dst[q * PW..q * PW + PW]).try_into().expect("PW");
        for g in 0..4 {
            let x = interleave(&r, g);
            store(d, g * 16, x);
            if let Some(used) = bv.get_mut(g) {
                *used = x;
            }
        }
    } else {
        for (g, v) in bv.iter_mut().enumerate() {
            *v = interleave(&r, g);
        }
    }
    bv
}

/// Asks for group of terms `q`'s four rows of B (`stride` apart, 16
/// columns: two cache lines where B is not aligned to them) to be brought
/// into the cache.
/// (Always inlined: called, it spilled the kernel's accumulators.)
#[inline(always)]
fn prefetch_group(b: &[f32], stride: usize, q: usize) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    for t in 0..4 {
        let at = (4 * q + t) * stride;
        if let Some(x) = b.get(at) {
            // SAFETY: a prefetch only hints at an address (of `b`).
            unsafe { _mm_prefetch::<_MM_HINT_T0>((x as *const f32).cast()) };
        }
        if let Some(x) = b.get(at + 15) {
            // SAFETY: as above.
            unsafe { _mm_prefetch::<_MM_HINT_T0>((x as *const f32).cast()) };
        }
    }
}

/// One chunk of `nq` groups of four terms for one block of `R` rows
/// (`rows[r]`: row `r`'s terms of the chunk, `4 nq` of them) and `NG`
/// groups of four columns of the panel (from `b` as `SRC` says, see
/// [`group_vectors`]). Lane `4j + t` of `acc[r][g]`: partial sum `t` of
/// row `r`, column `4g + j`.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,fma")]
#[inline]
fn chunk<const R: usize, const NG: usize, const SRC: u8>(
    rows: &[&[f32]; MR],
    nq: usize,
    b: &[f32],
    sm: (usize, __mmask16),
    dst: &mut [f32],
) -> [[__m512; NG]; R] {
    // Plain loops (`array::map` was a call of its own per chunk).
    let mut cut: [&[f32]; R] = [&[]; R];
    for (c, r) in cut.iter_mut().zip(rows) {
        *c = &r[..nq * 4];
    }
    let mut acc = [[_mm512_setzero_ps(); NG]; R];
    for q in 0..nq {
        if SRC != PACKED && q + PREFETCH < nq {
            prefetch_group(b, sm.0, q + PREFETCH);
        }
        let bv = group_vectors::<NG, SRC>(b, sm, dst, q);
        for (accr, row) in acc.iter_mut().zip(&cut) {
            let at: &[f32; 4] = row[q * 4..q * 4 + 4].try_into().expect("4 terms");
            let av = broadcast4(at);
            for (x, &bx) in accr.iter_mut().zip(&bv) {
                *x = _mm512_fmadd_ps(av, bx, *x);
            }
        }
    }
    acc
}

/// One chunk (`nq` groups of four terms) for one block of `R` rows and
/// `NG` column groups, its sums stored into the block's outputs (`o`, at
/// `at`: first output, row length, columns) when `first`, else added to
/// them.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,fma")]
#[inline]
fn block<const R: usize, const NG: usize>(
    rows: &[&[f32]; MR],
    nq: usize,
    src: Src<'_>,
    o: &mut [f32],
    at: (usize, usize, usize),
    first: bool,
) {
    // One call of each kernel: each is then inlined here.
    let acc = match src {
        Src::Packed(b) => chunk::<R, NG, PACKED>(rows, nq, b, (PW, 0), &mut []),
        Src::Rows(b, stride, mask) => chunk::<R, NG, ROWS>(rows, nq, b, (stride, mask), &mut []),
        Src::Pack(b, stride, mask, dst) => chunk::<R, NG, PACK>(rows, nq, b, (stride, mask), dst),
    };
    add_block(&acc, o, at, first);
}

/// One panel: columns `c0..c0 + w` (`w <= 16`, chunks of `kc` terms) of
/// the `rows` rows of `a` into `o` (row-major, `n` wide), B's rows of them
/// from `b`. Chunk by chunk, each over all the blocks of rows (the chunk's
/// groups of the panel stay in cache for every block); each block runs on
/// a kernel of its own height (1 to 6 rows) and of the panel's width in
/// groups of four columns. The tail chunk's group of `k mod 4` terms is
/// made whole with zeros, for A and B alike.
///
/// # Safety
///
/// The CPU must support AVX-512F and FMA.
#[target_feature(enable = "avx512f,fma")]
pub(crate) unsafe fn panel_t4(
    a: ARows<'_>,
    mut b: PanelRows<'_>,
    (k, n): (usize, usize),
    (c0, w, kc): (usize, usize, usize),
    rows: usize,
    o: &mut [f32],
) {
    debug_assert!(w <= NR && kc % 4 == 0);
    let kmain = k / 4 * 4;
    let ng = w.div_ceil(4);
    let mask = ((1u32 << w) - 1) as __mmask16;
    let mut s = 0;
    while s < k {
        // Chunks of the multiple of four, then the tail's own.
        let e = if s < kmain { (s + kc).min(kmain) } else { k };
        let (qs, qe) = (s / 4, e.div_ceil(4));
        let first = s == 0;
        let tail = s >= kmain;
        // The tail's group of B (one group of four terms), packed.
        let mut tail_b = [0.0f32; PW];
        if tail {
            match &mut b {
                PanelRows::Packed(p) => tail_b.copy_from_slice(&p[qs * PW..qe * PW]),
                PanelRows::InPlace(y, stride) | PanelRows::Packing(y, stride, _) => {
                    for (p, t) in (kmain..k).zip(0..) {
                        for (j, &v) in y[p * *stride..p * *stride + w].iter().enumerate() {
                            tail_b[16 * (j / 4) + 4 * (j % 4) + t] = v;
                        }
                    }
                }
            }
            if let PanelRows::Packing(_, _, dst) = &mut b {
                dst[qs * PW..qe * PW].copy_from_slice(&tail_b);
            }
        }
        for r0 in (0..rows).step_by(MR) {
            let br = MR.min(rows - r0);
            // The block's rows of the chunk (past the last row, empty:
            // never read), the tail's zero-padded.
            let mut tails = [[0.0f32; 4]; MR];
            let row = |r: usize| &a.x[(r0 + r) * a.stride..][..k];
            if tail {
                for (r, t) in tails.iter_mut().enumerate().take(br) {
                    t[..k - kmain].copy_from_slice(&row(r)[kmain..]);
                }
            }
            let mut cut: [&[f32]; MR] = [&[]; MR];
            for (r, c) in cut.iter_mut().enumerate().take(br) {
                *c = if tail { &tails[r] } else { &row(r)[s..e] };
            }
            let src = match &mut b {
                _ if tail => Src::Packed(&tail_b),
                PanelRows::Packed(p) => Src::Packed(&p[qs * PW..qe * PW]),
                PanelRows::InPlace(y, stride) => Src::Rows(&y[s * *stride..], *stride, mask),
                PanelRows::Packing(y, stride, dst) if r0 == 0 => {
                    Src::Pack(&y[s * *stride..], *stride, mask, &mut dst[qs * PW..qe * PW])
                }
                PanelRows::Packing(_, _, dst) => Src::Packed(&dst[qs * PW..qe * PW]),
            };
            let at = (r0 * n + c0, n, w);
            let nq = qe - qs;
            macro_rules! shapes {
                ($(($r:literal, $g:literal)),*) => {
                    match (br, ng) {
                        $(($r, $g) => block::<$r, $g>(&cut, nq, src, o, at, first),)*
                        _ => unreachable!("blocks of 1 to {MR} rows, 1 to 4 groups"),
                    }
                };
            }
            shapes!(
                (6, 4),
                (5, 4),
                (4, 4),
                (3, 4),
                (2, 4),
                (1, 4),
                (6, 3),
                (5, 3),
                (4, 3),
                (3, 3),
                (2, 3),
                (1, 3),
                (6, 2),
                (5, 2),
                (4, 2),
                (3, 2),
                (2, 2),
                (1, 2),
                (6, 1),
                (5, 1),
                (4, 1),
                (3, 1),
                (2, 1),
                (1, 1)
            );
        }
        s = e;
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

/// A chunk's sums for the `R` rows of a block into the output (`o`, `n`
/// wide, the block's first output at `start`, `w` columns): stored by the
/// first chunk, added to the output so far by the others.
#[target_feature(enable = "avx512f")]
#[inline]
fn add_block<const R: usize, const NG: usize>(
    acc: &[[__m512; NG]; R],
    o: &mut [f32],
    (start, n, w): (usize, usize, usize),
    first: bool,
) {
    for (r, accr) in acc.iter().enumerate() {
        let mut groups = [_mm512_setzero_ps(); 4];
        groups[..NG].copy_from_slice(accr);
        let sums = column_sums(groups);
        let dst = &mut o[start + r * n..start + r * n + w.min(16)];
        add_partial(dst, sums, first);
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
            // On the pool, shares of 64 rows (last blocks of four), of 66
            // and 65 (five); on one thread, last blocks of three and two.
            (128, 200, 100),
            (131, 150, 120),
            (9, 40, 33),
            (2, 17, 5),
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

    /// One panel of every width from one column to sixteen, blocks of one
    /// to six rows, chunked or not, with and without a tail of `k mod 4`
    /// terms: B read packed, in place, and packed as read give the bits of
    /// the generic kernel, and the copy packed as read equals B packed
    /// first.
    #[test]
    fn panels_read_packed_in_place_and_packing_agree() {
        if !super::super::dot_avx512::available() {
            return;
        }
        for (rows, k, w, kc) in [
            (1, 16, 16, 16),
            (5, 37, 13, 16),
            (13, 64, 1, 32),
            (8, 70, 7, 20),
            (6, 3, 16, 4),
            (11, 130, 16, 64),
            (4, 41, 10, 41 / 4 * 4),
        ] {
            let (x, y) = (values(rows * k, 5), values(k * w, 6));
            let plan = DotPlan {
                tile_k: 4,
                tiles: vec![(0, w, kc)],
                chain: false,
                signed_from: usize::MAX,
            };
            let args = (&x[..], (k, 1), &y[..], (w, 1), (rows, k, w), &plan);
            let mut want = vec![0.0; rows * w];
            generic_for_tests(args, &mut want);
            let len = T4::panel_len(k);
            let mut first = vec![f32::NAN; len];
            pack_panel(&y, (w, 1), k, (0, w), &mut first);
            let mut as_read = vec![f32::NAN; len];
            let a = ARows { x: &x, stride: k };
            let run = |b: PanelRows<'_>| {
                let mut o = vec![f32::NAN; rows * w];
                // SAFETY: AVX-512F and FMA checked above.
                unsafe { panel_t4(a, b, (k, w), (0, w, kc), rows, &mut o) };
                o
            };
            let got = [
                run(PanelRows::Packed(&first)),
                run(PanelRows::InPlace(&y, w)),
                run(PanelRows::Packing(&y, w, &mut as_read)),
            ];
            let bits = |v: &[f32]| {
                v.iter()
                    .map(|f| if f.is_nan() { u32::MAX } else { f.to_bits() })
                    .collect::<Vec<_>>()
            };
            for (i, g) in got.iter().enumerate() {
                assert_eq!(bits(g), bits(&want), "{rows}x{k}x{w} chunks {kc}, way {i}");
            }
            assert_eq!(
                bits(&as_read),
                bits(&first),
                "{rows}x{k}x{w} packed as read"
            );
        }
    }
}
