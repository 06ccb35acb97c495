//! Window sums as XLA:CPU computes `lax.reduce_window(x, 0., add, ...)`
//! (what `flax.linen.avg_pool` sums), and the cotangent of such a sum,
//! measured against jaxlib 0.10.2 on a Zen 4 with 2 CPUs (probe of 301
//! configurations `[2,H,W,C]`, C in 1, 3, 4, 8, 16 and 17, windows 2x2 to
//! 7x7 and 1x3, strides equal to the window, 1 and 2, VALID and SAME, plus
//! 1-D, 3-D and large cases: 0 outputs differ; XLA's choice of back end
//! read from `compile().as_text()`, the loop orders from the optimized
//! LLVM IR that `--xla_dump_to` writes).
//!
//! No HLO pass rewrites an add `reduce-window`; XLA runs it one of two ways:
//!
//! - **YNNPACK** ([`uses_ynn`]): windows that do not overlap, from 4,096
//!   input or output elements. YNNPACK pads the input with zeros, reads it
//!   through a stencil (a new axis after each windowed one: `[N,H,W,C]` as
//!   `[N,Ho,kh,Wo,kw,C]`, a strided view of the padded input, not a dense
//!   copy) and reduces the new axes by its sum ([`ynn_sum_strided`]). The
//!   view matters where VALID drops columns (`W != Wo * kw`: 356 of 8,192
//!   outputs differ for a `[32,8,8,16]` 7x7 pool summed as a dense copy).
//! - **XLA's loop** (every other case, overlapping windows always): one
//!   output at a time, the window's loops (its axes longer than 1) nested
//!   in row-major order around an accumulator from `+0`, padding positions
//!   skipped. XLA's emitter may peel one window loop's last iteration
//!   ([`peeled_loop`]); each add is `fadd reassoc`, and LLVM, after
//!   unrolling the innermost window loop, vectorizes 2x2 blocks
//!   ([`window_sum`]); all others are summed left to right.
//!
//! The cotangent ([`window_sums_transpose`]) is another `reduce-window`
//! (of the output's cotangent, dilated by the strides), always a loop.

use smallvec::SmallVec;

use super::reduce::vector_nest;
use super::ynn_reduce::{ynn_sum_strided, YNN_MIN};

type Dims = SmallVec<[usize; 8]>;

/// The largest rank plus number of windowed axes YNNPACK's reduce-window
/// takes (`IsReduceLikeOpSupportedByYnn`).
const YNN_MAX_RANK: usize = 8;

/// The output extents of windows `window` at `strides` over `shape` padded
/// by `pads` (0 where the padded input is shorter than the window).
pub(crate) fn window_out_shape(
    shape: &[usize],
    window: &[usize],
    strides: &[usize],
    pads: &[(usize, usize)],
) -> Dims {
    (0..shape.len())
        .map(|a| {
            let padded = shape[a] + pads[a].0 + pads[a].1;
            if padded >= window[a] {
                (padded - window[a]) / strides[a] + 1
            } else {
                0
            }
        })
        .collect()
}

/// Whether XLA hands a `reduce-window` add of `f32` to YNNPACK
/// (`xla/backends/cpu/ynn_support.cc`: `IsReduceLikeOpSupportedByYnn` and
/// `IsInstructionPreferredByYnn`, checked against the compiled HLO): every
/// window axis longer than 1 has a stride equal to its size (no overlap;
/// axes of 1 may have any stride), some axis is windowed (longer than 1
/// or strided), the HLO's rank (`hlo_rank`, which counts every batch
/// axis where flaxen flattens them into one) plus the windowed axes is at
/// most 8, and the input or the output has at least 4,096 elements.
pub(crate) fn uses_ynn(
    shape: &[usize],
    window: &[usize],
    strides: &[usize],
    pads: &[(usize, usize)],
    hlo_rank: usize,
) -> bool {
    let windowed = (0..shape.len())
        .filter(|&a| window[a] > 1 || strides[a] > 1)
        .count();
    let overlap = (0..shape.len()).any(|a| window[a] > 1 && strides[a] != window[a]);
    let out: usize = window_out_shape(shape, window, strides, pads)
        .iter()
        .product();
    windowed > 0
        && !overlap
        && hlo_rank + windowed <= YNN_MAX_RANK
        && (shape.iter().product::<usize>() >= YNN_MIN || out >= YNN_MIN)
}

/// Row-major strides (elements) of `shape`.
pub(crate) fn row_major_strides(shape: &[usize]) -> Dims {
    let mut s: Dims = smallvec::smallvec![1; shape.len()];
    for a in (0..shape.len().saturating_sub(1)).rev() {
        s[a] = s[a + 1] * shape[a + 1];
    }
    s
}

/// Steps a row-major multi-index over `extents`; false after the last.
pub(crate) fn next_index(index: &mut [usize], extents: &[usize]) -> bool {
    for a in (0..index.len()).rev() {
        index[a] += 1;
        if index[a] < extents[a] {
            return true;
        }
        index[a] = 0;
    }
    false
}

/// The sums of the windows of row-major `x` (`shape`): for each output
/// position (row-major, extents [`window_out_shape`]) the sum of the
/// `window` elements starting at `position * strides - pads.0`, padding
/// read as zeros; in XLA:CPU's order (see the module's documentation).
/// `hlo_rank` is the rank of the array in JAX's program ([`uses_ynn`]).
/// Into `out` (every element written); `scratch` has at least
/// [`window_sums_scratch`] elements.
#[allow(clippy::too_many_arguments)]
pub(crate) fn window_sums_into(
    x: &[f32],
    shape: &[usize],
    window: &[usize],
    strides: &[usize],
    pads: &[(usize, usize)],
    hlo_rank: usize,
    out: &mut [f32],
    scratch: &mut [f32],
) {
    if uses_ynn(shape, window, strides, pads, hlo_rank) {
        ynn_window_sums(x, shape, window, strides, pads, out, scratch)
    } else {
        loop_window_sums(x, shape, window, strides, pads, out)
    }
}

/// The scratch [`window_sums_into`] needs: YNNPACK's padded input.
pub(crate) fn window_sums_scratch(
    shape: &[usize],
    window: &[usize],
    strides: &[usize],
    pads: &[(usize, usize)],
    hlo_rank: usize,
) -> usize {
    if uses_ynn(shape, window, strides, pads, hlo_rank) {
        padded_len(shape, pads)
    } else {
        0
    }
}

/// The elements of `shape` padded by `pads`.
pub(crate) fn padded_len(shape: &[usize], pads: &[(usize, usize)]) -> usize {
    (0..shape.len())
        .map(|a| shape[a] + pads[a].0 + pads[a].1)
        .product()
}

/// `x` (row-major, `shape`) padded by `pads` with `fill` into `xp` (of at
/// least [`padded_len`] elements), and the padded array's row-major
/// strides.
pub(crate) fn padded_input_into(
    x: &[f32],
    shape: &[usize],
    pads: &[(usize, usize)],
    fill: f32,
    xp: &mut [f32],
) -> Dims {
    let r = shape.len();
    let padded: Dims = (0..r).map(|a| shape[a] + pads[a].0 + pads[a].1).collect();
    let xp = &mut xp[..padded.iter().product()];
    xp.fill(fill);
    let p_strides = row_major_strides(&padded);
    if x.is_empty() {
        return p_strides;
    }
    if r == 0 {
        xp.copy_from_slice(x);
        return p_strides;
    }
    let last = r - 1;
    let mut index: Dims = smallvec::smallvec![0; last];
    for row in x.chunks_exact(shape[last]) {
        let at: usize = (0..last)
            .map(|a| (index[a] + pads[a].0) * p_strides[a])
            .sum::<usize>()
            + pads[last].0;
        xp[at..at + row.len()].copy_from_slice(row);
        next_index(&mut index, &shape[..last]);
    }
    p_strides
}

/// YNNPACK's window sums: the input padded with zeros, read as the
/// stencil's strided view (each windowed axis `a` as an axis of the
/// outputs, `strides[a]` padded rows apart, then one of the window, a
/// padded row apart), the window axes reduced by [`ynn_sum_strided`].
fn ynn_window_sums(
    x: &[f32],
    shape: &[usize],
    window: &[usize],
    strides: &[usize],
    pads: &[(usize, usize)],
    out: &mut [f32],
    scratch: &mut [f32],
) {
    let r = shape.len();
    let padded: Dims = (0..r).map(|a| shape[a] + pads[a].0 + pads[a].1).collect();
    let out_shape = window_out_shape(shape, window, strides, pads);
    if out.is_empty() {
        return;
    }
    let xp = &mut scratch[..padded.iter().product()];
    let p_strides = padded_input_into(x, shape, pads, 0.0, xp);
    let mut v_shape: Dims = SmallVec::new();
    let mut v_strides: Dims = SmallVec::new();
    let mut axes = 0u32;
    for a in 0..r {
        if window[a] > 1 || strides[a] > 1 {
            v_shape.extend([out_shape[a], window[a]]);
            v_strides.extend([p_strides[a] * strides[a], p_strides[a]]);
            axes |= 1 << (v_shape.len() - 1);
        } else {
            v_shape.push(padded[a]);
            v_strides.push(p_strides[a]);
        }
    }
    ynn_sum_strided(xp, &v_shape, &v_strides, axes, out);
}

/// XLA's loop: one window at a time, its valid elements gathered row-major
/// over the window axes (those longer than 1) and summed by
/// [`window_sum`]. An axis of a window of 1 reads one position (`+0` at a
/// padding position).
fn loop_window_sums(
    x: &[f32],
    shape: &[usize],
    window: &[usize],
    strides: &[usize],
    pads: &[(usize, usize)],
    out: &mut [f32],
) {
    let r = shape.len();
    let out_shape = window_out_shape(shape, window, strides, pads);
    if out.is_empty() {
        return;
    }
    let mut outs = out.iter_mut();
    let x_strides = row_major_strides(shape);
    let loops: Dims = (0..r).filter(|&a| window[a] > 1).collect();
    // Each window loop's element stride in the input, and its full extent.
    let inner: Dims = loops.iter().map(|&a| x_strides[a]).collect();
    let full: Dims = loops.iter().map(|&a| window[a]).collect();
    // The padding the windows read: LLVM drops a bounds check that can
    // never fail, so high padding past the last window does not count.
    let reached = reached_pads(shape, window, strides, pads, &out_shape);
    let split = peeled_loop(&loops, window, |a| {
        let (lo, hi) = reached[a];
        (lo > 0 || hi > 0, lo > 0 || hi > 1)
    });
    let checked: SmallVec<[bool; 8]> = loops
        .iter()
        .enumerate()
        .map(|(k, &a)| reached[a] != (0, 0) && Some(k) != split)
        .collect();
    let geometry = Geometry {
        full: &full,
        checked: &checked,
        inner: &inner,
    };
    let mut index: Dims = smallvec::smallvec![0; r];
    let mut block: SmallVec<[f32; 64]> = SmallVec::new();
    let mut ranges: SmallVec<[(usize, usize); 8]> = SmallVec::new();
    loop {
        // The window's first element and its valid range on each loop.
        let mut base = 0usize;
        let mut inside = true;
        ranges.clear();
        for a in 0..r {
            let start = (index[a] * strides[a]) as isize - pads[a].0 as isize;
            let lo = start.max(0) as usize;
            let hi = ((start + window[a] as isize).max(0) as usize)
                .min(shape[a])
                .max(lo);
            if window[a] > 1 {
                ranges.push((lo, hi));
            } else if lo < hi {
                base += lo * x_strides[a];
            } else {
                inside = false;
            }
        }
        let mut ext: Dims = ranges.iter().map(|&(lo, hi)| hi - lo).collect();
        let o = outs.next().expect("one output per window");
        if !inside || ext.contains(&0) {
            *o = 0.0;
        } else {
            block.clear();
            for (k, &(lo, _)) in ranges.iter().enumerate() {
                base += lo * inner[k];
            }
            let mut at: Dims = smallvec::smallvec![0; ranges.len()];
            loop {
                let offset: usize = at.iter().zip(&inner).map(|(i, s)| i * s).sum();
                block.push(x[base + offset]);
                if !next_index(&mut at, &ext) {
                    break;
                }
            }
            *o = window_sum(&block, &mut ext, split, &geometry);
        }
        if !next_index(&mut index, &out_shape) {
            return;
        }
    }
}

/// The window loop (an index into `loops`, outermost first) whose last
/// iteration XLA's emitter peels off into a loop of its own, if any. XLA
/// peels the loops of a reduce-window's window, innermost first while the
/// loops seen so far make fewer than 64 iterations, at the first loop whose
/// bounds check goes away without its last iteration: one of 2 iterations
/// (its first then reads one position, checked against the output index
/// alone), or one whose check only its last iteration can fail. One loop
/// at most (measured: the `--xla_dump_to` LLVM IR before optimization of
/// 15 windows 2x2 to 3x4, strides 1 and 2, low and high padding on either
/// axis; the rule of the `xla.loop` peeling pass of XLA's emitters, which
/// here stops after one).
///
/// `checks(a)`: whether the loop over window axis `a` has a bounds check
/// with all its iterations, and without its last.
fn peeled_loop(
    loops: &[usize],
    window: &[usize],
    checks: impl Fn(usize) -> (bool, bool),
) -> Option<usize> {
    /// The emitter peels within the innermost loops of fewer than this
    /// many iterations together.
    const PEEL_ITERATIONS: usize = 64;
    let mut iterations = 1usize;
    for k in (0..loops.len()).rev() {
        if iterations >= PEEL_ITERATIONS {
            break;
        }
        let a = loops[k];
        iterations *= window[a];
        let (checked, still_checked) = checks(a);
        if checked && !(window[a] > 2 && still_checked) {
            return Some(k);
        }
    }
    None
}

/// The padding that some window of `out_shape` reads, per axis: all of
/// the low padding (the first window starts there), and of the high
/// padding only what the last window reaches. With `strides` above 1 the
/// last window can stop short of the high padding (`[9]` padded `(0, 1)`
/// by windows of 3 at stride 2: the last covers 6 to 8), and XLA's loop
/// then has no bounds check on that axis (measured: the optimized LLVM IR
/// of a `[3, 9, 9, 4]` pool padded `((1, 2), (0, 1))` sums its 3x3 windows
/// left to right, checking the rows only).
fn reached_pads(
    shape: &[usize],
    window: &[usize],
    strides: &[usize],
    pads: &[(usize, usize)],
    out_shape: &[usize],
) -> SmallVec<[(usize, usize); 8]> {
    (0..shape.len())
        .map(|a| {
            let (lo, hi) = pads[a];
            let end = out_shape[a].saturating_sub(1) * strides[a] + window[a];
            (lo, hi.min(end.saturating_sub(lo + shape[a])))
        })
        .collect()
}

/// The window loops of XLA's reduce-window loop: their full extents, which
/// keep their bounds checks, and their element strides in the input.
struct Geometry<'a> {
    full: &'a [usize],
    checked: &'a [bool],
    inner: &'a [usize],
}

/// One window's sum from `+0`: its valid elements `block` (row-major,
/// `ext`, one extent per window loop) in the order of XLA's loop as LLVM
/// compiles it (read from the optimized IR; `reassoc` lets LLVM reorder).
///
/// - The window loop XLA's emitter peels (`split`, [`peeled_loop`]: for
///   instance one padded `(0, 1)`, SAME at stride 1, or any padded loop
///   of 2) has its last iteration in a loop of its own: a window of its
///   full extent sums positions `0..k-1` of that axis first, then
///   position `k-1` (left to right if that axis is one of the two
///   innermost loops, else as the rest). For a 2x2 window at stride 1
///   that is column-major.
/// - Otherwise [`nest_sum`].
fn window_sum(block: &[f32], ext: &mut [usize], split: Option<usize>, g: &Geometry<'_>) -> f32 {
    let Some(axis) = split else {
        return nest_sum(0.0, block, ext, g);
    };
    let n = ext[axis];
    let head = n.min(g.full[axis] - 1);
    let inner: usize = ext[axis + 1..].iter().product();
    let part = |start: usize, end: usize| -> SmallVec<[f32; 64]> {
        block
            .chunks_exact(n * inner)
            .flat_map(|c| &c[start * inner..end * inner])
            .copied()
            .collect()
    };
    // The two innermost loops (extents longer than 1).
    let vector_loop = (0..ext.len())
        .rev()
        .filter(|&a| ext[a] != 1)
        .take(2)
        .any(|a| a == axis);
    let first = part(0, head);
    ext[axis] = head;
    let mut acc = nest_sum(0.0, &first, ext, g);
    if n == g.full[axis] {
        let last = part(head, n);
        ext[axis] = n - head;
        acc = if vector_loop {
            last.iter().fold(acc, |a, &v| a + v)
        } else {
            nest_sum(acc, &last, ext, g)
        };
    }
    ext[axis] = n;
    acc
}

/// `acc` plus a block (row-major, `ext`) summed by the loop nest: left to
/// right, except that LLVM vectorizes the second-innermost loop with 2
/// lanes when it and the innermost have 2 iterations each, it keeps no
/// bounds check, and its rows are a power of two elements apart in the
/// input (measured: strides 16 and 32 vectorized; 24, 36, 48, 56 and 80
/// not; no other window shape, 4x4, 2x4 or 8x8, ever was): lane 0 takes
/// the first row from `acc`, lane 1 the second from `-0`, then lane 0 plus
/// lane 1 ([`vector_nest`]); outer loops run in order around that.
fn nest_sum(acc: f32, block: &[f32], ext: &[usize], g: &Geometry<'_>) -> f32 {
    let loops: SmallVec<[(usize, bool, usize); 8]> = (0..ext.len())
        .filter(|&k| ext[k] != 1)
        .map(|k| (ext[k], g.checked[k], g.inner[k]))
        .collect();
    let [.., (b, b_checked, b_stride), (c, _, _)] = loops[..] else {
        return block.iter().fold(acc, |a, &v| a + v);
    };
    if b_checked || b != 2 || c != 2 || !b_stride.is_power_of_two() {
        return block.iter().fold(acc, |a, &v| a + v);
    }
    vector_nest(acc, block, (b, c, 2), |lane, x| lane + x)
}

/// The cotangent of [`window_sums`]: for each input element (row-major,
/// `shape`), the sum from `+0` of the cotangents `g` (extents
/// [`window_out_shape`]) of the windows that contain it. JAX transposes
/// the sum into a `pad` of `g` (dilated by the strides) and another
/// `reduce-window` (windows of the same size at stride 1), which XLA always
/// runs as its loop.
///
/// - Eagerly the pad runs on its own, and the windows are summed in
///   row-major order of their output positions (measured: 12 cases, 0
///   differ).
/// - Jitted (`jitted`), XLA folds the pad into the reduce-window's
///   padding and input dilation, and its emitter may peel the last
///   iteration of one window loop ([`peeled_loop`]): the windows whose
///   position on that axis is the last (the largest output index, when it
///   is a window's) come after all the others, each part in row-major
///   order. A loop's bounds check is there if the folded padding is (the
///   forward's low padding short of `k - 1`, or its high side) or the
///   input is dilated (strides above 1, whose holes are checked), so the
///   loops of 2 are peeled unless the forward's padding was `k - 1` on
///   both ends at stride 1 (measured: 2-D windows 2x2, 3x2, 4x2 at stride 1
///   VALID and SAME and 3x2 at strides 2x1 peel the second axis; 2x3,
///   2x4, 3x3, 4x4 do not change; 3-D 2x2x2, 2x3x2, 3x2x2 peel the third
///   axis and 2x2x3 the second; 3x3x3 does not change; a 2x2 window padded
///   (1, 1) at stride 1 peels none).
///
/// Into `dx` (one element per input element, every one written).
pub(crate) fn window_sums_transpose_into(
    g: &[f32],
    shape: &[usize],
    window: &[usize],
    strides: &[usize],
    pads: &[(usize, usize)],
    jitted: bool,
    dx: &mut [f32],
) {
    let r = shape.len();
    let out_shape = window_out_shape(shape, window, strides, pads);
    if dx.is_empty() {
        return;
    }
    let mut dxs = dx.iter_mut();
    let g_strides = row_major_strides(&out_shape);
    let peeled = if jitted {
        let loops: Dims = (0..r).filter(|&a| window[a] > 1).collect();
        peeled_loop(&loops, window, |a| {
            // The transposed reduce-window's padding of the dilated
            // cotangent (`k - 1 - lo` low, the rest of its `n + k - 1`
            // high); stride 1, so all of it is reached.
            let k = window[a];
            let dilated = out_shape[a].saturating_sub(1) * strides[a] + 1;
            let lo = (k - 1).saturating_sub(pads[a].0);
            let hi = (shape[a] + k - 1).saturating_sub(lo + dilated);
            let holes = strides[a] > 1 && out_shape[a] > 1;
            (lo > 0 || hi > 0 || holes, lo > 0 || hi > 1 || holes)
        })
        .map(|k| loops[k])
    } else {
        None
    };
    let mut index: Dims = smallvec::smallvec![0; r];
    let mut first: Dims = smallvec::smallvec![0; r];
    let mut ext: Dims = smallvec::smallvec![0; r];
    loop {
        // The windows o that contain position i: o * s - lo <= i < o * s -
        // lo + k, 0 <= o < out.
        let mut last = None;
        for a in 0..r {
            let p = index[a] + pads[a].0;
            let lo = (p + 1).saturating_sub(window[a]).div_ceil(strides[a]);
            let hi = (p / strides[a] + 1).min(out_shape[a]);
            first[a] = lo;
            ext[a] = hi.saturating_sub(lo);
            // The window reading position i through its last element.
            if Some(a) == peeled && p.is_multiple_of(strides[a]) && p / strides[a] < out_shape[a] {
                last = Some((a, p / strides[a]));
            }
        }
        let mut acc = 0.0f32;
        if !ext.contains(&0) {
            // The windows but the peeled ones, then those.
            for tail in [false, true] {
                if tail && last.is_none() {
                    break;
                }
                let mut at: Dims = smallvec::smallvec![0; r];
                loop {
                    let in_tail = last.is_some_and(|(a, o)| first[a] + at[a] == o);
                    if in_tail == tail {
                        let offset: usize = (0..r).map(|a| (first[a] + at[a]) * g_strides[a]).sum();
                        acc += g[offset];
                    }
                    if !next_index(&mut at, &ext) {
                        break;
                    }
                }
            }
        }
        *dxs.next().expect("one cotangent per input element") = acc;
        if !next_index(&mut index, shape) {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// XLA's loop's sums as a new vector.
    fn loop_window_sums(
        x: &[f32],
        shape: &[usize],
        window: &[usize],
        strides: &[usize],
        pads: &[(usize, usize)],
    ) -> Vec<f32> {
        let count = window_out_shape(shape, window, strides, pads)
            .iter()
            .product();
        let mut out = vec![0.0; count];
        super::loop_window_sums(x, shape, window, strides, pads, &mut out);
        out
    }

    /// [`window_sums_into`] as a new vector.
    fn window_sums(
        x: &[f32],
        shape: &[usize],
        window: &[usize],
        strides: &[usize],
        pads: &[(usize, usize)],
        hlo_rank: usize,
    ) -> Vec<f32> {
        let count = window_out_shape(shape, window, strides, pads)
            .iter()
            .product();
        let mut out = vec![0.0; count];
        let mut scratch = vec![0.0; window_sums_scratch(shape, window, strides, pads, hlo_rank)];
        window_sums_into(
            x,
            shape,
            window,
            strides,
            pads,
            hlo_rank,
            &mut out,
            &mut scratch,
        );
        out
    }

    /// [`window_sums_transpose_into`] as a new vector.
    fn window_sums_transpose(
        g: &[f32],
        shape: &[usize],
        window: &[usize],
        strides: &[usize],
        pads: &[(usize, usize)],
        jitted: bool,
    ) -> Vec<f32> {
        let mut dx = vec![0.0; shape.iter().product()];
        window_sums_transpose_into(g, shape, window, strides, pads, jitted, &mut dx);
        dx
    }

    /// The plain definition: every window summed left to right.
    fn plain(x: &[f32], shape: &[usize], window: &[usize], strides: &[usize]) -> Vec<f32> {
        let pads = vec![(0, 0); shape.len()];
        loop_window_sums(x, shape, window, strides, &pads)
    }

    #[test]
    fn small_windows_sum_what_they_cover() {
        // [1, 4, 4, 1] 2x2 at stride 2: each window's four elements.
        let x: Vec<f32> = (0..16).map(|v| v as f32).collect();
        let shape = [1, 4, 4, 1];
        let y = window_sums(&x, &shape, &[1, 2, 2, 1], &[1, 2, 2, 1], &[(0, 0); 4], 4);
        assert_eq!(y, [10.0, 18.0, 42.0, 50.0]);
        assert_eq!(plain(&x, &shape, &[1, 2, 2, 1], &[1, 2, 2, 1]), y);
    }

    #[test]
    fn ynn_and_loop_agree_on_exact_values() {
        // Integers: every order gives the same sums.
        let shape = [2, 16, 16, 8];
        let x: Vec<f32> = (0..4096).map(|v| (v % 7) as f32).collect();
        let w = [1, 2, 2, 1];
        assert!(uses_ynn(&shape, &w, &w, &[(0, 0); 4], 4));
        let ynn = window_sums(&x, &shape, &w, &w, &[(0, 0); 4], 4);
        assert_eq!(ynn, plain(&x, &shape, &w, &w));
        // VALID dropping a column, SAME padding.
        let w = [1, 3, 3, 1];
        let ynn = window_sums(&x, &shape, &w, &w, &[(0, 0); 4], 4);
        assert_eq!(ynn, plain(&x, &shape, &w, &w));
        let pads = [(0, 0), (1, 1), (1, 1), (0, 0)];
        let ynn = window_sums(&x, &shape, &w, &w, &pads, 4);
        assert_eq!(ynn, loop_window_sums(&x, &shape, &w, &w, &pads));
    }

    #[test]
    fn transpose_adds_each_window_back() {
        // [1, 3, 1] windows of 2 at stride 1: inputs 0 and 2 in one window,
        // input 1 in both.
        let g = [1.0, 10.0];
        let dx = window_sums_transpose(&g, &[1, 3, 1], &[1, 2, 1], &[1, 1, 1], &[(0, 0); 3], false);
        assert_eq!(dx, [1.0, 11.0, 10.0]);
        // SAME padding (0, 1): the last input's window runs off the end.
        let g = [1.0, 10.0, 100.0];
        let pads = [(0, 0), (0, 1), (0, 0)];
        let dx = window_sums_transpose(&g, &[1, 3, 1], &[1, 2, 1], &[1, 1, 1], &pads, false);
        assert_eq!(dx, [1.0, 11.0, 110.0]);
    }
}
