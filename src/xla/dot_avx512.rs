//! The blocked kernel of [`super::dot_blocked`] for plans with one partial
//! sum per output (`tile_k = 1`) and 64-column panels, written with AVX-512
//! intrinsics: six rows of A at a time (24 accumulator registers; the
//! auto-vectorized kernel spills beyond four), each output's chain of FMAs
//! in the plan's order, so the same bits as the generic kernel.

use std::arch::x86_64::{
    __m512, _mm512_add_ps, _mm512_fmadd_ps, _mm512_loadu_ps, _mm512_mask_storeu_ps,
    _mm512_maskz_loadu_ps, _mm512_mul_ps, _mm512_set1_ps, _mm512_setzero_ps, _mm512_storeu_ps,
};

use super::dot::{chain_start, DotPlan};
use super::dot_blocked::panels;

/// Rows of A per block.
pub(crate) const MR: usize = 6;
/// Rows of A per block for one partial sum per output and panels of at
/// most three vectors (24 accumulators, as six rows of four vectors), where
/// they pad the rows no more than blocks of [`MR`]: fewer loads per FMA,
/// one block for products of eight rows. Measured, best of many calls:
/// `[8, 1024] @ [1024, 48]` 6.8 -> 3.9 us (gemm 3.6), `[16, 1024] @ [1024,
/// 32]` 7.8 -> 5.5 us, `[32, 512] @ [512, 48]` 8.8 -> 7.5 us.
pub(crate) const MR_NARROW: usize = 8;
/// Columns per panel (four vectors of 16 lanes).
pub(crate) const NR: usize = 64;

/// Whether this CPU runs [`rows_t1`].
pub(crate) fn available() -> bool {
    std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("fma")
}

/// Loads 16 lanes from `s[i..i + 16]` (the AVX-512 kernels' one load).
#[target_feature(enable = "avx512f")]
#[inline]
pub(crate) fn load(s: &[f32], i: usize) -> __m512 {
    let v = &s[i..i + 16];
    // SAFETY: `v` is 16 initialized f32s (the slice above is bounds
    // checked); `_mm512_loadu_ps` reads exactly those 64 bytes, unaligned
    // reads allowed.
    unsafe { _mm512_loadu_ps(v.as_ptr()) }
}

/// Stores 16 lanes into `s[i..i + 16]`.
#[target_feature(enable = "avx512f")]
#[inline]
pub(crate) fn store(s: &mut [f32], i: usize, x: __m512) {
    let v = &mut s[i..i + 16];
    // SAFETY: `v` is 16 f32s we may write (bounds checked above);
    // `_mm512_storeu_ps` writes exactly those 64 bytes, unaligned allowed.
    unsafe { _mm512_storeu_ps(v.as_mut_ptr(), x) }
}

/// The values of `s` (at most 16) in the first lanes, zeros past them.
#[target_feature(enable = "avx512f")]
#[inline]
fn load_partial(s: &[f32]) -> __m512 {
    let s = &s[..s.len().min(16)];
    let mask = ((1u32 << s.len()) - 1) as u16;
    // SAFETY: the mask selects the first `s.len()` lanes, exactly the
    // elements of `s`; masked-off lanes are not read.
    unsafe { _mm512_maskz_loadu_ps(mask, s.as_ptr()) }
}

/// The first `dst.len()` lanes of `x` (at most 16) stored into `dst` when
/// `first`, else added to its values.
#[target_feature(enable = "avx512f")]
#[inline]
pub(crate) fn add_partial(dst: &mut [f32], x: __m512, first: bool) {
    let n = dst.len().min(16);
    let dst = &mut dst[..n];
    let mask = ((1u32 << n) - 1) as u16;
    // SAFETY: the mask selects the first `n` lanes, exactly the elements
    // of `dst`; masked-off lanes are neither read nor written.
    unsafe {
        let x = if first {
            x
        } else {
            _mm512_add_ps(x, _mm512_maskz_loadu_ps(mask, dst.as_ptr()))
        };
        _mm512_mask_storeu_ps(dst.as_mut_ptr(), mask, x);
    }
}

/// The lanes of `x`.
#[target_feature(enable = "avx512f")]
#[inline]
fn lanes(x: __m512) -> [f32; 16] {
    let mut out = [0.0f32; 16];
    store(&mut out, 0, x);
    out
}

/// Where a block's sums start.
#[derive(Clone, Copy)]
enum Start<'a> {
    /// From `+0`.
    Zero,
    /// A chain: the first term a plain product added to these starts
    /// (XLA's own emitter; the panel's first vectors of them).
    Chain(&'a [__m512; 4]),
    /// A chain continued: from the block's outputs, the sums of its
    /// earlier terms.
    Continue,
}

/// Where [`rows_t1`] reads B's panels of [`NR`] columns.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Panels<'a> {
    /// Packed one after another, each `[k][NR]`.
    Packed(&'a [f32]),
    /// B itself, row-major `[k, n]` (every panel of the plan whole):
    /// products with few rows use each value of B once or twice, so
    /// packing it cost more than reading it in place.
    InPlace(&'a [f32]),
}

/// Where [`panel_t1`] reads its panel's rows of B (term `t`'s [`NR`]
/// values).
#[derive(Debug)]
pub(crate) enum PanelRows<'a> {
    /// Packed, `[k][NR]`.
    Packed(&'a [f32]),
    /// In B itself, row-major with rows `stride` apart, from the panel's
    /// first column (the panel whole).
    InPlace(&'a [f32], usize),
    /// In B itself, as [`PanelRows::InPlace`], packed into the buffer
    /// (`[k][NR]`) by the first block of rows as it reads them: the other
    /// blocks then read the packed copy. A separate pass packing the panel
    /// first waited on memory without computing (a tenth of a `[128, 512]
    /// @ [512, 512]` product); this way the copy costs one store per vector
    /// of B in a loop that is bound by its multiply-adds.
    Packing(&'a [f32], usize, &'a mut [f32]),
}

/// Where one block reads one chunk's rows of the panel.
enum Src<'a> {
    /// Rows `stride` apart (`NR`: packed).
    Rows(&'a [f32], usize),
    /// Rows `stride` apart in B, copied into the packed buffer as read.
    Pack(&'a [f32], usize, &'a mut [f32]),
}

/// What [`rows_t1`] does with a plan's first chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum First {
    /// Sums from `+0` (or the chain's starts), stored: the plan run whole.
    Store,
    /// Sums from the output's values, stored: terms that continue chains
    /// whose sums so far are in `o` (a chain cut into pieces, see
    /// `dot_blocked::run_long_chain`; `plan` has one chunk per panel), so
    /// the sums are those of the whole chain, bit for bit (an `f32` stored
    /// and loaded again is the same `f32`).
    Continue,
    /// Sums from `+0`, added to the output: whole chunks that follow
    /// chunks whose sums are already in `o` (a chunked plan cut into
    /// pieces of whole chunks), added as every later chunk is, so the bits
    /// are those of the plan run whole.
    Add,
}

/// The `rows` rows of the product in `o` (row-major, `n` wide), from A's
/// packed blocks of [`MR`] rows (`apack`) and B's panels of [`NR`]
/// columns (`b`), for a plan with `tile_k == 1`: what
/// `dot_blocked::rows_body::<1, MR, 4>` computes, in the same order, its
/// first chunk as `mode` says.
///
/// # Safety
///
/// The CPU must support AVX-512F and FMA ([`available`]).
#[target_feature(enable = "avx512f,fma")]
pub(crate) unsafe fn rows_t1(
    apack: &[f32],
    b: Panels<'_>,
    (k, n): (usize, usize),
    plan: &DotPlan,
    rows: usize,
    o: &mut [f32],
    mode: First,
) {
    debug_assert_eq!(plan.tile_k, 1);
    let chain = plan.chain.then_some(plan.signed_from);
    for (i, cols) in panels(plan, NR).enumerate() {
        let rows_of_b = match b {
            Panels::Packed(packed) => PanelRows::Packed(&packed[i * k * NR..(i + 1) * k * NR]),
            Panels::InPlace(y) => PanelRows::InPlace(&y[cols.0..], n),
        };
        // SAFETY: the caller's contract (AVX-512F and FMA).
        unsafe { panel_t1(apack, rows_of_b, (k, n), cols, chain, rows, o, mode) };
    }
}

/// One panel of [`rows_t1`]: columns `c0..c0 + w` (chunks of `kc`
/// terms) of the `rows` rows in `o`, B's rows of them from `b`; `chain`:
/// the plan is a chain, signed from that column on. Each block of rows
/// runs on a kernel of its own height and of the panel's width in
/// vectors, so that neither the padded rows of a last partial block nor
/// the padded columns of a narrow last panel are computed (`[128, 512] @
/// [512, 784]` computed 132 rows of 832 columns).
///
/// # Safety
///
/// The CPU must support AVX-512F and FMA ([`available`]).
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,fma")]
pub(crate) unsafe fn panel_t1(
    apack: &[f32],
    mut b: PanelRows<'_>,
    (k, n): (usize, usize),
    (c0, w, kc): (usize, usize, usize),
    chain: Option<usize>,
    rows: usize,
    o: &mut [f32],
    mode: First,
) {
    debug_assert!(mode != First::Add || chain.is_none());
    debug_assert!(mode != First::Continue || (chain.is_none() && kc >= k));
    debug_assert!(matches!(b, PanelRows::Packed(_)) || w == NR);
    let starts = chain.map(|from| {
        let mut s = [[0.0f32; 16]; 4];
        for (v, sv) in s.iter_mut().enumerate() {
            for (l, x) in sv.iter_mut().enumerate() {
                *x = chain_start(c0 + v * 16 + l, from);
            }
        }
        [
            load(&s[0], 0),
            load(&s[1], 0),
            load(&s[2], 0),
            load(&s[3], 0),
        ]
    });
    let nv = w.div_ceil(16);
    // Chunk by chunk, each over all the blocks: the chunk's rows of the
    // panel stay in cache for every block (block by block, each block
    // streamed the whole panel, 1 MB for 4096 terms, from memory). Each
    // output still takes its chunks in order.
    let mut s = 0;
    while s < k {
        let e = (s + kc).min(k);
        let first = s == 0;
        for (blk, a) in apack.chunks_exact(k * MR).enumerate() {
            let r0 = blk * MR;
            let br = MR.min(rows - r0);
            let start = match (&starts, first) {
                (Some(starts), true) => Start::Chain(starts),
                (None, true) if mode == First::Continue => Start::Continue,
                _ => Start::Zero,
            };
            let src = match &mut b {
                PanelRows::Packed(p) => Src::Rows(&p[s * NR..e * NR], NR),
                PanelRows::InPlace(y, stride) => Src::Rows(&y[s * *stride..], *stride),
                PanelRows::Packing(y, stride, dst) if blk == 0 => {
                    Src::Pack(&y[s * *stride..], *stride, &mut dst[s * NR..e * NR])
                }
                PanelRows::Packing(_, _, dst) => Src::Rows(&dst[s * NR..e * NR], NR),
            };
            let at = (r0 * n + c0, n, w);
            let a = &a[s * MR..e * MR];
            let store = first && mode != First::Add;
            macro_rules! shapes {
                ($(($r:literal, $v:literal)),*) => {
                    match (br, nv) {
                        $(($r, $v) => block::<$r, $v>(a, src, e - s, start, o, at, store),)*
                        _ => unreachable!("blocks of 1 to {MR} rows, 1 to 4 vectors"),
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

/// One chunk of `len` terms for one block of `R` rows (`a`: the block's
/// packed rows, `[len][MR]`) and `NV` vectors of the panel (its rows
/// from `src`), its sums from `start`, stored into the block's outputs
/// (`o`, at `at`: first output, row length, columns) when `store`, else
/// added to them.
#[target_feature(enable = "avx512f,fma")]
#[inline]
fn block<const R: usize, const NV: usize>(
    a: &[f32],
    src: Src<'_>,
    len: usize,
    start: Start<'_>,
    o: &mut [f32],
    at: (usize, usize, usize),
    store: bool,
) {
    let (mut acc, chain) = match start {
        Start::Zero => ([[_mm512_setzero_ps(); NV]; R], None),
        Start::Chain(starts) => ([[_mm512_setzero_ps(); NV]; R], Some(starts)),
        Start::Continue => (load_block::<R, NV>(o, at), None),
    };
    // One call of each kernel: each is then inlined here (called from two
    // places, the kernel was a call of its own, which cost a product of
    // 128 terms 3% more).
    match src {
        Src::Rows(b, stride) => {
            chunk_rows::<R, NV, false>(a, len, &mut acc, chain, b, stride, &mut []);
        }
        Src::Pack(b, stride, dst) => {
            chunk_rows::<R, NV, true>(a, len, &mut acc, chain, b, stride, dst);
        }
    }
    add_block(&acc, R, o, at, store);
}

/// Adds one chunk of `len` terms for `R` rows (`a`, `[len][MR]`) and
/// `NV` vectors to the sums in `sums` (or, with `chain`, the first term
/// a plain product added to these starts): term `t`'s row of the panel is
/// `b[t * stride..][..NR]`; with `PACK`, each row is also stored into
/// `dst[t * NR..][..NR]` (all four vectors, whatever `NV`).
///
/// The sums are taken into a local copy and written back once: summed
/// in `sums` itself (or in a returned array, which is the caller's
/// memory), every term stored all of them to memory, as a bounds check's
/// panic could observe them (2.5 times slower where not inlined).
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,fma")]
#[inline]
fn chunk_rows<const R: usize, const NV: usize, const PACK: bool>(
    a: &[f32],
    len: usize,
    sums: &mut [[__m512; NV]; R],
    chain: Option<&[__m512; 4]>,
    b: &[f32],
    stride: usize,
    dst: &mut [f32],
) {
    let mut acc = *sums;
    let a = &a[..len * MR];
    let at = |t: usize| -> &[f32; MR] { a[t * MR..t * MR + MR].try_into().expect("MR") };
    let mut t0 = 0;
    if let (Some(starts), true) = (chain, len > 0) {
        let (at, bv) = (at(0), row_vectors::<NV, PACK>(b, stride, dst, 0));
        for (r, acc) in acc.iter_mut().enumerate() {
            let av = _mm512_set1_ps(at[r]);
            for v in 0..NV {
                acc[v] = _mm512_add_ps(_mm512_mul_ps(av, bv[v]), starts[v]);
            }
        }
        t0 = 1;
    }
    for t in t0..len {
        if PACK && t + PREFETCH < len {
            prefetch_row(b, (t + PREFETCH) * stride);
            prefetch_row(dst, (t + PREFETCH) * NR);
        }
        let (at, bv) = (at(t), row_vectors::<NV, PACK>(b, stride, dst, t));
        for (r, acc) in acc.iter_mut().enumerate() {
            let av = _mm512_set1_ps(at[r]);
            for v in 0..NV {
                acc[v] = _mm512_fmadd_ps(av, bv[v], acc[v]);
            }
        }
    }
    *sums = acc;
}

/// How many terms ahead [`chunk_rows`] fetches B's rows while packing
/// them: B's rows lie a row of B apart, in the shared cache or in memory,
/// and the few terms of multiply-adds in flight did not cover their
/// latency.
const PREFETCH: usize = 16;

/// Asks for the [`NR`] values of `b` from `i` on (four cache lines) to be
/// brought into the cache.
#[target_feature(enable = "avx512f")]
#[inline]
fn prefetch_row(b: &[f32], i: usize) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    let row = &b[i..i + NR];
    for v in 0..4 {
        _mm_prefetch::<_MM_HINT_T0>(row[v * 16..].as_ptr().cast());
    }
}

/// The first `NV` vectors of term `t`'s row of the panel
/// (`b[t * stride..][..NR]`), the whole row stored into `dst[t * NR..]`
/// too with `PACK`.
#[target_feature(enable = "avx512f")]
#[inline]
fn row_vectors<const NV: usize, const PACK: bool>(
    b: &[f32],
    stride: usize,
    dst: &mut [f32],
    t: usize,
) -> [__m512; NV] {
    let bt: &[f32; NR] = b[t * stride..t * stride + NR].try_into().expect("NR");
    let mut bv = [_mm512_setzero_ps(); NV];
    if PACK {
        let d: &mut [f32; NR] = (&mut dst[t * NR..t * NR + NR]).try_into().expect("NR");
        for v in 0..4 {
            let x = load(bt, v * 16);
            store(d, v * 16, x);
            if let Some(used) = bv.get_mut(v) {
                *used = x;
            }
        }
    } else {
        for (v, x) in bv.iter_mut().enumerate() {
            *x = load(bt, v * 16);
        }
    }
    bv
}

/// The `R` rows of a block's outputs (`o`, `n` wide, the block's first
/// output at `start`, `w` columns of the panel's `NV * 16`), as a block
/// of sums; lanes past them are zeros (never stored).
#[target_feature(enable = "avx512f")]
#[inline]
fn load_block<const R: usize, const NV: usize>(
    o: &[f32],
    (start, n, w): (usize, usize, usize),
) -> [[__m512; NV]; R] {
    let mut out = [[_mm512_setzero_ps(); NV]; R];
    for (r, outr) in out.iter_mut().enumerate() {
        let row = &o[start + r * n..start + r * n + w];
        for (v, x) in outr.iter_mut().enumerate() {
            let lo = (v * 16).min(w);
            *x = load_partial(&row[lo..(lo + 16).min(w)]);
        }
    }
    out
}

/// A chunk's sums for the first `rows` rows of a block into the output
/// (`o`, `n` wide, the block's first output at `start`, `w` columns of the
/// panel's `NV * 16`): stored by the first chunk, added to the output so
/// far by the others.
#[target_feature(enable = "avx512f")]
#[inline]
pub(crate) fn add_block<const R: usize, const NV: usize>(
    acc: &[[__m512; NV]; R],
    rows: usize,
    o: &mut [f32],
    (start, n, w): (usize, usize, usize),
    first: bool,
) {
    if w != NV * 16 {
        return add_partial_block(acc, rows, o, (start, n, w), first);
    }
    for (r, accr) in acc.iter().enumerate().take(rows) {
        let row = start + r * n;
        for (v, &x) in accr.iter().enumerate() {
            let i = row + v * 16;
            let x = if first {
                x
            } else {
                _mm512_add_ps(load(o, i), x)
            };
            store(o, i, x);
        }
    }
}

/// [`add_block`] for a panel narrower than its vectors: lane by lane
/// (out of line, so that the full blocks' stores inline into the kernel).
#[target_feature(enable = "avx512f")]
#[cold]
#[inline(never)]
fn add_partial_block<const R: usize, const NV: usize>(
    acc: &[[__m512; NV]; R],
    rows: usize,
    o: &mut [f32],
    (start, n, w): (usize, usize, usize),
    first: bool,
) {
    for (r, accr) in acc.iter().enumerate().take(rows) {
        let row = start + r * n;
        let mut vals = [[0.0f32; 16]; NV];
        for (vv, &x) in vals.iter_mut().zip(accr) {
            *vv = lanes(x);
        }
        for (j, oj) in o[row..row + w].iter_mut().enumerate() {
            let x = vals[j / 16][j % 16];
            *oj = if first { x } else { x + *oj };
        }
    }
}

/// One chunk of `len` terms for one block with `T` partial sums per
/// output (`tile_k`), panels of `NV` vectors: term `t` goes to partial sum
/// `t % T` (for the tail, `len < T`, term `t` to partial sum `t`), reduced
/// as YNNPACK reduces them. What `dot_blocked::kernel_call::<T, R, NV>`
/// computes, in registers.
#[target_feature(enable = "avx512f,fma")]
#[inline]
fn chunk_tk<const T: usize, const R: usize, const NV: usize>(
    a: &[f32],
    b: &[f32],
    len: usize,
    chain: Option<&[__m512; NV]>,
) -> [[__m512; NV]; R] {
    let nr = NV * 16;
    let (mut a, mut b, mut len) = (&a[..len * R], &b[..len * nr], len);
    let mut acc = [[[_mm512_setzero_ps(); NV]; R]; T];
    if let (Some(starts), true) = (chain, len > 0) {
        // A chain (`T == 1`): the first term a plain product added to the
        // column's start.
        let at: &[f32; R] = a[..R].try_into().expect("R values");
        for (r, accr) in acc[0].iter_mut().enumerate() {
            let av = _mm512_set1_ps(at[r]);
            for (v, x) in accr.iter_mut().enumerate() {
                *x = _mm512_add_ps(_mm512_mul_ps(av, load(b, v * 16)), starts[v]);
            }
        }
        (a, b, len) = (&a[R..], &b[nr..], len - 1);
    }
    let full = len / T * T;
    let groups = b[..full * nr]
        .chunks_exact(T * nr)
        .zip(a[..full * R].chunks_exact(T * R));
    for (bg, ag) in groups {
        for (q, (bt, at)) in bg.chunks_exact(nr).zip(ag.chunks_exact(R)).enumerate() {
            terms(&mut acc[q], bt, at);
        }
    }
    let tail = b[full * nr..]
        .chunks_exact(nr)
        .zip(a[full * R..].chunks_exact(R));
    for (q, (bt, at)) in tail.enumerate() {
        terms(&mut acc[q], bt, at);
    }
    reduce_partials(&acc)
}

/// A block's `T` partial sums per output reduced as YNNPACK reduces them:
/// `T = 2` as `p0 + p1`, `T = 4` as `(p0 + p1) + (p2 + p3)`.
#[target_feature(enable = "avx512f")]
#[inline]
pub(crate) fn reduce_partials<const T: usize, const R: usize, const NV: usize>(
    acc: &[[[__m512; NV]; R]; T],
) -> [[__m512; NV]; R] {
    let mut out = acc[0];
    for (r, row) in out.iter_mut().enumerate() {
        for (v, x) in row.iter_mut().enumerate() {
            *x = match T {
                1 => acc[0][r][v],
                2 => _mm512_add_ps(acc[0][r][v], acc[1 % T][r][v]),
                _ => _mm512_add_ps(
                    _mm512_add_ps(acc[0][r][v], acc[1 % T][r][v]),
                    _mm512_add_ps(acc[2 % T][r][v], acc[3 % T][r][v]),
                ),
            };
        }
    }
    out
}

/// One term for a block: `acc[r][v] += a[r] * b[v]` (fused), for the
/// term's `NV` vectors of B (`bt`) and `R` values of A (`at`).
#[target_feature(enable = "avx512f,fma")]
#[inline]
fn terms<const R: usize, const NV: usize>(acc: &mut [[__m512; NV]; R], bt: &[f32], at: &[f32]) {
    let at: &[f32; R] = at.try_into().expect("R values");
    let mut bv = [_mm512_setzero_ps(); NV];
    for (x, c) in bv.iter_mut().zip(bt.chunks_exact(16)) {
        *x = load(c, 0);
    }
    for (r, accr) in acc.iter_mut().enumerate() {
        let av = _mm512_set1_ps(at[r]);
        for (x, &bx) in accr.iter_mut().zip(&bv) {
            *x = _mm512_fmadd_ps(av, bx, *x);
        }
    }
}

/// The `rows` rows of the product in `o` (row-major, `n` wide), from A's
/// packed blocks of `R` rows and B's packed panels of `NV` vectors, for
/// a plan with `tile_k == T` (a chain has `T == 1`): what
/// `dot_blocked::rows_body::<T, R, NV>` computes, in the same order.
///
/// # Safety
///
/// The CPU must support AVX-512F and FMA ([`available`]).
#[target_feature(enable = "avx512f,fma")]
pub(crate) unsafe fn rows_tk<const T: usize, const R: usize, const NV: usize>(
    apack: &[f32],
    packed: &[f32],
    (k, n): (usize, usize),
    plan: &DotPlan,
    rows: usize,
    o: &mut [f32],
) {
    debug_assert!(plan.tile_k == T && (T == 1 || !plan.chain));
    let nr = NV * 16;
    let kmain = k / T * T;
    let chain = plan.chain.then_some(plan.signed_from);
    for (panel, (c0, w, kc)) in packed.chunks_exact(k * nr).zip(panels(plan, nr)) {
        let starts: Option<[__m512; NV]> = chain.map(|from| {
            std::array::from_fn(|v| {
                let lanes: [f32; 16] = std::array::from_fn(|l| chain_start(c0 + v * 16 + l, from));
                load(&lanes, 0)
            })
        });
        // Chunk by chunk, each over all the blocks (see `rows_t1`).
        let mut s = 0;
        while s < k {
            // Chunks of the multiple of `T`, then the tail's own call.
            let e = if s < kmain { (s + kc).min(kmain) } else { k };
            let first = s == 0;
            let call_chain = starts.as_ref().filter(|_| first);
            for (blk, a) in apack.chunks_exact(k * R).enumerate() {
                let r0 = blk * R;
                let br = R.min(rows - r0);
                let acc = chunk_tk::<T, R, NV>(&a[s * R..], &panel[s * nr..], e - s, call_chain);
                add_block(&acc, br, o, (r0 * n + c0, n, w), first);
            }
            s = e;
        }
    }
}

/// The most rows of A that [`few_rows_t1`] takes: they read B in place,
/// all of them in one pass (three rows of eight vectors: 24
/// accumulators). Its caller takes it for products that run on one
/// thread; larger ones run on the pool, B packed.
pub(crate) const FEW_ROWS: usize = 3;

/// `out = a @ b` for a plan with one partial sum per output and at most
/// [`FEW_ROWS`] rows of A (`x`, strides `sa`), B row-major `[k, n]` in `y`
/// read in place: what the blocked kernels compute (each chunk from `+0`,
/// or a chain's first term a plain product added to its start; added to
/// the output so far), without packing B (every value of B is used once
/// per row, so the blocked kernels' packing, and their blocks of six or
/// eight rows, cost more than the sums: `[1, 2048] @ [2048, 100]` took
/// 2.6 times `gemm`'s time).
///
/// # Safety
///
/// The CPU must support AVX-512F and FMA ([`available`]).
#[target_feature(enable = "avx512f,fma")]
pub(crate) unsafe fn few_rows_t1(
    (x, sa): (&[f32], (usize, usize)),
    y: &[f32],
    (m, k, n): (usize, usize, usize),
    plan: &DotPlan,
    out: &mut [f32],
) {
    debug_assert!(plan.tile_k == 1 && (1..=FEW_ROWS).contains(&m));
    match m {
        1 => few_rows::<1>((x, sa), y, (k, n), plan, out),
        2 => few_rows::<2>((x, sa), y, (k, n), plan, out),
        _ => few_rows::<3>((x, sa), y, (k, n), plan, out),
    }
}

/// [`few_rows_t1`] for `R` rows.
#[target_feature(enable = "avx512f,fma")]
#[inline]
fn few_rows<const R: usize>(
    (x, sa): (&[f32], (usize, usize)),
    y: &[f32],
    (k, n): (usize, usize),
    plan: &DotPlan,
    out: &mut [f32],
) {
    // Passes of up to 8 vectors (4 for three rows: 24 accumulators, the
    // rows' values and B's vector in registers; more spilled).
    let most = if R <= 2 { 8 } else { 4 };
    for &(j0, j1, kc) in &plan.tiles {
        let mut c0 = j0;
        while c0 < j1 {
            let nv = (j1 - c0).div_ceil(16).min(most);
            let w = (nv * 16).min(j1 - c0);
            let at = (c0, w, kc);
            match nv {
                1 => few_cols::<R, 1>((x, sa), y, (k, n), plan, at, out),
                2 => few_cols::<R, 2>((x, sa), y, (k, n), plan, at, out),
                3 => few_cols::<R, 3>((x, sa), y, (k, n), plan, at, out),
                4 => few_cols::<R, 4>((x, sa), y, (k, n), plan, at, out),
                5 => few_cols::<R, 5>((x, sa), y, (k, n), plan, at, out),
                6 => few_cols::<R, 6>((x, sa), y, (k, n), plan, at, out),
                7 => few_cols::<R, 7>((x, sa), y, (k, n), plan, at, out),
                _ => few_cols::<R, 8>((x, sa), y, (k, n), plan, at, out),
            }
            c0 += w;
        }
    }
}

/// Vector `v` of `NV` of a row of B's columns: the last one has `mask`'s
/// lanes (the row's last `w - 16 * (NV - 1)` values), zeros past them.
#[target_feature(enable = "avx512f")]
#[inline]
fn row_vector<const NV: usize>(row: &[f32], v: usize, mask: u16) -> __m512 {
    if v + 1 < NV {
        load(row, v * 16)
    } else {
        let src = &row[v * 16..];
        debug_assert_eq!(src.len(), mask.count_ones() as usize);
        // SAFETY: the mask selects the first `mask.count_ones()` lanes,
        // exactly the elements of `src` (the caller cut the row to `w`
        // values, bounds checked above); masked-off lanes are not read
        // (and are zero).
        unsafe { _mm512_maskz_loadu_ps(mask, src.as_ptr()) }
    }
}

/// Columns `c0..c0 + w` of [`few_rows`]'s `R` rows, in `NV` vectors (the
/// lanes past `w` are zeros from B, never stored).
#[target_feature(enable = "avx512f,fma")]
#[inline]
fn few_cols<const R: usize, const NV: usize>(
    (x, sa): (&[f32], (usize, usize)),
    y: &[f32],
    (k, n): (usize, usize),
    plan: &DotPlan,
    (c0, w, kc): (usize, usize, usize),
    out: &mut [f32],
) {
    // B's rows of these columns: `NV - 1` whole vectors, then `mask`'s
    // lanes.
    debug_assert!(w > (NV - 1) * 16 && w <= NV * 16);
    let mask: u16 = ((1u32 << (w - (NV - 1) * 16)) - 1) as u16;
    let row = |p: usize| &y[p * n + c0..p * n + c0 + w];
    let a = |r: usize, p: usize| x[r * sa.0 + p * sa.1];
    let starts: Option<[__m512; NV]> = plan.chain.then(|| {
        std::array::from_fn(|v| {
            let s: [f32; 16] =
                std::array::from_fn(|l| chain_start(c0 + v * 16 + l, plan.signed_from));
            load(&s, 0)
        })
    });
    let mut s = 0;
    while s < k {
        let e = (s + kc).min(k);
        let first = s == 0;
        let mut acc = [[_mm512_setzero_ps(); NV]; R];
        let mut p0 = s;
        if let (Some(starts), true) = (starts.as_ref().filter(|_| first), e > s) {
            // A chain: the first term a plain product added to the
            // column's start.
            for (r, accr) in acc.iter_mut().enumerate() {
                let av = _mm512_set1_ps(a(r, s));
                for (v, x) in accr.iter_mut().enumerate() {
                    let bv = row_vector::<NV>(row(s), v, mask);
                    *x = _mm512_add_ps(_mm512_mul_ps(av, bv), starts[v]);
                }
            }
            p0 = s + 1;
        }
        for p in p0..e {
            // The rows' values first, then each vector of B once: three
            // rows of eight vectors keep 24 accumulators, three values and
            // one vector in registers (all eight vectors at once spilled).
            let mut av = [_mm512_setzero_ps(); R];
            for (r, x) in av.iter_mut().enumerate() {
                *x = _mm512_set1_ps(a(r, p));
            }
            let row = row(p);
            for v in 0..NV {
                let bv = row_vector::<NV>(row, v, mask);
                for (accr, &ar) in acc.iter_mut().zip(&av) {
                    accr[v] = _mm512_fmadd_ps(ar, bv, accr[v]);
                }
            }
        }
        for (r, accr) in acc.iter().enumerate() {
            for (v, &sum) in accr.iter().enumerate().take(w.div_ceil(16)) {
                let start = r * n + c0 + v * 16;
                let lanes = (w - v * 16).min(16);
                add_partial(&mut out[start..start + lanes], sum, first);
            }
        }
        s = e;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xla::dot_blocked::planned_matmul;

    #[test]
    fn same_bits_as_the_generic_kernel() {
        if !available() {
            return;
        }
        // Values whose sums round differently in other orders, signed
        // zeros and a NaN included.
        let mut seed = 11u64;
        let mut value = || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
            match seed >> 59 {
                0 => -0.0,
                1 => 0.0,
                2 if seed.is_multiple_of(7) => f32::NAN,
                _ => ((seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 3.0,
            }
        };
        // Partial panels and blocks, several chunks, chains with and
        // without signed columns, several column tiles; two and four
        // partial sums per output, with tails (`k mod tile_k`) and with
        // `k` shorter than `tile_k`; narrow products (one or two vectors);
        // few rows with whole panels (B read in place).
        let shapes = [
            (13, 37, 130),
            (6, 5, 64),
            (25, 300, 200),
            (1, 2, 65),
            (20, 3, 16),
            (31, 66, 40),
            (7, 130, 10),
            (20, 40, 128),
            (9, 70, 192),
            // Few rows: B read in place (`few_rows_t1`).
            (2, 70, 40),
            (3, 300, 130),
            (1, 1000, 300),
        ];
        for (m, k, n) in shapes {
            let x: Vec<f32> = (0..m * k).map(|_| value()).collect();
            let y: Vec<f32> = (0..k * n).map(|_| value()).collect();
            let plans = [
                DotPlan {
                    tile_k: 1,
                    tiles: vec![(0, n, k)],
                    chain: false,
                    signed_from: usize::MAX,
                },
                DotPlan {
                    tile_k: 1,
                    tiles: vec![(0, n / 2, 16), (n / 2, n, 7)],
                    chain: false,
                    signed_from: usize::MAX,
                },
                DotPlan::chain(k, n),
                DotPlan::chain(k, n).signed_from(n / 3),
                DotPlan {
                    tile_k: 2,
                    tiles: vec![(0, n, k / 2 * 2)],
                    chain: false,
                    signed_from: usize::MAX,
                },
                DotPlan {
                    tile_k: 2,
                    tiles: vec![(0, n / 2, 6), (n / 2, n, 2)],
                    chain: false,
                    signed_from: usize::MAX,
                },
                DotPlan {
                    tile_k: 4,
                    tiles: vec![(0, n, (k / 4 * 4).max(4))],
                    chain: false,
                    signed_from: usize::MAX,
                },
                DotPlan {
                    tile_k: 4,
                    tiles: vec![(0, n / 3, 8), (n / 3, n, 4)],
                    chain: false,
                    signed_from: usize::MAX,
                },
            ];
            for plan in &plans {
                let args = (&x[..], (k, 1), &y[..], (n, 1), (m, k, n), plan);
                let mut fast = vec![0.0; m * n];
                planned_matmul(
                    args.0,
                    args.1,
                    args.2,
                    args.3,
                    args.4,
                    plan,
                    &mut fast,
                    &mut Vec::new(),
                );
                let mut generic = vec![0.0; m * n];
                crate::xla::dot_blocked::generic_for_tests(args, &mut generic);
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&fast), bits(&generic), "{m}x{k}x{n} {plan:?}");
            }
        }
    }
}
