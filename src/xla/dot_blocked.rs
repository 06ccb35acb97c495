//! The register-blocked kernels that run a [`DotPlan`]: each output summed
//! in the plan's order (see [`crate::xla::dot`]), many outputs at a time.
//!
//! B is packed first into panels of `NR` columns (`[k][NR]`, zero-padded),
//! so that the kernels read it as one contiguous stream; each panel stays
//! in cache while every block of `MR` rows of A (packed too, `[k][MR]`, so
//! that each value is broadcast straight from memory) runs over it. A block
//! keeps `T x MR x NR` accumulators (`T = tile_k` partial sums per output)
//! in vector registers: the per-output arithmetic is exactly the plan's
//! (term `p` of chunk `s..e` goes to partial sum `(p - s) % T`, every chunk
//! is reduced and added to the output so far), whatever the block shapes,
//! the loop order or the split between threads.

use std::array::from_fn;
use std::sync::{Mutex, OnceLock};

use smallvec::SmallVec;

use super::dot::{chain_start, DotPlan};

/// Lanes of one vector of accumulators (an AVX-512 register).
const L: usize = 16;

/// One vector of lanes.
type V = [f32; L];

/// Below this many multiply-adds a product runs on the calling thread.
///
/// Measured on the digits recipe (2 cores): handing a product to the
/// thread pool costs a wake-up and a context switch each way when other
/// work runs between products, as in a training step; below about 2M
/// multiply-adds that costs more than the second core saves (an epoch
/// 14.7 ms with the pool from 110K multiply-adds, 10.1 ms from 2M).
pub(crate) const PARALLEL_THRESHOLD: usize = 2 * 1024 * 1024;

/// The column panels of `plan` for panels `nr` wide: `(c0, w, kc)`, the
/// first column, the width (at most `nr`; a panel never straddles two of
/// the plan's column tiles, whose chunks may differ) and the chunk length.
pub(crate) fn panels(
    plan: &DotPlan,
    nr: usize,
) -> impl Iterator<Item = (usize, usize, usize)> + '_ {
    plan.tiles.iter().flat_map(move |&(j0, j1, kc)| {
        (j0..j1)
            .step_by(nr)
            .map(move |c0| (c0, nr.min(j1 - c0), kc))
    })
}

/// Packs columns `c0..c0 + w` of B (`[k, n]` in `y`, strides `sb`) into
/// `dst` (`k` rows of `nr`), zeros past `w`.
fn pack_panel(
    y: &[f32],
    sb: (usize, usize),
    k: usize,
    (c0, w): (usize, usize),
    nr: usize,
    dst: &mut [f32],
) {
    if sb.1 == 1 {
        for (p, row) in dst.chunks_exact_mut(nr).enumerate().take(k) {
            let src = &y[p * sb.0 + c0..p * sb.0 + c0 + w];
            // A full panel row is a copy of constant size, inlined (a call
            // to memmove per row of 64 values cost more than the copy).
            if !(copy_fixed::<64>(src, row) || copy_fixed::<32>(src, row)) {
                row[..w].copy_from_slice(src);
                row[w..].fill(0.0);
            }
        }
    } else {
        // B stored transposed (`g @ W^T`): each column contiguous; whole
        // 16 x 16 tiles transposed in registers where the columns are
        // contiguous, the rest a block of 16 terms at a time, so that the
        // reads stay in a cache line.
        for row in dst.chunks_exact_mut(nr).take(k) {
            row[w..].fill(0.0);
        }
        #[cfg(target_arch = "x86_64")]
        let (kt, wt) = if sb.0 == 1 && super::dot_avx512::available() {
            // SAFETY: AVX-512F (and FMA) detected just above, the only
            // requirement of `pack_tiles`, whose body is safe code but for
            // its bounds-checked loads and stores.
            unsafe { super::pack_t_avx512::pack_tiles(y, sb.1, k, (c0, w), nr, dst) }
        } else {
            (0, 0)
        };
        #[cfg(not(target_arch = "x86_64"))]
        let (kt, wt) = (0, 0);
        for p0 in (0..k).step_by(L) {
            let p1 = (p0 + L).min(k);
            // Columns the tiles did not cover (all of them past `kt`).
            let j0 = if p1 <= kt { wt } else { 0 };
            for j in j0..w {
                let col = (c0 + j) * sb.1;
                for p in p0..p1 {
                    dst[p * nr + j] = y[col + p * sb.0];
                }
            }
        }
    }
}

/// Copies `src` into `dst` when both hold exactly `N` values; returns
/// whether it did.
#[inline(always)]
fn copy_fixed<const N: usize>(src: &[f32], dst: &mut [f32]) -> bool {
    match (<&[f32; N]>::try_from(src), <&mut [f32; N]>::try_from(dst)) {
        (Ok(src), Ok(dst)) => {
            // By 64 bytes: a larger constant copy is a call to memmove.
            for (d, s) in dst.chunks_exact_mut(L).zip(src.chunks_exact(L)) {
                let d: &mut V = d.try_into().expect("a vector");
                *d = s.try_into().expect("a vector");
            }
            true
        }
        _ => false,
    }
}

/// Packs rows `i0..i0 + rows` of A (`[m, k]` in `x`, strides `sa`) into
/// `dst`: blocks of `MR` rows, each `k` columns of `MR` values (`[k][MR]`),
/// zeros past the last row (their results are never stored).
fn pack_a<const MR: usize>(
    x: &[f32],
    sa: (usize, usize),
    k: usize,
    (i0, rows): (usize, usize),
    dst: &mut [f32],
) {
    let mr = MR;
    if sa.0 == 1 {
        // A stored transposed (`A^T @ g`): each term's values of all the
        // rows are contiguous. Read them in tiles of terms, each tile's
        // rows of A kept in the cache while every block takes its `MR`
        // values of them: block by block over all the terms, each term was
        // a new cache line, and an A larger than the cache was read from
        // memory once per block sharing the line (62% of a
        // `[512, 2048] @ [2048, 16]` product). (Term by term over all the
        // blocks, the blocks' writes, `k * MR` floats apart, fell in the
        // same cache sets.)
        const TERMS: usize = 16;
        let end = i0 + rows;
        for p0 in (0..k).step_by(TERMS) {
            let terms = p0..(p0 + TERMS).min(k);
            for (b, block) in dst.chunks_exact_mut(k * mr).enumerate() {
                let r0 = i0 + b * mr;
                let br = mr.min(end.saturating_sub(r0));
                for p in terms.clone() {
                    let src = &x[p * sa.1 + r0..p * sa.1 + r0 + br];
                    let col = &mut block[p * mr..(p + 1) * mr];
                    if let (Ok(src), Ok(col)) = (
                        <&[f32; MR]>::try_from(src),
                        <&mut [f32; MR]>::try_from(&mut *col),
                    ) {
                        // A copy of constant size, inlined (not a call to
                        // memmove per term).
                        *col = *src;
                    } else {
                        col[..br].copy_from_slice(src);
                        col[br..].fill(0.0);
                    }
                }
            }
        }
        return;
    }
    for (b, block) in dst.chunks_exact_mut(k * mr).enumerate() {
        let r0 = i0 + b * mr;
        let br = mr.min((i0 + rows).saturating_sub(r0));
        for col in block.chunks_exact_mut(mr) {
            col[br..].fill(0.0);
        }
        if sa.1 == 1 && br == mr {
            // Rows contiguous: all the block's rows at once.
            let rows: [&[f32]; MR] = from_fn(|r| &x[(r0 + r) * sa.0..(r0 + r) * sa.0 + k]);
            for (p, col) in block.chunks_exact_mut(mr).enumerate() {
                for (c, row) in col.iter_mut().zip(&rows) {
                    *c = row[p];
                }
            }
            continue;
        }
        for r in 0..br {
            let row = (r0 + r) * sa.0;
            for (p, col) in block.chunks_exact_mut(mr).enumerate() {
                col[r] = x[row + p * sa.1];
            }
        }
    }
}

/// One kernel call: the terms of one chunk (`b`: its rows of the packed
/// panel, `nr = NV * L` wide; `a`: its columns of the packed rows of A), `T` partial sums per
/// output reduced as YNNPACK reduces them. `len` is a multiple of `T` but
/// for the tail, whose missing terms leave their partial sums at `+0`
/// (YNNPACK pads them with zeros). `chain`: the first term is a plain
/// product added to these starts (XLA's own emitter, `T == 1`).
#[inline(always)]
fn kernel_call<const T: usize, const MR: usize, const NV: usize>(
    a: &[f32],
    b: &[f32],
    len: usize,
    chain: Option<&[V; NV]>,
) -> [[V; NV]; MR] {
    let nr = NV * L;
    let b = &b[..len * nr];
    let a = &a[..len * MR];
    // A reference, not a copy: each value is then broadcast straight from
    // memory (a copied array is loaded into one register and broadcast
    // from there, which takes the FMA units' shuffle slots).
    let at = |t: usize| -> &[f32; MR] { a[t * MR..t * MR + MR].try_into().expect("MR") };
    let mut lanes = [[[[0.0f32; L]; NV]; MR]; T];
    let mut t0 = 0;
    if let (Some(starts), true) = (chain, len > 0) {
        let av = at(0);
        let brow = &b[..nr];
        for (r, acc) in lanes[0].iter_mut().enumerate() {
            for (v, accv) in acc.iter_mut().enumerate() {
                for l in 0..L {
                    accv[l] = av[r] * brow[v * L + l] + starts[v][l];
                }
            }
        }
        t0 = 1;
    }
    let full = t0 + (len - t0) / T * T;
    let mut t = t0;
    while t < full {
        for (q, lane) in lanes.iter_mut().enumerate() {
            let av = at(t + q);
            let brow: &[f32] = &b[(t + q) * nr..(t + q + 1) * nr];
            let brow: [V; NV] = from_fn(|v| brow[v * L..v * L + L].try_into().expect("L"));
            for (r, acc) in lane.iter_mut().enumerate() {
                for (v, accv) in acc.iter_mut().enumerate() {
                    for l in 0..L {
                        accv[l] = av[r].mul_add(brow[v][l], accv[l]);
                    }
                }
            }
        }
        t += T;
    }
    // The tail's terms (fewer than T), each in its own partial sum.
    for (q, lane) in lanes.iter_mut().enumerate().take(len - full) {
        let av = at(full + q);
        let brow = &b[(full + q) * nr..(full + q + 1) * nr];
        for (r, acc) in lane.iter_mut().enumerate() {
            for (v, accv) in acc.iter_mut().enumerate() {
                for l in 0..L {
                    accv[l] = av[r].mul_add(brow[v * L + l], accv[l]);
                }
            }
        }
    }
    from_fn(|r| {
        from_fn(|v| {
            from_fn(|l| match T {
                1 => lanes[0][r][v][l],
                2 => lanes[0][r][v][l] + lanes[1 % T][r][v][l],
                _ => {
                    (lanes[0][r][v][l] + lanes[1 % T][r][v][l])
                        + (lanes[2 % T][r][v][l] + lanes[3 % T][r][v][l])
                }
            })
        })
    })
}

/// Rows `rows` (at most `MR`) of one panel of the output, into `o`
/// (row-major, `n` wide, the rows of this block only), from the block's
/// packed rows of A (`[k][MR]`): every chunk of the plan, then the tail.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn block<const T: usize, const MR: usize, const NV: usize>(
    a: &[f32],
    panel: &[f32],
    k: usize,
    (c0, w, kc): (usize, usize, usize),
    rows: usize,
    starts: Option<&[V; NV]>,
    n: usize,
    o: &mut [f32],
) {
    let nr = NV * L;
    let kmain = k / T * T;
    let mut first = true;
    let mut s = 0;
    while s < k {
        let e = if s < kmain { (s + kc).min(kmain) } else { k };
        let call_chain = starts.filter(|_| first);
        let (ab, bb) = (&a[s * MR..e * MR], &panel[s * nr..e * nr]);
        let v = kernel_call::<T, MR, NV>(ab, bb, e - s, call_chain);
        for (r, vr) in v.iter().enumerate().take(rows) {
            let orow = &mut o[r * n + c0..r * n + c0 + w];
            if w == nr && first {
                for (ov, xv) in orow.chunks_exact_mut(L).zip(vr) {
                    ov.copy_from_slice(xv);
                }
            } else if w == nr {
                // Whole vectors (a scalar loop over the lanes cost a fifth
                // of a 128x512x512 product).
                for (ov, xv) in orow.chunks_exact_mut(L).zip(vr) {
                    for (o, &x) in ov.iter_mut().zip(xv) {
                        *o += x;
                    }
                }
            } else {
                for (j, oj) in orow.iter_mut().enumerate() {
                    let x = vr[j / L][j % L];
                    *oj = if first { x } else { x + *oj };
                }
            }
        }
        first = false;
        s = e;
    }
}

/// The `rows` rows of the product given as `o`, from their packed rows of
/// A (`apack`, see [`pack_a`]) and B's packed panels: panel by panel, each
/// panel over all the rows.
#[inline(always)]
fn rows_body<const T: usize, const MR: usize, const NV: usize>(
    apack: &[f32],
    packed: &[f32],
    (k, n): (usize, usize),
    plan: &DotPlan,
    rows: usize,
    o: &mut [f32],
) {
    let nr = NV * L;
    let chain = plan.chain.then_some(plan.signed_from);
    for (panel, cols) in packed.chunks_exact(k * nr).zip(panels(plan, nr)) {
        // What each column's chain starts from (once per panel).
        let starts: Option<[V; NV]> =
            chain.map(|from| from_fn(|v| from_fn(|l| chain_start(cols.0 + v * L + l, from))));
        for (b, a) in apack.chunks_exact(k * MR).enumerate() {
            let b0 = b * MR;
            let br = MR.min(rows - b0);
            let o = &mut o[b0 * n..(b0 + br) * n];
            block::<T, MR, NV>(a, panel, k, cols, br, starts.as_ref(), n, o);
        }
    }
}

/// The kernel shape for a plan: `tile_k` and the panel width in vectors
/// (`NV`), at most 16 accumulator vectors for 4 rows (`T * 4 * NV`).
fn shape(plan: &DotPlan) -> (usize, usize) {
    let widest = plan.tiles.iter().map(|&(j0, j1, _)| j1 - j0).max();
    let want = widest.unwrap_or(1).div_ceil(L);
    let nv = match plan.tile_k {
        1 => want.clamp(1, 4),
        2 => want.clamp(1, 2),
        _ => 1,
    };
    (plan.tile_k.clamp(1, 4), nv)
}

/// [`rows_body`] compiled for AVX-512 with FMA.
///
/// # Safety
///
/// The CPU must support AVX-512F and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
unsafe fn rows_avx512<const T: usize, const MR: usize, const NV: usize>(
    apack: &[f32],
    packed: &[f32],
    kn: (usize, usize),
    plan: &DotPlan,
    rows: usize,
    o: &mut [f32],
) {
    rows_body::<T, MR, NV>(apack, packed, kn, plan, rows, o)
}

/// [`rows_body`] compiled for AVX2 with FMA.
///
/// # Safety
///
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn rows_avx2<const T: usize, const MR: usize, const NV: usize>(
    apack: &[f32],
    packed: &[f32],
    kn: (usize, usize),
    plan: &DotPlan,
    rows: usize,
    o: &mut [f32],
) {
    rows_body::<T, MR, NV>(apack, packed, kn, plan, rows, o)
}

/// Rows `r.0 .. r.0 + r.1` of the product, with the fastest code this CPU
/// runs (all variants compute the same bits: `mul_add` is exactly rounded).
fn rows<const T: usize, const MR: usize, const NV: usize>(
    apack: &[f32],
    packed: &[f32],
    kn: (usize, usize),
    plan: &DotPlan,
    rows: usize,
    o: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the CPU supports AVX-512F and FMA, checked just above;
            // that is the only requirement of `rows_avx512`, whose body is
            // safe code.
            unsafe { rows_avx512::<T, MR, NV>(apack, packed, kn, plan, rows, o) };
            return;
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the CPU supports AVX2 and FMA, checked just above; that
            // is the only requirement of `rows_avx2`, whose body is safe code.
            unsafe { rows_avx2::<T, MR, NV>(apack, packed, kn, plan, rows, o) };
            return;
        }
    }
    rows_body::<T, MR, NV>(apack, packed, kn, plan, rows, o)
}

/// `out = a @ b` summed as `plan` says, for `a: [m, k]` in `x` with (row,
/// column) strides `sa`, `b: [k, n]` in `y` with strides `sb`, and
/// row-major `out` (`m, k, n >= 1`); `packed`: scratch for B's panels.
/// Large products run on the thread pool, split by rows; each output's
/// arithmetic is the same either way.
#[allow(clippy::too_many_arguments)]
pub(crate) fn planned_matmul(
    x: &[f32],
    sa: (usize, usize),
    y: &[f32],
    sb: (usize, usize),
    mkn: (usize, usize, usize),
    plan: &DotPlan,
    out: &mut [f32],
    packed: &mut Vec<f32>,
) {
    #[cfg(target_arch = "x86_64")]
    let wide = super::dot_avx512::available();
    #[cfg(not(target_arch = "x86_64"))]
    let wide = false;
    dispatch((x, sa, y, sb, mkn, plan), out, packed, wide);
}

/// [`planned_matmul`] with the kernel shape of `plan`; `wide`: plans with
/// one partial sum per output run on [`super::dot_avx512`], plans with four
/// on [`super::dot_t4`] (its caller checked that the CPU runs them).
fn dispatch(args: Operands<'_>, out: &mut [f32], packed: &mut Vec<f32>, wide: bool) {
    #[cfg(target_arch = "x86_64")]
    use super::dot_avx512::{MR, MR_NARROW as NARROW};
    #[cfg(target_arch = "x86_64")]
    if wide && super::dot_t4::runs(args.5, args.4 .1) {
        return super::dot_t4::planned_t4(args, out, packed);
    }
    #[cfg(target_arch = "x86_64")]
    if let (true, (x, sa, y, sb, mkn, plan)) = (wide, args) {
        let (m, k, n) = mkn;
        // Larger products run on the pool (blocked, B packed).
        let serial = m * k * n < PARALLEL_THRESHOLD;
        if plan.tile_k == 1 && m <= super::dot_avx512::FEW_ROWS && sb == (n, 1) {
            if serial || rayon::current_num_threads() == 1 {
                // SAFETY: `wide`: the caller checked that the CPU supports
                // AVX-512F and FMA, the only requirement of `few_rows_t1`.
                return unsafe { super::dot_avx512::few_rows_t1((x, sa), y, mkn, plan, out) };
            }
            return few_rows_on_pool(args, out);
        }
    }
    // Blocks of eight rows where they pad the rows no more than blocks of
    // six (padded rows are computed too).
    #[cfg(target_arch = "x86_64")]
    let eights = {
        let m = args.4 .0;
        m.div_ceil(NARROW) * NARROW <= m.div_ceil(MR) * MR
    };
    // One panel, A's rows contiguous: A read in place.
    #[cfg(target_arch = "x86_64")]
    if wide && args.1 .1 == 1 {
        let (t, nv) = shape(args.5);
        if panels(args.5, nv * L).count() == 1 {
            return match (t, nv, eights) {
                (1, 1, true) => run_a_in_place::<1, NARROW, 1>(args, out, packed),
                (1, 2, true) => run_a_in_place::<1, NARROW, 2>(args, out, packed),
                (1, 3, true) => run_a_in_place::<1, NARROW, 3>(args, out, packed),
                (1, 1, false) => run_a_in_place::<1, MR, 1>(args, out, packed),
                (1, 2, false) => run_a_in_place::<1, MR, 2>(args, out, packed),
                (1, 3, false) => run_a_in_place::<1, MR, 3>(args, out, packed),
                (1, _, _) => run_a_in_place::<1, MR, 4>(args, out, packed),
                (2, 1, _) => run_a_in_place::<2, MR, 1>(args, out, packed),
                (2, _, _) => run_a_in_place::<2, MR, 2>(args, out, packed),
                _ => run_a_in_place::<4, MR, 1>(args, out, packed),
            };
        }
    }
    // Rows per block (`MR`) and vectors per panel (`NV`). Four rows: with
    // eight, LLVM vectorized narrow panels across the rows (gathers and
    // scatters, 20x slower).
    match shape(args.5) {
        #[cfg(target_arch = "x86_64")]
        (1, 1) if wide && eights => {
            run::<1, NARROW, 1>(args, out, packed, rows_tk_avx512::<1, NARROW, 1>)
        }
        #[cfg(target_arch = "x86_64")]
        (1, 2) if wide && eights => {
            run::<1, NARROW, 2>(args, out, packed, rows_tk_avx512::<1, NARROW, 2>)
        }
        #[cfg(target_arch = "x86_64")]
        (1, 3) if wide && eights => {
            run::<1, NARROW, 3>(args, out, packed, rows_tk_avx512::<1, NARROW, 3>)
        }
        #[cfg(target_arch = "x86_64")]
        (1, 1) if wide => run::<1, MR, 1>(args, out, packed, rows_tk_avx512::<1, MR, 1>),
        #[cfg(target_arch = "x86_64")]
        (1, 2) if wide => run::<1, MR, 2>(args, out, packed, rows_tk_avx512::<1, MR, 2>),
        #[cfg(target_arch = "x86_64")]
        (1, 3) if wide => run::<1, MR, 3>(args, out, packed, rows_tk_avx512::<1, MR, 3>),
        (1, 1) => run::<1, 4, 1>(args, out, packed, rows::<1, 4, 1>),
        (1, 2) => run::<1, 4, 2>(args, out, packed, rows::<1, 4, 2>),
        #[cfg(target_arch = "x86_64")]
        (1, _) if wide && is_long_chain(args.5, args.4) => run_long_chain(args, out, packed),
        #[cfg(target_arch = "x86_64")]
        (1, _) if reads_b_in_place(&args, wide) => run_body::<1, { super::dot_avx512::MR }, 4>(
            args,
            out,
            packed,
            rows_t1_in_place_avx512,
            true,
        ),
        #[cfg(target_arch = "x86_64")]
        (1, _) if wide => run_t1(args, out, packed),
        (1, _) => run::<1, 4, 4>(args, out, packed, rows::<1, 4, 4>),
        #[cfg(target_arch = "x86_64")]
        (2, nv) if wide => match nv {
            1 => run::<2, MR, 1>(args, out, packed, rows_tk_avx512::<2, MR, 1>),
            _ => run::<2, MR, 2>(args, out, packed, rows_tk_avx512::<2, MR, 2>),
        },
        (2, 1) => run::<2, 4, 1>(args, out, packed, rows::<2, 4, 1>),
        (2, _) => run::<2, 4, 2>(args, out, packed, rows::<2, 4, 2>),
        #[cfg(target_arch = "x86_64")]
        _ if wide => run::<4, MR, 1>(args, out, packed, rows_tk_avx512::<4, MR, 1>),
        _ => run::<4, 4, 1>(args, out, packed, rows::<4, 4, 1>),
    }
}

/// [`rows_t1_avx512`]'s `MODE`s (a const parameter, so that each mode is a
/// plain function the blocked runners can take): [`First`](super::dot_avx512::First)'s
/// `Store`, `Continue` and `Add`.
#[cfg(target_arch = "x86_64")]
const STORE: u8 = 0;
#[cfg(target_arch = "x86_64")]
const CONTINUE: u8 = 1;
#[cfg(target_arch = "x86_64")]
const ADD: u8 = 2;

/// Rows of a product for a plan with one partial sum per output, by
/// [`super::dot_avx512::rows_t1`] (blocks of its `MR` rows, panels of 64
/// columns), the first chunk as `MODE` says. Without AVX-512 only a whole
/// plan (`STORE`) runs, on the portable kernel: the pieces of a long chain
/// (`CONTINUE`, `ADD`) are cut only where AVX-512 is (`wide`).
#[cfg(target_arch = "x86_64")]
fn rows_t1_avx512<const MODE: u8>(
    apack: &[f32],
    packed: &[f32],
    kn: (usize, usize),
    plan: &DotPlan,
    rows: usize,
    o: &mut [f32],
) {
    use super::dot_avx512::First;
    let mode = match MODE {
        STORE => First::Store,
        CONTINUE => First::Continue,
        _ => First::Add,
    };
    if super::dot_avx512::available() {
        // SAFETY: the CPU supports AVX-512F and FMA, checked just above;
        // that is the only requirement of `rows_t1`, whose body is safe
        // code but for its bounds-checked loads and stores.
        let b = super::dot_avx512::Panels::Packed(packed);
        unsafe { super::dot_avx512::rows_t1(apack, b, kn, plan, rows, o, mode) };
    } else {
        assert_eq!(mode, First::Store, "pieces of a chain need AVX-512");
        self::rows::<1, { super::dot_avx512::MR }, 4>(apack, packed, kn, plan, rows, o);
    }
}

/// A plan with one partial sum per output on
/// [`super::dot_avx512::panel_t1`] (blocks of its `MR` rows, panels of
/// 64 columns): a product that is its own panel runs as one, any other
/// on the runner shared with the four-partial-sum kernel,
/// [`super::dot_panels::run_panels`] (shares of rows per thread, B packed
/// as the first block of rows reads it), through [`T1`].
///
/// Each output is summed as [`rows_t1_avx512`] sums it, whatever the
/// share or the block, so the bits are the same.
#[cfg(target_arch = "x86_64")]
fn run_t1(args: Operands<'_>, out: &mut [f32], packed: &mut Vec<f32>) {
    use super::dot_avx512::{MR, NR};
    if is_its_own_panel(&args, NR) {
        return run::<1, MR, 4>(args, out, packed, rows_t1_avx512::<STORE>);
    }
    // SAFETY: `dispatch` runs this only where the caller checked that the
    // CPU supports AVX-512F and FMA (`wide`), the only requirement of
    // `run_panels`.
    unsafe { super::dot_panels::run_panels::<T1>(args, out, packed) }
}

/// [`super::dot_avx512::panel_t1`] as a kernel of
/// [`super::dot_panels::run_panels`]: A packed by [`pack_a`], B's panels
/// of 64 columns read in place when whole and B row-major.
#[cfg(target_arch = "x86_64")]
struct T1;

#[cfg(target_arch = "x86_64")]
impl super::dot_panels::PanelKernel for T1 {
    const MR: usize = super::dot_avx512::MR;
    const NR: usize = super::dot_avx512::NR;
    const IN_PLACE_AT_ONCE: bool = true;
    type Rows<'a> = &'a [f32];

    fn panel_len(k: usize) -> usize {
        k * Self::NR
    }

    fn a_len(rows: usize, _: (usize, usize), k: usize) -> usize {
        rows.next_multiple_of(Self::MR) * k
    }

    fn pack_panel(y: &[f32], sb: (usize, usize), k: usize, cols: (usize, usize), dst: &mut [f32]) {
        pack_panel(y, sb, k, cols, Self::NR, dst);
    }

    fn reads_rows(sb: (usize, usize), n: usize, w: usize) -> bool {
        sb == (n, 1) && w == Self::NR
    }

    fn rows<'a>(
        x: &'a [f32],
        sa: (usize, usize),
        k: usize,
        (i0, rows): (usize, usize),
        scratch: &'a mut [f32],
    ) -> &'a [f32] {
        let a = &mut scratch[..rows.next_multiple_of(Self::MR) * k];
        pack_a::<{ super::dot_avx512::MR }>(x, sa, k, (i0, rows), a);
        a
    }

    unsafe fn panel(
        a: &&[f32],
        b: super::dot_avx512::PanelRows<'_>,
        kn: (usize, usize),
        cols: (usize, usize, usize),
        chain: Option<usize>,
        rows: usize,
        o: &mut [f32],
    ) {
        use super::dot_avx512::{panel_t1, First};
        // SAFETY: the caller's contract (AVX-512F and FMA).
        unsafe { panel_t1(a, b, kn, cols, chain, rows, o, First::Store) }
    }
}

/// [`rows_t1_avx512`] reading B in place (`packed` is B, row-major `[k,
/// n]`; see [`reads_b_in_place`]).
#[cfg(target_arch = "x86_64")]
fn rows_t1_in_place_avx512(
    apack: &[f32],
    y: &[f32],
    kn: (usize, usize),
    plan: &DotPlan,
    rows: usize,
    o: &mut [f32],
) {
    // `reads_b_in_place` checked the CPU.
    assert!(super::dot_avx512::available());
    let b = super::dot_avx512::Panels::InPlace(y);
    // SAFETY: the CPU supports AVX-512F and FMA, asserted just above;
    // that is the only requirement of `rows_t1`, whose body is safe code
    // but for its bounds-checked loads and stores.
    unsafe {
        super::dot_avx512::rows_t1(apack, b, kn, plan, rows, o, super::dot_avx512::First::Store)
    };
}

/// A plan with `T` partial sums per output and one panel of `NV` vectors,
/// A's rows contiguous: run by [`super::dot_a_rows::rows`] in blocks of
/// `R` rows, A read in place, B's panel packed unless B is exactly that
/// panel.
#[cfg(target_arch = "x86_64")]
fn run_a_in_place<const T: usize, const R: usize, const NV: usize>(
    args: Operands<'_>,
    out: &mut [f32],
    packed: &mut Vec<f32>,
) {
    let (x, sa, y, sb, (m, k, n), plan) = args;
    let nr = NV * L;
    let panel: &[f32] = if is_its_own_panel(&args, nr) {
        y
    } else {
        let Some((c0, w, _)) = panels(plan, nr).next() else {
            return;
        };
        let dst = aligned_scratch(packed, k * nr);
        pack_panel(y, sb, k, (c0, w), nr, dst);
        dst
    };
    // `n >= 1`: the plan has a panel.
    let rows = |(i0, o): (usize, &mut [f32])| {
        let rows = o.len() / n;
        let a = (&x[i0 * sa.0..], sa.0);
        // SAFETY: `dispatch` runs this only where the caller checked that
        // the CPU supports AVX-512F and FMA (`wide`), the only requirement
        // of `rows`.
        unsafe { super::dot_a_rows::rows::<T, R, NV>(a, panel, (k, n), plan, rows, o) }
    };
    let parallel = m * n * k >= PARALLEL_THRESHOLD && rayon::current_num_threads() > 1;
    if !parallel {
        return rows((0, out));
    }
    // A share of blocks per thread (see `run_body`).
    let per = m.div_ceil(R).div_ceil(rayon::current_num_threads()) * R;
    let shares = out.chunks_mut(per * n).enumerate();
    crate::pool::share_out(shares.map(|(t, o)| (t * per, o)), rows);
}

/// [`super::dot_avx512::few_rows_t1`] on the pool, for products too large
/// for one thread: the columns cut into one range per thread (at multiples
/// of 16), each range's outputs computed into a buffer of its own and
/// copied into place (at most three rows). Each output is summed as on one
/// thread, so the bits are the same. On one thread with its rows padded to
/// blocks of six, `[1, 4096] @ [4096, 4096]` took 4.3 ms against gemm's
/// 3.0 ms.
#[cfg(target_arch = "x86_64")]
fn few_rows_on_pool((x, sa, y, _, (m, k, n), plan): Operands<'_>, out: &mut [f32]) {
    let per = n.div_ceil(rayon::current_num_threads()).next_multiple_of(L);
    let ranges: SmallVec<[(usize, usize); 8]> =
        (0..n).step_by(per).map(|c| (c, (c + per).min(n))).collect();
    let parts: SmallVec<[Mutex<Vec<f32>>; 8]> =
        ranges.iter().map(|_| Mutex::new(Vec::new())).collect();
    crate::pool::share_out(ranges.iter().zip(&parts), |(&(lo, hi), part)| {
        let tiles = plan.tiles.iter().filter_map(|&(j0, j1, kc)| {
            let (a, b) = (j0.max(lo), j1.min(hi));
            (a < b).then_some((a, b, kc))
        });
        let sub = DotPlan {
            tiles: tiles.collect(),
            ..plan.clone()
        };
        // Full rows, of which only this range's columns are written.
        let mut buf = vec![0.0; m * n];
        // SAFETY: `dispatch` runs this only where the caller checked that
        // the CPU supports AVX-512F and FMA (`wide`), the only requirement
        // of `few_rows_t1`.
        unsafe { super::dot_avx512::few_rows_t1((x, sa), y, (m, k, n), &sub, &mut buf) };
        *part.lock().unwrap_or_else(|e| e.into_inner()) = buf;
    });
    for (&(lo, hi), part) in ranges.iter().zip(parts) {
        let buf = part.into_inner().unwrap_or_else(|e| e.into_inner());
        for (o, b) in out.chunks_exact_mut(n).zip(buf.chunks_exact(n)) {
            o[lo..hi].copy_from_slice(&b[lo..hi]);
        }
    }
}

/// The terms of a long chain that [`run_long_chain`] runs at a time: a
/// panel's rows of them (128 KB) stay in a core's L2 while every block of
/// rows takes them.
#[cfg(target_arch = "x86_64")]
const CHAIN_PIECE: usize = 512;

/// Whether `plan` (`[m, k] @ [k, n]`) is one chain per output, whole or
/// in chunks (Eigen's blocks of `A^T @ G` over a batch), long enough for a panel of its
/// terms to outgrow a core's L2 (4096 terms of 64 columns, 1 MB), over
/// several panels, with pieces of more than 16M multiply-adds. Shorter
/// chains, a single panel or smaller pieces gained nothing and paid each
/// piece's hand-off to the pool (in pieces: `[64, 8192] @ [8192, 64]` 213
/// -> 761 us, `[64, 8192] @ [8192, 128]` 336 -> 424 us, `[64, 4096] @
/// [4096, 512]` 688 -> 752 us; `[512, 2048] @ [2048, 512]` unchanged).
#[cfg(target_arch = "x86_64")]
fn is_long_chain(plan: &DotPlan, (m, k, n): (usize, usize, usize)) -> bool {
    let nr = super::dot_avx512::NR;
    plan.chain
        && plan.tile_k == 1
        && plan.tiles.len() == 1
        && k >= 4096
        && n > nr
        && m * n * CHAIN_PIECE > 1 << 24
}

/// A long chain per output (see [`is_long_chain`]) in pieces of
/// [`CHAIN_PIECE`] terms, each piece a product of its own run by the
/// blocked kernels, the outputs holding the chains' sums between pieces
/// ([`super::dot_avx512::First::Continue`]), so the bits are those of
/// the whole chain. Run whole, every block of rows read its panel's
/// thousands of terms from the shared cache: `[512, 8192] @ [8192, 512]`
/// (a weight gradient over a batch of 8192) took 13.3 ms against gemm's
/// 9.3 ms.
#[cfg(target_arch = "x86_64")]
fn run_long_chain(args: Operands<'_>, out: &mut [f32], packed: &mut Vec<f32>) {
    let (x, sa, y, sb, (m, k, n), plan) = args;
    // A plan in chunks (Eigen's blocks of a transposed left operand) is cut
    // at chunk boundaries, each piece's chunks added to the output.
    let kc = plan.tiles.first().map_or(k, |&(_, _, kc)| kc);
    let chunked = kc < k;
    let piece_len = if chunked {
        CHAIN_PIECE.div_ceil(kc) * kc
    } else {
        CHAIN_PIECE
    };
    for p0 in (0..k).step_by(piece_len) {
        let kp = piece_len.min(k - p0);
        let piece = DotPlan {
            tiles: plan
                .tiles
                .iter()
                .map(|&(j0, j1, _)| (j0, j1, if chunked { kc } else { kp }))
                .collect(),
            chain: p0 == 0,
            ..plan.clone()
        };
        let rows_fn: RowsFn = match (p0 == 0, chunked) {
            (true, _) => rows_t1_avx512::<STORE>,
            (false, false) => rows_t1_avx512::<CONTINUE>,
            (false, true) => rows_t1_avx512::<ADD>,
        };
        let args = (&x[p0 * sa.1..], sa, &y[p0 * sb.0..], sb, (m, kp, n), &piece);
        run_body::<1, { super::dot_avx512::MR }, 4>(args, out, packed, rows_fn, false);
    }
}

/// Whether a plan with one partial sum per output runs on B in place
/// rather than packed: B row-major and contiguous, every panel of 64
/// columns whole, and at most six blocks of rows per thread (each of B's
/// values is then read a few times; packing it cost more than that: 55% of
/// an `8 x 8192 x 512` product. Measured, 2 cores: `8 x 8192 x 512` 872 ->
/// 288 us, `32 x 1024 x 4096` 1339 -> 716 us, `64 x 4096 x 1024` 2009 ->
/// 1878 us; products of 128 rows stay packed).
#[cfg(target_arch = "x86_64")]
fn reads_b_in_place((_, _, _, sb, (m, _, n), plan): &Operands<'_>, wide: bool) -> bool {
    let nr = super::dot_avx512::NR;
    wide && sb.1 == 1
        && sb.0 == *n
        && panels(plan, nr).all(|(_, w, _)| w == nr)
        && m.div_ceil(super::dot_avx512::MR) <= 6 * rayon::current_num_threads()
}

/// Rows of a product for a plan with `T` partial sums per output and
/// panels of one to three vectors, by [`super::dot_avx512::rows_tk`]
/// (blocks of `R` rows, panels of `NV` vectors).
#[cfg(target_arch = "x86_64")]
fn rows_tk_avx512<const T: usize, const R: usize, const NV: usize>(
    apack: &[f32],
    packed: &[f32],
    kn: (usize, usize),
    plan: &DotPlan,
    rows: usize,
    o: &mut [f32],
) {
    if super::dot_avx512::available() {
        // SAFETY: the CPU supports AVX-512F and FMA, checked just above;
        // that is the only requirement of `rows_tk`, whose body is safe
        // code but for its bounds-checked loads and stores.
        unsafe { super::dot_avx512::rows_tk::<T, R, NV>(apack, packed, kn, plan, rows, o) };
    } else {
        self::rows::<T, R, NV>(apack, packed, kn, plan, rows, o);
    }
}

/// [`planned_matmul`] by the generic kernels only (the reference the
/// AVX-512 kernel is tested against).
#[cfg(test)]
pub(crate) fn generic_for_tests(args: Operands<'_>, out: &mut [f32]) {
    dispatch(args, out, &mut Vec::new(), false)
}

/// How [`run`] computes a range of rows from the packed operands.
type RowsFn = fn(&[f32], &[f32], (usize, usize), &DotPlan, usize, &mut [f32]);

/// The operands of a product: `a` in `x` with strides `sa`, `b` in `y`
/// with strides `sb`, `(m, k, n)` and the plan.
pub(crate) type Operands<'a> = (
    &'a [f32],
    (usize, usize),
    &'a [f32],
    (usize, usize),
    (usize, usize, usize),
    &'a DotPlan,
);

/// `len` floats of the scratch buffer `packed`, starting on a 64-byte
/// boundary, so that every row of a packed panel (a multiple of 64 bytes)
/// is whole cache lines: `malloc` aligns to 16 bytes, and vector loads
/// straddling two lines made a product up to half again as slow, depending
/// on where the buffer happened to lie. The buffer is grown, never cleared:
/// the packers write every element they read (a memset of megabytes per
/// call otherwise).
pub(crate) fn aligned_scratch(packed: &mut Vec<f32>, len: usize) -> &mut [f32] {
    if packed.len() < len + L {
        packed.resize(len + L, 0.0);
    }
    let skip = packed.as_ptr().align_offset(64).min(L);
    &mut packed[skip..skip + len]
}

/// [`planned_matmul`] with blocks of `MR` rows and panels of `NV` vectors.
fn run<const T: usize, const MR: usize, const NV: usize>(
    args: Operands<'_>,
    out: &mut [f32],
    packed: &mut Vec<f32>,
    rows_fn: RowsFn,
) {
    let in_place = is_its_own_panel(&args, NV * L);
    run_body::<T, MR, NV>(args, out, packed, rows_fn, in_place)
}

/// Whether B, row-major and `nr` columns wide, is already the product's
/// one packed panel (`[k][nr]`): then packing it would only copy it
/// (most of an `8 x 1024 x 48` product's time).
fn is_its_own_panel((_, _, _, sb, (_, _, n), plan): &Operands<'_>, nr: usize) -> bool {
    let mut panels = panels(plan, nr);
    *sb == (*n, 1) && matches!(panels.next(), Some((0, w, _)) if w == nr) && panels.next().is_none()
}

/// [`run`], B packed into panels first unless `in_place` (then `rows_fn`
/// gets B itself, row-major `[k, n]`; see [`reads_b_in_place`] and
/// [`is_its_own_panel`]).
fn run_body<const T: usize, const MR: usize, const NV: usize>(
    (x, sa, y, sb, (m, k, n), plan): Operands<'_>,
    out: &mut [f32],
    packed: &mut Vec<f32>,
    rows_fn: RowsFn,
    in_place: bool,
) {
    debug_assert!(out.len() == m * n);
    let nr = NV * L;
    let count = if in_place {
        0
    } else {
        panels(plan, nr).count()
    };
    let m_pad = m.next_multiple_of(MR);
    // B's panels, then A's row blocks.
    let (need_b, need_a) = (count * k * nr, m_pad * k);
    let (bpack, apack) = aligned_scratch(packed, need_b + need_a).split_at_mut(need_b);
    // A pool of one thread would only add a hand-off to it and back.
    let parallel = m * n * k >= PARALLEL_THRESHOLD && rayon::current_num_threads() > 1;
    if !parallel {
        for (dst, (c0, w, _)) in bpack.chunks_exact_mut(k * nr).zip(panels(plan, nr)) {
            pack_panel(y, sb, k, (c0, w), nr, dst);
        }
        let b: &[f32] = if in_place { y } else { bpack };
        by_slabs::<MR>((x, sa), (k, n), (0, m), (apack, out), |a, rows, o| {
            rows_fn(a, b, (k, n), plan, rows, o)
        });
        return;
    }
    // The blocks of `MR` rows shared out evenly, a share per thread (on
    // the calling thread and the pool, `share_out`): rows cut into more
    // tasks than threads split unevenly (128 rows in tasks of 36: 72 rows
    // on one core, 56 on the other).
    let per = m.div_ceil(MR).div_ceil(rayon::current_num_threads()) * MR;
    let shares = out.chunks_mut(per * n).zip(apack.chunks_mut(per * k));
    if in_place {
        crate::pool::share_out(shares.enumerate(), |(t, (o, a))| {
            let rows = o.len() / n;
            by_slabs::<MR>((x, sa), (k, n), (t * per, rows), (a, o), |a, rows, o| {
                rows_fn(a, y, (k, n), plan, rows, o)
            });
        });
        return;
    }
    // Every share runs every panel of B, one at a time; a panel is packed
    // by the first share that needs it, the others wait for it (they start
    // at different panels, so they rarely do). A pass packing all the
    // panels first, then one running the rows, kept both cores waiting on
    // memory while they packed: a tenth of a `[128, 784] @ [784, 512]`
    // product, which gemm overlaps with its sums.
    let panels: SmallVec<[Panel<'_>; 16]> = bpack
        .chunks_exact_mut(k * nr)
        .zip(panels(plan, nr))
        .map(|(dst, (c0, w, kc))| Panel {
            dst: Mutex::new(Some(dst)),
            packed: OnceLock::new(),
            plan: DotPlan {
                tiles: vec![(c0, c0 + w, kc)],
                ..plan.clone()
            },
            cols: (c0, w),
        })
        .collect();
    let count = panels.len();
    let nshares = m.div_ceil(per);
    crate::pool::share_out(shares.enumerate(), |(t, (o, a))| {
        let rows = o.len() / n;
        let first = t * count / nshares;
        by_slabs::<MR>((x, sa), (k, n), (t * per, rows), (a, o), |a, rows, o| {
            for i in (0..count).map(|i| (first + i) % count) {
                let panel = &panels[i];
                let b = panel.packed.get_or_init(|| {
                    let dst = (panel.dst.lock().unwrap_or_else(|e| e.into_inner()))
                        .take()
                        .expect("a panel is packed once");
                    pack_panel(y, sb, k, panel.cols, nr, dst);
                    dst
                });
                rows_fn(a, b, (k, n), &panel.plan, rows, o);
            }
        });
    });
}

/// One panel of B in a parallel product (see [`run_body`]): where it is
/// packed, its packed values once packed, and the plan of its columns
/// alone (the kernels run it as a product of one panel).
struct Panel<'a> {
    dst: Mutex<Option<&'a mut [f32]>>,
    packed: OnceLock<&'a [f32]>,
    plan: DotPlan,
    cols: (usize, usize),
}

/// The packed rows of A that [`by_slabs`] keeps in the cache at a time:
/// half of a core's L2 (1 MB on the machine measured).
const SLAB_BYTES: usize = 512 * 1024;

/// The largest B that [`by_slabs`] expects to find in the shared cache
/// when a slab reads it again: half the L3 of the machine measured (32 MB).
const B_CACHED_BYTES: usize = 16 * 1024 * 1024;

/// Runs `rows_fn(a, rows, o)` on rows `i0..i0 + rows` of A (`x`, strides
/// `sa`, `k` terms; outputs `n` wide in `o`) slab by slab, each slab's rows
/// packed into `apack` just before its run, so that the packed copy is
/// still in the cache when the kernel reads it. Packing all the rows first
/// wrote them to memory and read them back: with A far larger than the
/// cache, that tripled its traffic (`[25088, 144] @ [144, 32]`, packing
/// was 44% of the product). Slabs are whole blocks of `MR` rows and every
/// output is computed as before, so the bits are the same.
///
/// Every slab reads all of B again, from the shared cache while B fits
/// in it ([`B_CACHED_BYTES`]); a larger B is read from memory, so a slab
/// then holds at least as many bytes of A as B has (`k * n` values), so
/// that B is not read more than A. With slabs of half an L2 only, `[64,
/// 4096] @ [4096, 4096]` read its 64 MB B twice per thread from memory,
/// 8.4 -> 12.7 ms; `[2048, 2048] @ [2048, 2048]`'s 16 MB B, re-read from
/// the cache, still gains (42.5 -> 38.1 ms).
fn by_slabs<const MR: usize>(
    (x, sa): (&[f32], (usize, usize)),
    (k, n): (usize, usize),
    (i0, rows): (usize, usize),
    (apack, o): (&mut [f32], &mut [f32]),
    mut rows_fn: impl FnMut(&[f32], usize, &mut [f32]),
) {
    let slab = slab_rows(MR, k, n);
    for start in (0..rows).step_by(slab) {
        let r = slab.min(rows - start);
        // Every slab reuses the start of `apack`, still in the cache.
        let a = &mut apack[..r.next_multiple_of(MR) * k];
        pack_a::<MR>(x, sa, k, (i0 + start, r), a);
        rows_fn(a, r, &mut o[start * n..(start + r) * n]);
    }
}

/// The rows of A per slab of [`by_slabs`] (whole blocks of `mr` rows) for
/// `k` terms and `n` columns.
pub(crate) fn slab_rows(mr: usize, k: usize, n: usize) -> usize {
    let b_bytes = 4 * k * n;
    let bytes = if b_bytes <= B_CACHED_BYTES {
        SLAB_BYTES
    } else {
        SLAB_BYTES.max(b_bytes)
    };
    (bytes / (4 * mr * k.max(1))).max(1) * mr
}

#[cfg(test)]
mod pack_tests {
    use super::{pack_a, rows, run_body, DotPlan};

    /// Asserts that `planned_matmul` gives the per-output reference's bits
    /// for A in `x` with strides `sa` and row-major B in `y`, under `plan`.
    fn assert_reference_bits(
        (x, sa): (&[f32], (usize, usize)),
        y: &[f32],
        (m, k, n): (usize, usize, usize),
        plan: &DotPlan,
    ) {
        let mut want = vec![0.0; m * n];
        crate::xla::dot::planned_scalar(x, sa, y, (n, 1), (m, k, n), plan, &mut want);
        let mut got = vec![f32::NAN; m * n];
        let mkn = (m, k, n);
        super::planned_matmul(x, sa, y, (n, 1), mkn, plan, &mut got, &mut Vec::new());
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got), bits(&want), "{m}x{k}x{n} {plan:?} {sa:?}");
    }

    /// Products whose rows are packed and run in several slabs per thread
    /// (`by_slabs`), the last one partial, on the pool, and products of
    /// several panels packed by whichever share needs them first: the bits
    /// of the per-output reference, for one and four partial sums per
    /// output and a chain, A row-major and transposed.
    #[test]
    fn slabs_give_the_reference_bits() {
        use crate::xla::dot::plan;
        let shapes = [
            (1501, 200, 40),
            (997, 300, 33),
            (2003, 120, 17),
            (130, 160, 300),
        ];
        for (m, k, n) in shapes {
            let x: Vec<f32> = (0..m * k)
                .map(|i| ((i * 7919) % 113) as f32 / 17.0 - 3.0)
                .collect();
            let xt: Vec<f32> = (0..k * m).map(|i| x[(i % m) * k + i / m]).collect();
            let y: Vec<f32> = (0..k * n)
                .map(|i| ((i * 104729) % 97) as f32 / 13.0 - 3.5)
                .collect();
            assert!(m * k * n >= super::PARALLEL_THRESHOLD);
            let plans = [
                plan(m, k, n, false, 1, 1),
                DotPlan::chain(k, n),
                // Four partial sums in chunks too short for `dot_t4`.
                DotPlan {
                    tile_k: 4,
                    tiles: vec![(0, n, 12)],
                    chain: false,
                    signed_from: usize::MAX,
                },
            ];
            for p in &plans {
                for a in [(&x[..], (k, 1)), (&xt[..], (1, m))] {
                    assert_reference_bits(a, &y, (m, k, n), p);
                }
            }
        }
    }

    /// Plans with one partial sum per output on `run_t1`, on the pool and
    /// on one thread: B packed as the first block of rows reads it, read
    /// in place by a share that finds its panel being packed, or packed
    /// first (B stored transposed, partial panels); shares whose last
    /// block, or whose only block, has one to five rows; last panels of
    /// one to four vectors; chunked plans with column tiles, chains and
    /// signed columns. The bits of the per-output reference.
    #[test]
    fn t1_panels_packed_as_read_give_the_reference_bits() {
        let shapes = [
            (128, 200, 784),
            (131, 300, 112),
            (7, 3000, 130),
            (97, 700, 80),
            (9, 40, 200),
            (13, 70, 64 * 3 + 5),
        ];
        for (m, k, n) in shapes {
            let x: Vec<f32> = (0..m * k)
                .map(|i| match i % 13 {
                    0 => -0.0,
                    _ => ((i * 7919) % 113) as f32 / 17.0 - 3.0,
                })
                .collect();
            let y: Vec<f32> = (0..k * n)
                .map(|i| ((i * 104729) % 97) as f32 / 13.0 - 3.5)
                .collect();
            let yt: Vec<f32> = (0..n * k).map(|i| y[(i % k) * n + i / k]).collect();
            let plans = [
                DotPlan {
                    tile_k: 1,
                    tiles: vec![(0, n, k)],
                    chain: false,
                    signed_from: usize::MAX,
                },
                DotPlan {
                    tile_k: 1,
                    tiles: vec![(0, n / 2, 64), (n / 2, n, 37)],
                    chain: false,
                    signed_from: usize::MAX,
                },
                DotPlan::chain(k, n),
                DotPlan::chain(k, n).signed_from(n / 3),
            ];
            for p in &plans {
                for (ys, sb) in [(&y[..], (n, 1)), (&yt[..], (1, k))] {
                    let mut want = vec![0.0; m * n];
                    let mkn = (m, k, n);
                    crate::xla::dot::planned_scalar(&x, (k, 1), ys, sb, mkn, p, &mut want);
                    let mut got = vec![f32::NAN; m * n];
                    super::planned_matmul(&x, (k, 1), ys, sb, mkn, p, &mut got, &mut Vec::new());
                    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&got), bits(&want), "{m}x{k}x{n} {p:?} {sb:?}");
                }
            }
        }
    }

    /// One panel of one to four vectors, A's rows read in place
    /// (`run_a_in_place`): the bits of the per-output reference for every
    /// panel width, blocks of six and eight rows with a partial last one,
    /// on one thread and on the pool, chains and signed columns, one, two
    /// and four partial sums per output with tails.
    #[test]
    fn a_read_in_place_gives_the_reference_bits() {
        let shapes = [
            (7, 33, 50),
            (13, 70, 64),
            (9, 31, 12),
            (1001, 130, 16),
            (1003, 140, 64),
            (2001, 100, 30),
            (999, 77, 47),
        ];
        for (m, k, n) in shapes {
            let x: Vec<f32> = (0..m * k)
                .map(|i| match i % 13 {
                    0 => -0.0,
                    _ => ((i * 7919) % 113) as f32 / 17.0 - 3.0,
                })
                .collect();
            let y: Vec<f32> = (0..k * n)
                .map(|i| ((i * 104729) % 97) as f32 / 13.0 - 3.5)
                .collect();
            let plans = [
                DotPlan {
                    tile_k: 1,
                    tiles: vec![(0, n, 32)],
                    chain: false,
                    signed_from: usize::MAX,
                },
                DotPlan::chain(k, n),
                DotPlan::chain(k, n).signed_from(n / 2),
                // Two and four partial sums, chunks with and without a
                // tail (four: chunks too short for `dot_t4`).
                DotPlan {
                    tile_k: 2,
                    tiles: vec![(0, n, 32)],
                    chain: false,
                    signed_from: usize::MAX,
                },
                DotPlan {
                    tile_k: 2,
                    tiles: vec![(0, n, 10)],
                    chain: false,
                    signed_from: usize::MAX,
                },
                DotPlan {
                    tile_k: 4,
                    tiles: vec![(0, n, 12)],
                    chain: false,
                    signed_from: usize::MAX,
                },
            ];
            for p in &plans {
                assert_reference_bits((&x, (k, 1)), &y, (m, k, n), p);
            }
        }
    }

    /// Chains longer than a piece (`run_long_chain`): the bits of the whole
    /// chain, per-output reference, for A row-major and transposed, a
    /// partial last piece and a partial last panel, signed columns, on one
    /// thread and on the pool.
    #[test]
    fn long_chains_in_pieces_give_the_reference_bits() {
        for (m, k, n) in [(600, 4100, 70), (130, 4096, 300), (7, 1025, 64)] {
            let long = super::is_long_chain(&DotPlan::chain(k, n), (m, k, n));
            assert_eq!(long, m > 7, "{m}x{k}x{n}");
            let x: Vec<f32> = (0..m * k)
                .map(|i| match i % 17 {
                    0 => -0.0,
                    _ => ((i * 7919) % 113) as f32 / 17.0 - 3.0,
                })
                .collect();
            let xt: Vec<f32> = (0..k * m).map(|i| x[(i % m) * k + i / m]).collect();
            let y: Vec<f32> = (0..k * n)
                .map(|i| ((i * 104729) % 97) as f32 / 13.0 - 3.5)
                .collect();
            // Whole chains, and chains in chunks of 320 or 296 terms (Eigen's
            // blocks), the pieces then cut at chunk boundaries.
            let chunked = |kc: usize| DotPlan {
                tiles: vec![(0, n, kc)],
                ..DotPlan::chain(k, n)
            };
            for p in [
                DotPlan::chain(k, n),
                DotPlan::chain(k, n).signed_from(n / 2),
                chunked(320),
                chunked(296),
            ] {
                assert_eq!(super::is_long_chain(&p, (m, k, n)), m > 7);
                for a in [(&x[..], (k, 1)), (&xt[..], (1, m))] {
                    assert_reference_bits(a, &y, (m, k, n), &p);
                }
            }
        }
    }

    /// One to three rows on the pool (`few_rows_on_pool`): the bits of the
    /// per-output reference for chains, signed columns and column tiles
    /// with chunks of their own, cut across the threads' ranges.
    #[test]
    fn few_rows_on_the_pool_give_the_reference_bits() {
        for (m, k, n) in [(1, 1000, 2100), (2, 600, 1801), (3, 999, 1000)] {
            assert!(m * k * n >= super::PARALLEL_THRESHOLD);
            let x: Vec<f32> = (0..m * k)
                .map(|i| ((i * 7919) % 113) as f32 / 17.0 - 3.0)
                .collect();
            let y: Vec<f32> = (0..k * n)
                .map(|i| match i % 11 {
                    0 => -0.0,
                    _ => ((i * 104729) % 97) as f32 / 13.0 - 3.5,
                })
                .collect();
            let plans = [
                DotPlan::chain(k, n),
                DotPlan::chain(k, n).signed_from(n / 2),
                DotPlan {
                    tile_k: 1,
                    tiles: vec![(0, n / 3, 128), (n / 3, n, 64)],
                    chain: false,
                    signed_from: usize::MAX,
                },
            ];
            for p in &plans {
                assert_reference_bits((&x, (k, 1)), &y, (m, k, n), p);
            }
        }
    }

    /// B of one whole panel's width, read in place, gives the bits of B
    /// packed: every width from one vector to four, chunked or not.
    #[test]
    fn b_read_as_its_own_panel_equals_b_packed() {
        fn check<const NV: usize>(m: usize, k: usize, kc: usize) {
            let n = NV * 16;
            let x: Vec<f32> = (0..m * k)
                .map(|i| ((i * 7919) % 113) as f32 / 17.0 - 3.0)
                .collect();
            let y: Vec<f32> = (0..k * n)
                .map(|i| ((i * 104729) % 97) as f32 / 13.0 - 3.5)
                .collect();
            let plan = DotPlan {
                tile_k: 1,
                tiles: vec![(0, n, kc)],
                chain: false,
                signed_from: usize::MAX,
            };
            let run = |in_place| {
                let mut out = vec![f32::NAN; m * n];
                let args = (&x[..], (k, 1), &y[..], (n, 1), (m, k, n), &plan);
                run_body::<1, 4, NV>(args, &mut out, &mut Vec::new(), rows::<1, 4, NV>, in_place);
                out.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
            };
            assert_eq!(run(true), run(false), "{m}x{k}x{n} chunks of {kc}");
        }
        check::<1>(20, 33, 8);
        check::<2>(7, 5, 5);
        check::<3>(8, 1024, 100);
        check::<4>(13, 70, 70);
    }

    /// `pack_panel` of B stored transposed (`g @ W^T`) equals the same
    /// columns packed from B stored row-major: whole 16 x 16 tiles (in
    /// registers where AVX-512 is) and the terms and columns past them,
    /// full and partial panels, a column stride longer than `k`.
    #[test]
    fn transposed_b_packs_as_row_major_b() {
        use super::pack_panel;
        let cases: [(usize, usize, usize, usize, usize, usize); 5] = [
            (16, 16, 16, 0, 16, 16),
            (512, 130, 512, 64, 64, 64),
            (37, 70, 37, 64, 6, 64),
            (50, 100, 53, 0, 64, 64),
            (33, 40, 33, 0, 40, 48),
        ];
        for (k, n, col, c0, w, nr) in cases {
            let b: Vec<f32> = (0..k * n).map(|i| i as f32 + 0.5).collect();
            let mut bt = vec![f32::NAN; n * col];
            for p in 0..k {
                for j in 0..n {
                    bt[j * col + p] = b[p * n + j];
                }
            }
            let mut want = vec![f32::NAN; k * nr];
            let mut got = vec![f32::NAN; k * nr];
            pack_panel(&b, (n, 1), k, (c0, w), nr, &mut want);
            pack_panel(&bt, (1, col), k, (c0, w), nr, &mut got);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "k {k} n {n} columns {c0}+{w}");
        }
    }

    /// `pack_a` of A stored transposed equals the same rows packed from
    /// A stored row-major: every term, every block, zeros past the rows.
    #[test]
    fn transposed_a_packs_as_row_major_a() {
        let cases: [(usize, usize, usize, usize); 4] = [
            (20, 37, 0, 20),
            (20, 37, 6, 13),
            (512, 40, 252, 260),
            (7, 1, 0, 7),
        ];
        for (m, k, i0, rows) in cases {
            let a: Vec<f32> = (0..m * k).map(|i| i as f32 + 0.5).collect();
            let at: Vec<f32> = (0..k * m).map(|i| a[(i % m) * k + i / m]).collect();
            let blocks = rows.div_ceil(6);
            let mut want = vec![f32::NAN; blocks * 6 * k];
            let mut got = vec![f32::NAN; blocks * 6 * k];
            pack_a::<6>(&a, (k, 1), k, (i0, rows), &mut want);
            pack_a::<6>(&at, (1, m), k, (i0, rows), &mut got);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "m {m} k {k} rows {i0}+{rows}");
        }
    }
}
