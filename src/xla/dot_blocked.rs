//! The register-blocked kernels that run a [`DotPlan`]: each output summed
//! in the plan's order (see [`crate::xla::dot`]), many outputs at a time.
//!
//! B is packed first into panels of `NR` columns (`[k][NR]`, zero-padded),
//! so that the kernels read it as one contiguous stream; each panel stays
//! in cache while every block of `MR` rows of A runs over it. A block keeps
//! `T x MR x NR` accumulators (`T = tile_k` partial sums per output), in
//! vector registers: the per-output arithmetic is exactly the plan's (term
//! `p` of chunk `s..e` goes to partial sum `(p - s) % T`, every chunk is
//! reduced and added to the output so far), whatever the block shapes, the
//! loop order or the split between threads.

use std::array::from_fn;

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
const PARALLEL_THRESHOLD: usize = 2 * 1024 * 1024;

/// The column panels of `plan` for panels `nr` wide: `(c0, w, kc)`, the
/// first column, the width (at most `nr`; a panel never straddles two of
/// the plan's column tiles, whose chunks may differ) and the chunk length.
fn panels(plan: &DotPlan, nr: usize) -> impl Iterator<Item = (usize, usize, usize)> + '_ {
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
            row[..w].copy_from_slice(src);
            row[w..].fill(0.0);
        }
    } else {
        // B stored transposed (`g @ W^T`): each column contiguous; a block
        // of 16 terms at a time, so that the reads stay in a cache line.
        for row in dst.chunks_exact_mut(nr).take(k) {
            row[w..].fill(0.0);
        }
        for p0 in (0..k).step_by(L) {
            let p1 = (p0 + L).min(k);
            for j in 0..w {
                let col = (c0 + j) * sb.1;
                for p in p0..p1 {
                    dst[p * nr + j] = y[col + p * sb.0];
                }
            }
        }
    }
}

/// How a block reads its `MR` rows of A: `at(t)` is column `s + t` of the
/// block's rows, for the chunk `s..` it was made for.
trait ARows<const MR: usize> {
    fn at(&self, t: usize) -> [f32; MR];
}

/// Rows stored contiguously (A row-major): each row sliced to the chunk.
struct RowSlices<'a, const MR: usize>([&'a [f32]; MR]);

impl<const MR: usize> ARows<MR> for RowSlices<'_, MR> {
    #[inline(always)]
    fn at(&self, t: usize) -> [f32; MR] {
        from_fn(|r| self.0[r][t])
    }
}

/// Columns stored contiguously (A stored transposed, `A^T @ g`): the
/// block's `MR` rows of term `s + t` at `x[t * ld..][..MR]`.
struct ColSlices<'a> {
    x: &'a [f32],
    ld: usize,
}

impl<const MR: usize> ARows<MR> for ColSlices<'_> {
    #[inline(always)]
    fn at(&self, t: usize) -> [f32; MR] {
        self.x[t * self.ld..t * self.ld + MR]
            .try_into()
            .expect("MR rows")
    }
}

/// Any strides (and the clamped rows of a last partial block).
struct Strided<'a, const MR: usize> {
    x: &'a [f32],
    rows: [usize; MR],
    step: usize,
}

impl<const MR: usize> ARows<MR> for Strided<'_, MR> {
    #[inline(always)]
    fn at(&self, t: usize) -> [f32; MR] {
        from_fn(|r| self.x[self.rows[r] + t * self.step])
    }
}

/// One kernel call: the terms of one chunk (`b`: its rows of the packed
/// panel, `nr = NV * L` wide; `a`: its columns of A), `T` partial sums per
/// output reduced as YNNPACK reduces them. `len` is a multiple of `T` but
/// for the tail, whose missing terms leave their partial sums at `+0`
/// (YNNPACK pads them with zeros). `chain`: the first term is a plain
/// product added to these starts (XLA's own emitter, `T == 1`).
#[inline(always)]
fn kernel_call<const T: usize, const MR: usize, const NV: usize>(
    a: &impl ARows<MR>,
    b: &[f32],
    len: usize,
    chain: Option<&[V; NV]>,
) -> [[V; NV]; MR] {
    let nr = NV * L;
    let b = &b[..len * nr];
    let mut lanes = [[[[0.0f32; L]; NV]; MR]; T];
    let mut t0 = 0;
    if let (Some(starts), true) = (chain, len > 0) {
        let av = a.at(0);
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
            let av = a.at(t + q);
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
        let av = a.at(full + q);
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

/// What a block of rows reads A through, for the terms `s..e`.
#[derive(Clone, Copy)]
struct AView<'a> {
    x: &'a [f32],
    sa: (usize, usize),
}

/// Rows `i0..i0 + rows` (`rows <= MR`; a partial block repeats its last
/// row) of one panel of the output, into `o` (row-major, `n` wide, the
/// rows of this block only): every chunk of the plan, then the tail.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn block<const T: usize, const MR: usize, const NV: usize>(
    a: AView<'_>,
    panel: &[f32],
    k: usize,
    (c0, w, kc): (usize, usize, usize),
    (i0, rows): (usize, usize),
    chain: Option<usize>,
    n: usize,
    o: &mut [f32],
) {
    let nr = NV * L;
    let kmain = k / T * T;
    let starts: Option<[V; NV]> =
        chain.map(|from| from_fn(|v| from_fn(|l| chain_start(c0 + v * L + l, from))));
    let mut first = true;
    let mut s = 0;
    while s < kmain || (s < k && kmain < k) {
        let e = if s < kmain { (s + kc).min(kmain) } else { k };
        let call_chain = starts.as_ref().filter(|_| first);
        let b = &panel[s * nr..e * nr];
        let v = if rows == MR && a.sa.1 == 1 {
            let ar = RowSlices(from_fn(|r| {
                let base = (i0 + r) * a.sa.0;
                &a.x[base + s..base + e]
            }));
            kernel_call::<T, MR, NV>(&ar, b, e - s, call_chain)
        } else if rows == MR && a.sa.0 == 1 {
            let ac = ColSlices {
                x: &a.x[s * a.sa.1 + i0..],
                ld: a.sa.1,
            };
            kernel_call::<T, MR, NV>(&ac, b, e - s, call_chain)
        } else {
            let ag = Strided {
                x: a.x,
                rows: from_fn(|r| (i0 + r.min(rows - 1)) * a.sa.0 + s * a.sa.1),
                step: a.sa.1,
            };
            kernel_call::<T, MR, NV>(&ag, b, e - s, call_chain)
        };
        for (r, vr) in v.iter().enumerate().take(rows) {
            let orow = &mut o[r * n + c0..r * n + c0 + w];
            for (j, oj) in orow.iter_mut().enumerate() {
                let x = vr[j / L][j % L];
                *oj = if first { x } else { x + *oj };
            }
        }
        first = false;
        s = e;
    }
}

/// Rows `i0..i0 + rows` of the product (given as `o`, those rows only),
/// panel by panel, each panel over all the rows.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn rows_body<const T: usize, const MR: usize, const NV: usize>(
    a: AView<'_>,
    packed: &[f32],
    (k, n): (usize, usize),
    plan: &DotPlan,
    (i0, rows): (usize, usize),
    o: &mut [f32],
) {
    let nr = NV * L;
    let chain = plan.chain.then_some(plan.signed_from);
    for (panel, cols) in packed.chunks_exact(k * nr).zip(panels(plan, nr)) {
        for b0 in (0..rows).step_by(MR) {
            let br = MR.min(rows - b0);
            block::<T, MR, NV>(
                a,
                panel,
                k,
                cols,
                (i0 + b0, br),
                chain,
                n,
                &mut o[b0 * n..(b0 + br) * n],
            );
        }
    }
}

/// The kernel shape for a plan: `tile_k` and the panel width in vectors
/// (`NV`); every shape keeps 16 accumulator vectors (4 rows).
fn shape(plan: &DotPlan) -> (usize, usize) {
    let widest = plan.tiles.iter().map(|&(j0, j1, _)| j1 - j0).max();
    let want = widest.unwrap_or(1).div_ceil(L);
    let nv = match plan.tile_k {
        1 => want.clamp(1, 4),
        2 => want.clamp(1, 2),
        _ => 1,
    };
    let nv = if nv == 3 { 4 } else { nv };
    (plan.tile_k.clamp(1, 4), nv)
}

/// Rows of a block.
const MR: usize = 4;

#[inline(always)]
fn rows_dispatch(
    a: AView<'_>,
    packed: &[f32],
    kn: (usize, usize),
    plan: &DotPlan,
    r: (usize, usize),
    o: &mut [f32],
) {
    match shape(plan) {
        (1, 1) => rows_body::<1, MR, 1>(a, packed, kn, plan, r, o),
        (1, 2) => rows_body::<1, MR, 2>(a, packed, kn, plan, r, o),
        (1, _) => rows_body::<1, MR, 4>(a, packed, kn, plan, r, o),
        (2, 1) => rows_body::<2, MR, 1>(a, packed, kn, plan, r, o),
        (2, _) => rows_body::<2, MR, 2>(a, packed, kn, plan, r, o),
        _ => rows_body::<4, MR, 1>(a, packed, kn, plan, r, o),
    }
}

/// [`rows_dispatch`] compiled for AVX-512 with FMA.
///
/// # Safety
///
/// The CPU must support AVX-512F and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
unsafe fn rows_avx512(
    a: AView<'_>,
    packed: &[f32],
    kn: (usize, usize),
    plan: &DotPlan,
    r: (usize, usize),
    o: &mut [f32],
) {
    rows_dispatch(a, packed, kn, plan, r, o)
}

/// [`rows_dispatch`] compiled for AVX2 with FMA.
///
/// # Safety
///
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn rows_avx2(
    a: AView<'_>,
    packed: &[f32],
    kn: (usize, usize),
    plan: &DotPlan,
    r: (usize, usize),
    o: &mut [f32],
) {
    rows_dispatch(a, packed, kn, plan, r, o)
}

/// Rows `r.0 .. r.0 + r.1` of the product, with the fastest code this CPU
/// runs (all variants compute the same bits: `mul_add` is exactly rounded).
fn rows(
    a: AView<'_>,
    packed: &[f32],
    kn: (usize, usize),
    plan: &DotPlan,
    r: (usize, usize),
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
            unsafe { rows_avx512(a, packed, kn, plan, r, o) };
            return;
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the CPU supports AVX2 and FMA, checked just above; that
            // is the only requirement of `rows_avx2`, whose body is safe code.
            unsafe { rows_avx2(a, packed, kn, plan, r, o) };
            return;
        }
    }
    rows_dispatch(a, packed, kn, plan, r, o)
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
    (m, k, n): (usize, usize, usize),
    plan: &DotPlan,
    out: &mut [f32],
    packed: &mut Vec<f32>,
) {
    debug_assert!(out.len() == m * n);
    let nr = shape(plan).1 * L;
    let count = panels(plan, nr).count();
    packed.clear();
    packed.resize(count * k * nr, 0.0);
    let a = AView { x, sa };
    let parallel = m * n * k >= PARALLEL_THRESHOLD;
    if !parallel {
        for (dst, (c0, w, _)) in packed.chunks_exact_mut(k * nr).zip(panels(plan, nr)) {
            pack_panel(y, sb, k, (c0, w), nr, dst);
        }
        rows(a, packed, (k, n), plan, (0, m), out);
        return;
    }
    use rayon::prelude::*;
    packed
        .par_chunks_mut(k * nr)
        .enumerate()
        .for_each(|(i, dst)| {
            let (c0, w, _) = panels(plan, nr).nth(i).expect("a panel");
            pack_panel(y, sb, k, (c0, w), nr, dst);
        });
    let tasks = 2 * rayon::current_num_threads();
    let per = m.div_ceil(tasks).next_multiple_of(MR);
    let packed = &packed[..];
    out.par_chunks_mut(per * n)
        .enumerate()
        .for_each(|(t, o)| rows(a, packed, (k, n), plan, (t * per, o.len() / n), o));
}
