//! The runner shared by the AVX-512 kernels that pack B as they read it
//! (one partial sum per output, [`super::dot_avx512::panel_t1`]; four,
//! [`super::dot_t4::panel_t4`]): the rows cut into one share per thread,
//! as many rows each, every share running every panel of B, a panel
//! packed by the first share that reaches it as its first block of rows
//! reads it.
//!
//! Each output is summed by the kernel alone, whatever the share, the
//! slab or the block it falls in, so the bits do not depend on the split.

use std::sync::{Mutex, OnceLock};

use smallvec::SmallVec;

use super::dot_avx512::PanelRows;
use super::dot_blocked::{aligned_scratch, panels, slab_rows, Operands, PARALLEL_THRESHOLD};

/// A kernel that runs one panel of B over a slab of rows of A, reading the
/// panel packed, in B itself, or in B while packing it ([`PanelRows`]).
pub(crate) trait PanelKernel: 'static {
    /// Rows per block: slabs are whole blocks.
    const MR: usize;
    /// Columns per panel.
    const NR: usize;
    /// Whether a share that finds a panel being packed by another reads
    /// B in place at once (reading B in place costs the kernel little), or
    /// runs its other panels first and reads the panel packed then (in
    /// place only if it is still being packed).
    const IN_PLACE_AT_ONCE: bool;
    /// A slab's rows of A as the kernel reads them.
    type Rows<'a>;
    /// Floats of one packed panel of `k` terms.
    fn panel_len(k: usize) -> usize;
    /// Floats of scratch [`PanelKernel::rows`] takes for `rows` rows of A
    /// (strides `sa`, `k` terms).
    fn a_len(rows: usize, sa: (usize, usize), k: usize) -> usize;
    /// Packs columns `c0..c0 + w` of B (`[k, n]` in `y`, strides `sb`)
    /// into `dst` (`panel_len(k)` floats).
    fn pack_panel(y: &[f32], sb: (usize, usize), k: usize, cols: (usize, usize), dst: &mut [f32]);
    /// Whether the kernel reads a panel `w` wide in B itself (B's strides
    /// `sb`, `n` columns), as [`PanelRows::InPlace`] and
    /// [`PanelRows::Packing`], rows `sb.0` apart.
    fn reads_rows(sb: (usize, usize), n: usize, w: usize) -> bool;
    /// Rows `i0..i0 + rows` of A (`x`, strides `sa`, `k` terms), packed
    /// into `scratch` if the kernel needs them packed.
    fn rows<'a>(
        x: &'a [f32],
        sa: (usize, usize),
        k: usize,
        rows: (usize, usize),
        scratch: &'a mut [f32],
    ) -> Self::Rows<'a>;
    /// Columns `cols = (c0, w, kc)` of the `rows` rows of `a` into `o`
    /// (row-major, `n` wide, the slab's rows only), B's rows of the panel
    /// from `b`; `chain`: as `DotPlan::chain`, signed from that column.
    ///
    /// # Safety
    ///
    /// The CPU must support AVX-512F and FMA.
    #[allow(clippy::too_many_arguments)]
    unsafe fn panel(
        a: &Self::Rows<'_>,
        b: PanelRows<'_>,
        kn: (usize, usize),
        cols: (usize, usize, usize),
        chain: Option<usize>,
        rows: usize,
        o: &mut [f32],
    );
}

/// `out = a @ b` on kernel `K`, B packed panel by panel. Every share of
/// rows (one per thread, as many rows each: 128 rows split 64 / 64, each
/// block as high as its rows) runs every panel, starting at a different
/// one; a panel is packed by the first share that reaches it, as its
/// first block of rows reads the panel (see [`PanelRows::Packing`]) where
/// the kernel reads B in place (`K::reads_rows`); a share that reaches a
/// panel still being packed does not wait: it reads B in place, at once
/// or after its other panels (see [`PanelKernel::IN_PLACE_AT_ONCE`]). Panels
/// the kernel cannot read in place are packed first, by whichever share
/// needs them first (the others wait). On one thread, the panels are
/// packed in the same way by the first slab of rows (see
/// [`super::dot_blocked::slab_rows`]).
///
/// # Safety
///
/// The CPU must support AVX-512F and FMA.
pub(crate) unsafe fn run_panels<K: PanelKernel>(
    args: Operands<'_>,
    out: &mut [f32],
    packed: &mut Vec<f32>,
) {
    let (x, sa, y, sb, (m, k, n), plan) = args;
    let threads = if m * n * k >= PARALLEL_THRESHOLD {
        rayon::current_num_threads().max(1)
    } else {
        1
    };
    let per = m.div_ceil(threads);
    let shares = m.div_ceil(per);
    let slab = slab_rows(K::MR, k, n);
    let count = panels(plan, K::NR).count();
    let (plen, a_len) = (K::panel_len(k), K::a_len(per.min(slab), sa, k));
    let need_b = count * plen;
    let (bpack, apack) = aligned_scratch(packed, need_b + shares * a_len).split_at_mut(need_b);
    let chain = plan.chain.then_some(plan.signed_from);
    let slabs = |rows, scratch: &mut [f32], o: &mut [f32], each: Each<'_, K>| {
        by_slabs::<K>((x, sa), (k, n), slab, rows, (scratch, o), each)
    };
    if shares == 1 {
        // One thread: the first slab packs the panels as it runs them, the
        // others read them packed.
        let mut first_slab = true;
        slabs((0, m), apack, out, &mut |a, rows, o| {
            for (dst, cols) in bpack.chunks_exact_mut(plen).zip(panels(plan, K::NR)) {
                let (c0, w, _) = cols;
                let b = if !first_slab {
                    PanelRows::Packed(dst)
                } else if K::reads_rows(sb, n, w) {
                    PanelRows::Packing(&y[c0..], sb.0, dst)
                } else {
                    K::pack_panel(y, sb, k, (c0, w), dst);
                    PanelRows::Packed(dst)
                };
                // SAFETY: the caller's contract (AVX-512F and FMA).
                unsafe { K::panel(a, b, (k, n), cols, chain, rows, o) };
            }
            first_slab = false;
        });
        return;
    }
    let states: SmallVec<[PanelState<'_>; 16]> = bpack
        .chunks_exact_mut(plen)
        .zip(panels(plan, K::NR))
        .map(|(dst, cols)| PanelState {
            dst: Mutex::new(Some(dst)),
            packed: OnceLock::new(),
            cols,
        })
        .collect();
    let work = |(t, (o, scratch)): (usize, (&mut [f32], &mut [f32]))| {
        let rows = o.len() / n;
        let first = t * count / shares;
        slabs((t * per, rows), scratch, o, &mut |a, rows, o| {
            let mut later: SmallVec<[usize; 16]> = SmallVec::new();
            let order = (0..count).map(|i| (first + i) % count);
            for (i, st) in order.map(|i| (i, &states[i])) {
                let (c0, w, _) = st.cols;
                let take = || st.dst.lock().unwrap_or_else(|e| e.into_inner()).take();
                let b = match (st.packed.get(), K::reads_rows(sb, n, w)) {
                    (Some(b), _) => PanelRows::Packed(b),
                    (None, true) => match take() {
                        Some(dst) => {
                            let rows_of_b = PanelRows::Packing(&y[c0..], sb.0, &mut *dst);
                            // SAFETY: the caller's contract (AVX-512F and
                            // FMA).
                            unsafe { K::panel(a, rows_of_b, (k, n), st.cols, chain, rows, o) };
                            let _ = st.packed.set(dst);
                            continue;
                        }
                        None if K::IN_PLACE_AT_ONCE => PanelRows::InPlace(&y[c0..], sb.0),
                        None => {
                            later.push(i);
                            continue;
                        }
                    },
                    (None, false) => PanelRows::Packed(st.packed.get_or_init(|| {
                        let dst = take().expect("a panel is packed once");
                        K::pack_panel(y, sb, k, (c0, w), dst);
                        dst
                    })),
                };
                // SAFETY: as above.
                unsafe { K::panel(a, b, (k, n), st.cols, chain, rows, o) };
            }
            for st in later.iter().map(|&i| &states[i]) {
                let b = match st.packed.get() {
                    Some(b) => PanelRows::Packed(b),
                    None => PanelRows::InPlace(&y[st.cols.0..], sb.0),
                };
                // SAFETY: as above.
                unsafe { K::panel(a, b, (k, n), st.cols, chain, rows, o) };
            }
        });
    };
    // A share of the scratch for A per share of rows (none where the
    // kernel reads A in place).
    let mut rest = apack;
    let scratches = (0..shares).map(move |_| {
        let (a, tail) = std::mem::take(&mut rest).split_at_mut(a_len);
        rest = tail;
        a
    });
    let items = out.chunks_mut(per * n).zip(scratches);
    crate::pool::share_out(items.enumerate(), work);
}

/// What [`by_slabs`] runs on each slab: `(a, rows, o)`.
type Each<'e, K> = &'e mut dyn FnMut(&<K as PanelKernel>::Rows<'_>, usize, &mut [f32]);

/// Runs `each` on rows `i0..i0 + rows` of A (`x`, strides `sa`, `k`
/// terms; outputs `n` wide in `o`) slab by slab (`slab` rows, see
/// [`slab_rows`]), each slab's rows prepared by `K::rows` in `scratch`
/// just before its run.
fn by_slabs<K: PanelKernel>(
    (x, sa): (&[f32], (usize, usize)),
    (k, n): (usize, usize),
    slab: usize,
    (i0, rows): (usize, usize),
    (scratch, o): (&mut [f32], &mut [f32]),
    each: Each<'_, K>,
) {
    for start in (0..rows).step_by(slab) {
        let r = slab.min(rows - start);
        let a = K::rows(x, sa, k, (i0 + start, r), &mut *scratch);
        each(&a, r, &mut o[start * n..(start + r) * n]);
    }
}

/// One panel of B in [`run_panels`]: where it is packed until it is, its
/// packed values once they are, and its columns `(c0, w, kc)`.
struct PanelState<'a> {
    dst: Mutex<Option<&'a mut [f32]>>,
    packed: OnceLock<&'a [f32]>,
    cols: (usize, usize, usize),
}
