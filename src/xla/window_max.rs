//! Window maxima as XLA:CPU computes `lax.reduce_window(x, -inf, max,
//! ...)` (what `flax.linen.max_pool` reduces), measured against jaxlib
//! 0.10.2 on a Zen 4 with 2 CPUs (tools/oracle/generate_max_pools.py).
//!
//! A maximum is exact in any order, except for what `max` does with NaN
//! and with zeros of both signs; the two back ends differ there:
//!
//! - **XLA's loop** (overlapping windows, small pools): `llvm.maximum`,
//!   which propagates NaN and takes `+0` over `-0` whatever their order;
//!   padding is skipped (a window of padding only is `-inf`).
//! - **YNNPACK** (the windows [`uses_ynn`] picks for sums too): the input
//!   padded with `-inf`, read through the same stencil as window sums.
//!   Where the channels are innermost (more than one), its `max` kernel
//!   takes the window's rows (the innermost window axis, merged with
//!   outer ones when they are contiguous) in groups of up to 4, `acc =
//!   r0`, then `acc = max(acc, r)` for the others (a short group repeats
//!   `r0`), and each group's `acc` into the output as `out = max(acc,
//!   out)` from `-inf`, the outer window axes looping in row-major order
//!   around that. Its `max(a, b)` is x86's `maxps`: `a > b ? a : b`, so a
//!   NaN is dropped or kept depending on where it falls, and ties of
//!   zeros keep the earlier operand (measured: 2x2 to 8x8, 2x3 and 3x2
//!   windows, VALID, SAME and explicit padding, every window of values
//!   from `0, -0, NaN, ±inf, ±1`: 0 differ).
//!
//! Not modelled: YNNPACK with one channel (the window is then contiguous
//! and another kernel reduces it), and window rows longer than one of
//! YNNPACK's tiles; both are taken as the rows kernel above.

use smallvec::SmallVec;

use super::reduce_window::{
    next_index, padded_input_into, padded_len, row_major_strides, uses_ynn, window_out_shape,
};

type Dims = SmallVec<[usize; 8]>;

/// Window axes as `(extent, stride)` in the padded input.
type Axes = SmallVec<[(usize, usize); 8]>;

/// The maxima of the windows of row-major `x` (`shape`): for each output
/// position (row-major, extents [`window_out_shape`]) the maximum of the
/// `window` elements starting at `position * strides - pads.0`, padding
/// read as `-inf`, as XLA:CPU computes them (see the module's
/// documentation). `hlo_rank` is the rank of the array in JAX's program.
/// Into `out` (every element written); `scratch` has at least
/// [`window_maxima_scratch`] elements.
#[allow(clippy::too_many_arguments)]
pub(crate) fn window_maxima_into(
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
        ynn_window_maxima(x, shape, window, strides, pads, out, scratch)
    } else {
        loop_window_maxima(x, shape, window, strides, pads, out)
    }
}

/// The scratch [`window_maxima_into`] needs: YNNPACK's padded input.
pub(crate) fn window_maxima_scratch(
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

/// `llvm.maximum`: NaN if either is, `+0` over `-0`, else the larger.
fn maximum(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else if a == b {
        // Equal: the same value, or zeros of which `+0` wins.
        if a.is_sign_negative() {
            b
        } else {
            a
        }
    } else {
        a.max(b)
    }
}

/// x86's `maxps` lane: `a > b ? a : b` (`b` when either is NaN).
fn maxps(a: f32, b: f32) -> f32 {
    if a > b {
        a
    } else {
        b
    }
}

/// XLA's loop: each window's elements inside the input folded by
/// [`maximum`] from `-inf` (the order does not matter).
fn loop_window_maxima(
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
    let mut index: Dims = smallvec::smallvec![0; r];
    let mut lo: Dims = smallvec::smallvec![0; r];
    let mut ext: Dims = smallvec::smallvec![0; r];
    loop {
        for a in 0..r {
            let start = (index[a] * strides[a]) as isize - pads[a].0 as isize;
            let l = start.max(0) as usize;
            let h = ((start + window[a] as isize).max(0) as usize)
                .min(shape[a])
                .max(l);
            lo[a] = l;
            ext[a] = h - l;
        }
        let mut m = f32::NEG_INFINITY;
        if !ext.contains(&0) {
            let mut at: Dims = smallvec::smallvec![0; r];
            loop {
                let i: usize = (0..r).map(|a| (lo[a] + at[a]) * x_strides[a]).sum();
                m = maximum(m, x[i]);
                if !next_index(&mut at, &ext) {
                    break;
                }
            }
        }
        *outs.next().expect("one output per window") = m;
        if !next_index(&mut index, &out_shape) {
            return;
        }
    }
}

/// YNNPACK's window maxima (the module's documentation): the input padded
/// with `-inf` and viewed as `[…, outputs, window, …]` on each windowed
/// axis, the window axes reduced by [`ynn_max_rows`].
fn ynn_window_maxima(
    x: &[f32],
    shape: &[usize],
    window: &[usize],
    strides: &[usize],
    pads: &[(usize, usize)],
    out: &mut [f32],
    scratch: &mut [f32],
) {
    let r = shape.len();
    let out_shape = window_out_shape(shape, window, strides, pads);
    if out.is_empty() {
        return;
    }
    let xp = &mut scratch[..padded_len(shape, pads)];
    let p_strides = padded_input_into(x, shape, pads, f32::NEG_INFINITY, xp);
    let xp = &*xp;
    // The window axes (extent, stride in `xp`), outermost first; an axis
    // of 1 reads one element and drops out.
    let win: Axes = (0..r)
        .filter(|&a| window[a] > 1)
        .map(|a| (window[a], p_strides[a]))
        .collect();
    let (outer, rows) = row_groups(&win);
    let mut outs = out.iter_mut();
    let mut o: Dims = smallvec::smallvec![0; r];
    loop {
        let base: usize = (0..r).map(|a| o[a] * strides[a] * p_strides[a]).sum();
        *outs.next().expect("one output per window") = ynn_max_rows(xp, base, &outer, rows);
        if !next_index(&mut o, &out_shape) {
            return;
        }
    }
}

/// The window axes as YNNPACK's reduction splits them: the innermost,
/// merged with the axes outside it for as long as they continue it in
/// memory (the kernel's rows, `(count, stride)`), and the others (outer
/// loops, outermost first).
fn row_groups(win: &[(usize, usize)]) -> (Axes, (usize, usize)) {
    let Some((&(mut len, stride), rest)) = win.split_last() else {
        return (Axes::new(), (1, 0));
    };
    let mut outer: Axes = rest.iter().copied().collect();
    while let Some(&(e, st)) = outer.last() {
        if st != stride * len {
            break;
        }
        len *= e;
        outer.pop();
    }
    (outer, (len, stride))
}

/// One window's maximum by YNNPACK's rows kernel: for each index of the
/// `outer` loops (row-major), the rows (`(count, stride)`) in groups of
/// up to 4, each group's [`maxps`] fold from its first row (a short group
/// repeats it) taken into the output, `out = maxps(acc, out)`, from
/// `-inf`.
fn ynn_max_rows(
    xp: &[f32],
    base: usize,
    outer: &[(usize, usize)],
    (rows, stride): (usize, usize),
) -> f32 {
    let extents: Dims = outer.iter().map(|&(e, _)| e).collect();
    let mut at: Dims = smallvec::smallvec![0; outer.len()];
    let mut out = f32::NEG_INFINITY;
    loop {
        let start = base
            + at.iter()
                .zip(outer)
                .map(|(&i, &(_, s))| i * s)
                .sum::<usize>();
        for g in (0..rows).step_by(4) {
            let first = xp[start + g * stride];
            let mut acc = first;
            for k in 1..4 {
                let v = if g + k < rows {
                    xp[start + (g + k) * stride]
                } else {
                    first
                };
                acc = maxps(acc, v);
            }
            out = maxps(acc, out);
        }
        if !next_index(&mut at, &extents) {
            return out;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loop_propagates_nan_and_prefers_positive_zero() {
        let x = [1.0, f32::NAN, -0.0, 0.0, 0.0, -0.0, -1.0, -1.0];
        let mut y = [0.0; 4];
        loop_window_maxima(&x, &[1, 8, 1], &[1, 2, 1], &[1, 2, 1], &[(0, 0); 3], &mut y);
        assert!(y[0].is_nan());
        assert_eq!(y[1].to_bits(), 0.0f32.to_bits());
        assert_eq!(y[2].to_bits(), 0.0f32.to_bits());
        assert_eq!(y[3], -1.0);
    }

    #[test]
    fn ynn_rows_drop_a_nan_before_a_larger_value() {
        // One window of four rows: NaN first, then 1: `maxps(NaN, 1)` is 1.
        let xp = [f32::NAN, 1.0, 0.0, -1.0];
        assert_eq!(ynn_max_rows(&xp, 0, &[], (4, 1)), 1.0);
        // NaN last: `maxps(1, NaN)` is NaN, then `maxps(NaN, -inf)` -inf.
        let xp = [1.0, 0.0, -1.0, f32::NAN];
        assert_eq!(ynn_max_rows(&xp, 0, &[], (4, 1)), f32::NEG_INFINITY);
    }
}
