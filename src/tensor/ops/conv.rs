//! `lax.conv_general_dilated` with batch-first, channels-last layouts
//! (`NHWC` inputs, `HWIO` kernels, any number of spatial dimensions), and
//! the window gathering that pooling shares.
//!
//! Every output position reads its window of the (padded, dilated) input
//! through one index list (positions in padding or between dilated
//! elements read zeros). The convolution and its two cotangents run in
//! XLA:CPU's orders: YNNPACK's partial sums for 2-D convolutions with 17
//! or more features (`conv_ynn`), else Eigen's contraction: one chain of
//! fused multiply-adds per output, or oneDNN's matrix-vector order for
//! one column, unless Eigen cuts the terms into ranges and blocks
//! (`conv_eigen`); pooling gathers the same windows with a differentiable
//! `take`.

use std::sync::Arc;

use super::conv_fast::{self, Isa};
use super::conv_routes::Conv;
use crate::tensor::error::{Result, TensorError};
use crate::tensor::Tensor;
use crate::xla::onednn_gemv::{gemv_t_sum, GEMV_MAX_TERMS};
use crate::xla::vectors::with_fma;

/// The geometry of a convolution or pooling window over `d` spatial
/// dimensions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConvSpec {
    /// Step between windows, per spatial dimension (`window_strides`).
    pub strides: Vec<usize>,
    /// Zeros added before and after each spatial dimension.
    pub padding: Vec<(usize, usize)>,
    /// Input dilation (`lhs_dilation`): `r - 1` zeros between input
    /// elements (transposed convolutions).
    pub lhs_dilation: Vec<usize>,
    /// Kernel dilation (`rhs_dilation`, atrous convolution).
    pub rhs_dilation: Vec<usize>,
    /// Feature groups (`feature_group_count`; depthwise when it equals the
    /// input features).
    pub feature_group_count: usize,
    /// Padding wraps around instead of adding zeros (Flax's `CIRCULAR`,
    /// `jnp.pad(mode='wrap')` before a `VALID` convolution).
    pub circular: bool,
}

impl ConvSpec {
    /// Stride 1, no padding, no dilation, one group, for `d` dimensions.
    pub fn new(d: usize) -> ConvSpec {
        ConvSpec {
            strides: vec![1; d],
            padding: vec![(0, 0); d],
            lhs_dilation: vec![1; d],
            rhs_dilation: vec![1; d],
            feature_group_count: 1,
            circular: false,
        }
    }
}

fn arg(op: &'static str, message: String) -> TensorError {
    TensorError::Argument { op, message }
}

/// For input spatial shape `spatial` and window `window`: the output
/// spatial shape and, for every (output position, window position) in
/// row-major order, the flat input position it reads (`None`: a zero).
pub(crate) fn window_indices(
    op: &'static str,
    spatial: &[usize],
    window: &[usize],
    spec: &ConvSpec,
) -> Result<(Vec<usize>, Vec<Option<usize>>)> {
    let d = spatial.len();
    for (what, v) in [
        ("strides", &spec.strides),
        ("lhs_dilation", &spec.lhs_dilation),
        ("rhs_dilation", &spec.rhs_dilation),
    ] {
        if v.len() != d {
            return Err(arg(
                op,
                format!("{what} {v:?} must have {d} entries, one per spatial dimension"),
            ));
        }
        if v.contains(&0) {
            return Err(arg(op, format!("{what} {v:?} must be positive")));
        }
    }
    if spec.padding.len() != d {
        return Err(arg(
            op,
            format!("padding {:?} must have {d} (low, high) pairs", spec.padding),
        ));
    }
    if spec.circular && spec.lhs_dilation.iter().any(|&r| r != 1) {
        return Err(arg(op, "circular padding with input dilation".into()));
    }
    let mut out_shape = Vec::with_capacity(d);
    for i in 0..d {
        let dilated = if spatial[i] == 0 {
            0
        } else {
            (spatial[i] - 1) * spec.lhs_dilation[i] + 1
        };
        let (lo, hi) = spec.padding[i];
        let padded = dilated + lo + hi;
        let eff = if window[i] == 0 {
            0
        } else {
            (window[i] - 1) * spec.rhs_dilation[i] + 1
        };
        out_shape.push(if padded >= eff && eff > 0 {
            (padded - eff) / spec.strides[i] + 1
        } else {
            0
        });
    }
    let n_out: usize = out_shape.iter().product();
    let n_win: usize = window.iter().product();
    let total = n_out
        .checked_mul(n_win)
        .ok_or_else(|| arg(op, format!("{n_out} windows of {n_win} elements overflow")))?;
    let mut idx = Vec::with_capacity(total);
    let mut o = vec![0usize; d];
    let mut k = vec![0usize; d];
    for _ in 0..n_out {
        k.iter_mut().for_each(|x| *x = 0);
        for _ in 0..n_win {
            let mut flat = 0usize;
            let mut zero = false;
            for i in 0..d {
                let p = o[i] * spec.strides[i] + k[i] * spec.rhs_dilation[i];
                let (lo, _) = spec.padding[i];
                let src = if spec.circular {
                    let n = spatial[i] as isize;
                    Some(((p as isize - lo as isize).rem_euclid(n)) as usize)
                } else if p < lo {
                    None
                } else {
                    let q = p - lo;
                    let r = spec.lhs_dilation[i];
                    if !q.is_multiple_of(r) || q / r >= spatial[i] {
                        None
                    } else {
                        Some(q / r)
                    }
                };
                match src {
                    Some(s) => flat = flat * spatial[i] + s,
                    None => zero = true,
                }
            }
            idx.push(if zero { None } else { Some(flat) });
            // Next window position, row-major.
            for i in (0..d).rev() {
                k[i] += 1;
                if k[i] < window[i] {
                    break;
                }
                k[i] = 0;
            }
        }
        for i in (0..d).rev() {
            o[i] += 1;
            if o[i] < out_shape[i] {
                break;
            }
            o[i] = 0;
        }
    }
    Ok((out_shape, idx))
}

/// The sizes of a convolution: batch, input positions, input features,
/// taps, kernel input features (per group), outputs, output positions,
/// groups.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Dims {
    pub(crate) n: usize,
    pub(crate) s: usize,
    pub(crate) c: usize,
    pub(crate) t: usize,
    pub(crate) cg: usize,
    pub(crate) o: usize,
    pub(crate) p: usize,
    pub(crate) groups: usize,
}

impl Dims {
    /// Output features per group.
    pub(crate) fn og(&self) -> usize {
        self.o / self.groups
    }

    /// Row `tap * cg + c` of the kernel `[tap, cg, o]` (group `g`'s
    /// forward weights are its outputs `g * og..`).
    pub(crate) fn kernel_row<'k>(&self, k: &'k [f32], row: usize) -> &'k [f32] {
        &k[row * self.o..][..self.o]
    }

    /// Group `g`'s weights for the input's cotangent: the kernel flipped,
    /// row `tt * og + f` (tap `t - 1 - tt`, the group's output `f`),
    /// column `j` (the group's input feature).
    pub(crate) fn flipped_kernel(&self, k: &[f32], g: usize, row: usize, j: usize) -> f32 {
        let og = self.og();
        let (tt, f) = (row / og, row % og);
        k[((self.t - 1 - tt) * self.cg + j) * self.o + g * og + f]
    }

    /// The output's cotangent `[n, p, o]` as the kernel's cotangent reads
    /// it: row `m * n + b` (position `m`, image `b`), all outputs.
    pub(crate) fn cotangent_row<'g>(&self, gr: &'g [f32], row: usize) -> &'g [f32] {
        let (m, b) = (row / self.n, row % self.n);
        &gr[(b * self.p + m) * self.o..][..self.o]
    }
}

/// Weights `[group, i, j]` (`i < rows`, `j < cols`), row-major, from
/// `at(group, i, j)`: the layout a route reads.
pub(crate) fn weights(
    groups: usize,
    rows: usize,
    cols: usize,
    at: impl Fn(usize, usize, usize) -> f32,
) -> Vec<f32> {
    let mut w = Vec::with_capacity(groups * rows * cols);
    for g in 0..groups {
        for i in 0..rows {
            for j in 0..cols {
                w.push(at(g, i, j));
            }
        }
    }
    w
}

/// [`weights`] from whole rows: `row(group, i)` is row `i`'s `cols`
/// values (copied as slices: the forward kernel's and the cotangent's rows
/// are contiguous).
pub(crate) fn weight_rows<'a>(
    groups: usize,
    rows: usize,
    cols: usize,
    row: impl Fn(usize, usize) -> &'a [f32],
) -> Vec<f32> {
    let mut w = Vec::with_capacity(groups * rows * cols);
    for g in 0..groups {
        for i in 0..rows {
            w.extend_from_slice(&row(g, i)[..cols]);
        }
    }
    w
}

/// Which of a convolution's two cotangents XLA computes with the operands
/// of their convolution swapped. JAX computes each cotangent as another
/// convolution; XLA's `ConvOperandSwapper` (one feature group only) swaps
/// its operands when the product of its window's sizes exceeds that of its
/// input's spatial sizes, and the swapped convolution (its window reversed)
/// runs as XLA's emitted loop, which visits the terms in another order
/// (measured: jaxlib 0.10.2, `tools/oracle/generate_layers.py`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Swaps {
    /// The input's cotangent (a convolution of the output's cotangent with
    /// the flipped kernel, window = the kernel): taps in increasing order.
    pub(super) input_grad: bool,
    /// The kernel's cotangent (a convolution of the input with the output's
    /// cotangent, window = the output): positions in decreasing order.
    pub(super) kernel_grad: bool,
}

impl Swaps {
    /// For input spatial sizes `spatial`, kernel `window` and output
    /// `out`. A circular convolution is JAX's `VALID` convolution of the
    /// wrapped input, whose sizes count.
    pub(super) fn of(spatial: &[usize], window: &[usize], out: &[usize], spec: &ConvSpec) -> Swaps {
        if spec.feature_group_count != 1 || [spatial, window, out].iter().any(|v| v.contains(&0)) {
            return Swaps {
                input_grad: false,
                kernel_grad: false,
            };
        }
        let lhs: Vec<usize> = (0..spatial.len())
            .map(|i| {
                let (lo, hi) = spec.padding[i];
                if spec.circular {
                    spatial[i] + lo + hi
                } else {
                    spatial[i]
                }
            })
            .collect();
        // The input's cotangent: window the kernel, input the output's
        // cotangent; a cotangent of length 1 padded by the window less one
        // on both sides (a full-size `VALID` window) counts as the window.
        let cotangent: usize = (0..out.len())
            .map(|i| {
                let dilated = (window[i] - 1) * spec.rhs_dilation[i] + 1;
                let pad_lo = if spec.circular { 0 } else { spec.padding[i].0 };
                let full = out[i] == 1
                    && spec.strides[i] == 1
                    && pad_lo == 0
                    && (lhs[i] - 1) * spec.lhs_dilation[i] + 1 == dilated;
                if full {
                    window[i]
                } else {
                    out[i]
                }
            })
            .product();
        let taps: usize = window.iter().product();
        Swaps {
            input_grad: taps > cotangent,
            kernel_grad: out.iter().product::<usize>() > lhs.iter().product::<usize>(),
        }
    }
}

/// Whether XLA's `ConvOperandSwapper` swaps the operands of a grouped
/// convolution's kernel cotangent (measured: jaxlib 0.10.2's HLO): over the spatial
/// dimensions that are not pure contractions (output as long as the input,
/// no padding, stride and dilation 1), the output's positions outnumber the
/// input's (an input of 1 padded fully on both sides counts as the
/// output). The swapped convolution runs as XLA's own loop, not on Eigen.
pub(super) fn grouped_kernel_grad_swaps(
    spatial: &[usize],
    window: &[usize],
    out: &[usize],
    spec: &ConvSpec,
) -> bool {
    let (mut window_size, mut input_size) = (1usize, 1usize);
    for i in 0..spatial.len() {
        let (input, output) = (spatial[i] as i64, out[i] as i64);
        let (stride, dilation) = (spec.strides[i] as i64, spec.rhs_dilation[i] as i64);
        let lo = spec.padding[i].0 as i64;
        // The cotangent convolution's high padding.
        let hi = (window[i] as i64 - 1) * dilation + (output - 1) * stride + 1 - input - lo;
        // Its window dilation is the stride, its stride the dilation.
        let unit = stride == 1 && dilation == 1;
        if output == input && lo == 0 && hi == 0 && unit {
            continue;
        }
        window_size *= out[i];
        let full = input == 1 && unit && lo == output - 1 && hi == output - 1;
        input_size *= if full { out[i] } else { spatial[i] };
    }
    window_size > input_size
}

/// A convolution as Eigen's transposed 2-D convolution computes it, which
/// XLA:CPU uses for a 2-D convolution with input dilation, stride 1, no
/// kernel dilation and one group (JAX's input cotangent of a strided
/// convolution is one): for every input position and tap, the products
/// with the kernel over the input features as one chain of fused
/// multiply-adds from `+0` (a matrix product), then each output the plain
/// sum, from `+0`, of its taps' chains in increasing order of the input
/// position they read (measured, jaxlib 0.10.2).
///
/// `reads[o * t + tap]` is the input position output `o` reads through
/// `tap`, increasing with the tap or, when `taps_reversed`, decreasing;
/// `w[(tap * c + ci) * f + j]` the kernel; `x` is `[n, s, c]` and the
/// result `[n, p, f]` (`p` output positions).
pub(super) fn scattered_conv(
    x: &[f32],
    (n, s, c): (usize, usize, usize),
    reads: &[Option<usize>],
    (p, t, f): (usize, usize, usize),
    w: &[f32],
    taps_reversed: bool,
) -> Vec<f32> {
    use rayon::prelude::*;
    let mut out = vec![0.0f32; n * p * f];
    out.par_chunks_mut(f.max(1)).enumerate().for_each_init(
        || vec![0.0f32; f],
        |chain, (row, acc)| {
            with_fma(
                #[inline(always)]
                || {
                    let (b, o) = (row / p, row % p);
                    for step in 0..t {
                        let tap = if taps_reversed { t - 1 - step } else { step };
                        let Some(src) = reads[o * t + tap] else {
                            continue;
                        };
                        chain.fill(0.0);
                        let xs = &x[(b * s + src) * c..][..c];
                        for (ci, &xv) in xs.iter().enumerate() {
                            let wr = &w[(tap * c + ci) * f..][..f];
                            for (v, &wv) in chain.iter_mut().zip(wr) {
                                *v = xv.mul_add(wv, *v);
                            }
                        }
                        for (a, &v) in acc.iter_mut().zip(chain.iter()) {
                            *a += v;
                        }
                    }
                },
            )
        },
    );
    out
}

/// The forward pass in XLA:CPU's order: every output is one sequential
/// chain of fused multiply-adds over its window, tap by tap (row-major),
/// input feature by input feature, padding included as zeros (measured
/// against `lax.conv_general_dilated` on CPU). Vectorized across the
/// outputs of a position, each keeping its own chain.
pub(super) fn conv_forward(x: &[f32], k: &[f32], idx: &[Option<usize>], d: Dims) -> Vec<f32> {
    use rayon::prelude::*;
    /// Positions computed together: independent chains keep the FMA
    /// units busy (each chain is sequential).
    const TILE: usize = 4;
    let mut out = vec![0.0f32; d.n * d.p * d.o];
    let o = d.o.max(1);
    out.par_chunks_mut(o * TILE)
        .enumerate()
        .for_each(|(tile, accs)| {
            with_fma(
                #[inline(always)]
                || {
                    let first = tile * TILE;
                    let rows = accs.len() / o;
                    // Per tap, the offset of each row's window element.
                    for g in 0..d.groups {
                        let outs = g * d.og()..(g + 1) * d.og();
                        let og = outs.len();
                        for t in 0..d.t {
                            let base: [Option<usize>; TILE] = std::array::from_fn(|r| {
                                if r < rows {
                                    let row = first + r;
                                    let (n, m) = (row / d.p, row % d.p);
                                    idx[m * d.t + t].map(|s| (n * d.s + s) * d.c + g * d.cg)
                                } else {
                                    None
                                }
                            });
                            for c in 0..d.cg {
                                let kr = &k[(t * d.cg + c) * d.o + outs.start..][..og];
                                for (r, b) in base.iter().enumerate().take(rows) {
                                    let xv = b.map_or(0.0, |b| x[b + c]);
                                    let acc = &mut accs[r * o + outs.start..][..og];
                                    for (a, &w) in acc.iter_mut().zip(kr) {
                                        *a = xv.mul_add(w, *a);
                                    }
                                }
                            }
                        }
                    }
                },
            )
        });
    out
}

/// The forward pass on the register tiles of `conv_fast`, where the CPU
/// has them: the same chains, so the same bits.
pub(super) fn conv_forward_fast(
    x: &[f32],
    k: &[f32],
    idx: &[Option<usize>],
    d: Dims,
) -> Option<Vec<f32>> {
    Isa::detect().map(|isa| conv_fast::forward(isa, x, k, idx, d))
}

/// The input cotangent on the register tiles, where the CPU has them.
pub(super) fn conv_input_grad_fast(
    g: &[f32],
    k: &[f32],
    inv: &[Option<usize>],
    d: Dims,
) -> Option<Vec<f32>> {
    Isa::detect().map(|isa| conv_fast::input_grad(isa, g, k, inv, d))
}

/// The kernel cotangent on the register tiles, where the CPU has them.
pub(super) fn conv_kernel_grad_fast(
    x: &[f32],
    g: &[f32],
    idx: &[Option<usize>],
    d: Dims,
) -> Option<Vec<f32>> {
    Isa::detect().map(|isa| conv_fast::kernel_grad(isa, x, g, idx, d))
}

/// The kernel `[tap, in, out]` as `[tap, out, in]`:
/// `kt[(t * O + o) * cg + c] = k[(t * cg + c) * O + o]`.
pub(super) fn kernel_by_output(k: &[f32], d: Dims) -> Vec<f32> {
    let mut kt = vec![0.0f32; k.len()];
    for t in 0..d.t {
        for c in 0..d.cg {
            for o in 0..d.o {
                kt[(t * d.o + o) * d.cg + c] = k[(t * d.cg + c) * d.o + o];
            }
        }
    }
    kt
}

/// Whether XLA sums a convolution's contraction of `terms` terms with
/// `inputs` input features per group in oneDNN's matrix-vector order
/// ([`crate::xla::onednn_gemv`]; modelled without strides or dilations,
/// as one sum for at most 96 terms; longer ones Eigen cuts, see
/// `conv_eigen`).
pub(super) fn gemv_fits(spec: &ConvSpec, inputs: usize, terms: usize) -> bool {
    let one = |v: &[usize]| v.iter().all(|&r| r == 1);
    inputs <= 16
        && terms <= GEMV_MAX_TERMS
        && one(&spec.strides)
        && one(&spec.lhs_dilation)
        && one(&spec.rhs_dilation)
}

/// The forward pass of a convolution with one output feature per group
/// in oneDNN's matrix-vector order: per output, the taps row-major and,
/// innermost, the group's input features (a padding tap's terms are
/// zeros in their lanes).
pub(super) fn conv_forward_gemv(x: &[f32], k: &[f32], idx: &[Option<usize>], d: Dims) -> Vec<f32> {
    use rayon::prelude::*;
    let mut y = vec![0.0f32; d.n * d.p * d.o];
    y.par_chunks_mut(d.o.max(1))
        .enumerate()
        .for_each(|(row, out)| {
            with_fma(|| {
                let (n, m) = (row / d.p, row % d.p);
                // One output feature per group: output `grp` is group `grp`'s.
                for (grp, v) in out.iter_mut().enumerate() {
                    *v = gemv_t_sum(d.t * d.cg, |j| {
                        let (t, ci) = (j / d.cg, j % d.cg);
                        let xv = idx[m * d.t + t]
                            .map_or(0.0, |s| x[(n * d.s + s) * d.c + grp * d.cg + ci]);
                        (xv, k[(t * d.cg + ci) * d.o + grp])
                    });
                }
            })
        });
    y
}

/// The input's cotangent of a convolution with one input feature per
/// group in oneDNN's matrix-vector order (XLA's convolution of the
/// cotangent with the flipped kernel): per input element, the taps in
/// reverse order and, innermost, the group's outputs.
pub(super) fn conv_input_grad_gemv(
    g: &[f32],
    k: &[f32],
    inv: &[Option<usize>],
    d: Dims,
) -> Vec<f32> {
    use rayon::prelude::*;
    let og = d.og();
    let mut dx = vec![0.0f32; d.n * d.s * d.c];
    dx.par_chunks_mut(d.c.max(1))
        .enumerate()
        .for_each(|(row, out)| {
            with_fma(|| {
                let (n, s) = (row / d.s, row % d.s);
                // One input feature per group: input `grp` is group `grp`'s.
                for (grp, v) in out.iter_mut().enumerate() {
                    *v = gemv_t_sum(d.t * og, |j| {
                        let (t, o) = (d.t - 1 - j / og, grp * og + j % og);
                        let gv = inv[s * d.t + t].map_or(0.0, |m| g[(n * d.p + m) * d.o + o]);
                        (gv, k[t * d.o + o])
                    });
                }
            })
        });
    dx
}

/// The kernel's cotangent of a convolution with one output feature (one
/// group) in oneDNN's matrix-vector order: per kernel element, the output
/// positions row-major and, innermost, the batch.
pub(super) fn conv_kernel_grad_gemv(
    x: &[f32],
    g: &[f32],
    idx: &[Option<usize>],
    d: Dims,
) -> Vec<f32> {
    let mut dk = vec![0.0f32; d.t * d.cg];
    with_fma(|| {
        for (row, v) in dk.iter_mut().enumerate() {
            let (t, c) = (row / d.cg, row % d.cg);
            *v = gemv_t_sum(d.p * d.n, |j| {
                let (m, n) = (j / d.n, j % d.n);
                let xv = idx[m * d.t + t].map_or(0.0, |s| x[(n * d.s + s) * d.c + c]);
                (xv, g[n * d.p + m])
            });
        }
    });
    dk
}

/// The input's cotangent in XLA's order (the transposed convolution): for
/// every input element, one chain of fused multiply-adds over the taps in
/// reverse order (the flipped kernel) and, per tap, the outputs of its
/// group; a tap whose output position does not exist contributes zeros.
/// `inv[s * t + tap]` is the output position reading input `s` through
/// `tap`. Vectorized across the input features of a position (the kernel
/// transposed to `[tap, out, in]` for that).
///
/// `taps_forward`: the taps in increasing order instead, as XLA computes
/// the cotangent when it swaps the transposed convolution's operands
/// ([`Swaps`]).
pub(super) fn conv_input_grad(
    g: &[f32],
    k: &[f32],
    inv: &[Option<usize>],
    d: Dims,
    taps_forward: bool,
) -> Vec<f32> {
    use rayon::prelude::*;
    let kt = kernel_by_output(k, d);
    let mut dx = vec![0.0f32; d.n * d.s * d.c];
    dx.par_chunks_mut(d.c.max(1))
        .enumerate()
        .for_each(|(row, out)| {
            with_fma(
                #[inline(always)]
                || {
                    let (n, s) = (row / d.s, row % d.s);
                    for grp in 0..d.groups {
                        let acc = &mut out[grp * d.cg..(grp + 1) * d.cg];
                        for step in 0..d.t {
                            let t = if taps_forward { step } else { d.t - 1 - step };
                            let m = inv[s * d.t + t];
                            for o in grp * d.og()..(grp + 1) * d.og() {
                                let gv = m.map_or(0.0, |m| g[(n * d.p + m) * d.o + o]);
                                let kr = &kt[(t * d.o + o) * d.cg..(t * d.o + o + 1) * d.cg];
                                for (a, &w) in acc.iter_mut().zip(kr) {
                                    *a = gv.mul_add(w, *a);
                                }
                            }
                        }
                    }
                },
            )
        });
    dx
}

/// The kernel's cotangent in XLA's order: for every kernel element, one
/// chain of fused multiply-adds over the output positions (row-major) and,
/// innermost, the batch. Vectorized across the outputs. (With swapped
/// operands XLA runs another loop: [`swapped_kernel_grad`].)
pub(super) fn conv_kernel_grad(x: &[f32], g: &[f32], idx: &[Option<usize>], d: Dims) -> Vec<f32> {
    use rayon::prelude::*;
    let mut dk = vec![0.0f32; d.t * d.cg * d.o];
    dk.par_chunks_mut(d.o.max(1))
        .enumerate()
        .for_each(|(row, acc)| {
            with_fma(
                #[inline(always)]
                || {
                    let (t, c) = (row / d.cg, row % d.cg);
                    for m in 0..d.p {
                        let src = idx[m * d.t + t];
                        for n in 0..d.n {
                            let gr = &g[(n * d.p + m) * d.o..(n * d.p + m + 1) * d.o];
                            for grp in 0..d.groups {
                                let xv =
                                    src.map_or(0.0, |s| x[(n * d.s + s) * d.c + grp * d.cg + c]);
                                let outs = grp * d.og()..(grp + 1) * d.og();
                                for (a, &gv) in acc[outs.clone()].iter_mut().zip(&gr[outs]) {
                                    *a = xv.mul_add(gv, *a);
                                }
                            }
                        }
                    }
                },
            )
        });
    dk
}

/// Whether LLVM leaves the first product of each position's batch unfused
/// in XLA's loop for a grouped kernel cotangent with swapped operands
/// ([`swapped_kernel_grad`]). With 2 groups the loop over the
/// groups' window is unrolled into two copies, one per group, and LLVM
/// merges them after their first product, which then is rounded before
/// its add (a `vmulss` and a `vaddss`; read from the optimized LLVM IR).
/// Measured on 11 geometries with 2 groups (Cg 1 to 3, Fg 1 to 4,
/// windows 2x2 and 3x3, inputs 3x3 to 6x8): every position's first term
/// unfused with a batch of 16, 20, 24 and 32, none with 1, 2 and 4; never
/// with 3 or 4 groups (4 geometries, batches 2 to 32). From 6 to 13 it
/// depends on LLVM's unrolling (all, none, or only the even output
/// features): not modelled, taken as fused.
fn first_product_unfused(d: Dims) -> bool {
    d.groups == 2 && d.n >= 16
}

/// The kernel's cotangent of a convolution whose operands XLA swaps
/// ([`Swaps`], [`grouped_kernel_grad_swaps`]): XLA's emitted loop over the
/// swapped convolution, whose window is the output reversed. For each
/// kernel element, one chain of fused multiply-adds from `+0` over the
/// output positions in decreasing order (the input rows and columns
/// decreasing) and, innermost, the batch; positions in the padding are
/// skipped, not added as zeros; each output gets its own group's terms
/// only (the other groups are holes of the input dilation, skipped too).
/// The batch's first term at each position may be a rounded product
/// added ([`first_product_unfused`]). Skipping the padding matters for a
/// cotangent that is infinite or NaN there: no `0 * inf` reaches the
/// result.
pub(super) fn swapped_kernel_grad(
    x: &[f32],
    g: &[f32],
    idx: &[Option<usize>],
    d: Dims,
) -> Vec<f32> {
    use rayon::prelude::*;
    let unfused = first_product_unfused(d);
    let og = d.og();
    let mut dk = vec![0.0f32; d.t * d.cg * d.o];
    dk.par_chunks_mut(d.o.max(1))
        .enumerate()
        .for_each(|(row, acc)| {
            with_fma(
                #[inline(always)]
                || {
                    let (t, c) = (row / d.cg, row % d.cg);
                    for m in (0..d.p).rev() {
                        let Some(s) = idx[m * d.t + t] else {
                            continue;
                        };
                        for n in 0..d.n {
                            let gr = &g[(n * d.p + m) * d.o..][..d.o];
                            let xr = &x[(n * d.s + s) * d.c..][..d.c];
                            for grp in 0..d.groups {
                                let xv = xr[grp * d.cg + c];
                                let outs = grp * og..(grp + 1) * og;
                                for (a, &gv) in acc[outs.clone()].iter_mut().zip(&gr[outs]) {
                                    *a = if unfused && n == 0 {
                                        *a + xv * gv
                                    } else {
                                        xv.mul_add(gv, *a)
                                    };
                                }
                            }
                        }
                    }
                },
            )
        });
    dk
}

impl Tensor {
    /// `lax.conv_general_dilated(x, kernel, ...)` with dimension numbers
    /// `(NHWC, HWIO, NHWC)` generalized to `d` spatial dimensions: `self`
    /// is `[N, S₁…S_d, C]`, `kernel` is `[K₁…K_d, C / groups, O]`, the
    /// result `[N, O₁…O_d, O]`. Values and both gradients are computed in
    /// XLA:CPU's order (chains of fused multiply-adds; see the book's
    /// reference part).
    ///
    /// ```
    /// use flaxen::tensor::{ConvSpec, Tensor};
    /// // A 1-D moving sum of width 2 over [1, 2, 3].
    /// let x = Tensor::from_vec(vec![1.0, 2.0, 3.0], &[1, 3, 1])?;
    /// let k = Tensor::ones(&[2, 1, 1]);
    /// let y = x.conv_general_dilated(&k, &ConvSpec::new(1))?;
    /// assert_eq!(y.to_vec(), [3.0, 5.0]);
    /// # Ok::<(), flaxen::tensor::TensorError>(())
    /// ```
    pub fn conv_general_dilated(&self, kernel: &Tensor, spec: &ConvSpec) -> Result<Tensor> {
        const OP: &str = "conv_general_dilated";
        let nd = self.ndim();
        if nd < 2 || kernel.ndim() != nd {
            return Err(TensorError::Incompatible {
                op: OP,
                lhs: self.shape().to_vec(),
                rhs: kernel.shape().to_vec(),
            });
        }
        let sd = nd - 2;
        let window = kernel.shape()[..sd].to_vec();
        let (cg, o) = (kernel.shape()[sd], kernel.shape()[sd + 1]);
        let c = self.shape()[nd - 1];
        let groups = spec.feature_group_count;
        if groups == 0 || cg * groups != c || o % groups != 0 {
            return Err(arg(
                OP,
                format!(
                    "input features {c}, kernel input features {cg}, output features {o} \
                     and feature_group_count {groups} do not fit (need kernel in × groups = \
                     input features and groups dividing the output features)"
                ),
            ));
        }
        // (Other specs, and bad ones, go on to `window_indices`' checks.)
        if spec.circular && spec.padding.len() == sd && spec.lhs_dilation.iter().all(|&r| r == 1) {
            // As Flax: `jnp.pad(mode="wrap")`, then a `VALID` convolution,
            // so that the input's gradient folds the wrapped cotangent back
            // in JAX's order.
            let mut pads = vec![(0, 0); nd];
            pads[1..nd - 1].copy_from_slice(&spec.padding);
            let valid = ConvSpec {
                padding: vec![(0, 0); sd],
                circular: false,
                ..spec.clone()
            };
            return self.pad_wrap(&pads)?.conv_general_dilated(kernel, &valid);
        }
        let spatial = self.shape()[1..nd - 1].to_vec();
        let (out_spatial, idx) = window_indices(OP, &spatial, &window, spec)?;
        let d = Dims {
            n: self.shape()[0],
            s: spatial.iter().product(),
            c,
            t: window.iter().product(),
            cg,
            o,
            p: out_spatial.iter().product(),
            groups,
        };
        let conv = Conv::new(d, idx, (spatial, window, out_spatial), spec);
        Ok(
            Tensor::record_kernel(Arc::new(conv), &[self, kernel]).with_tangent(|| {
                let spec = spec.clone();
                crate::tensor::forward::bilinear(self.detached(), kernel.detached(), move |x, k| {
                    Ok(x.conv_general_dilated(k, &spec)?)
                })
            }),
        )
    }
}

#[cfg(test)]
mod fast_tests {
    use super::*;

    /// The tile instruction sets this CPU can run (each is tested).
    fn isas() -> impl Iterator<Item = Isa> {
        [Isa::Avx512, Isa::Avx2]
            .into_iter()
            .filter(|i| i.available())
    }

    fn values(n: usize, seed: u64) -> Vec<f32> {
        (0..n as u64)
            .map(|i| {
                let h = (i * 2654435761 + seed * 40503) % (1 << 32);
                (h as f64 / 4294967296.0 * 4.0 - 2.0) as f32
            })
            .collect()
    }

    /// The micro-kernel paths give the reference loops' bits, for sizes
    /// that do not fill whole tiles (rows, features, outputs), groups, and
    /// windows that read padding.
    #[test]
    fn fast_paths_equal_the_reference() {
        for (n, s, cg, o, t, p, groups) in [
            (1, 5, 3, 5, 3, 5, 1),
            (2, 9, 16, 32, 4, 7, 1),
            (3, 6, 17, 18, 2, 6, 1),
            (2, 8, 4, 6, 3, 5, 2),
            (1, 7, 20, 33, 5, 3, 1),
            (3, 11, 5, 12, 2, 11, 1),
            (2, 4, 40, 17, 1, 13, 1),
            // Chains of several chunks (`conv_fast::CHUNK_STEPS`): the
            // kernel cotangent's (positions × images), the input
            // cotangent's (taps × outputs), the forward's (taps × inputs);
            // with groups; rows in several parts.
            (4, 40, 8, 32, 9, 150, 1),
            (5, 40, 4, 8, 3, 120, 2),
            (2, 30, 3, 32, 20, 25, 1),
            (1, 20, 40, 17, 13, 9, 1),
            (8, 50, 3, 16, 3, 50, 1),
            // Empty chains and no outputs.
            (1, 5, 0, 5, 3, 5, 1),
            (1, 5, 3, 0, 3, 5, 1),
            (0, 5, 3, 4, 3, 5, 1),
        ] {
            let d = Dims {
                n,
                s,
                c: cg * groups,
                t,
                cg,
                o,
                p,
                groups,
            };
            let x = values(n * s * d.c, 1);
            let k = values(t * cg * o, 2);
            let g = values(n * p * o, 3);
            // Every 5th read is padding.
            let idx: Vec<Option<usize>> = (0..p * t)
                .map(|i| (i % 5 != 4).then_some((i * 7) % s))
                .collect();
            let inv: Vec<Option<usize>> = (0..s * t)
                .map(|i| (i % 5 != 2).then_some((i * 3) % p))
                .collect();
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            for isa in isas() {
                let fast = conv_fast::forward(isa, &x, &k, &idx, d);
                assert_eq!(bits(&fast), bits(&conv_forward(&x, &k, &idx, d)), "{isa:?}");
            }
            for isa in isas() {
                let fast = conv_fast::input_grad(isa, &g, &k, &inv, d);
                assert_eq!(
                    bits(&fast),
                    bits(&conv_input_grad(&g, &k, &inv, d, false)),
                    "{isa:?}"
                );
            }
            for isa in isas() {
                let fast = conv_fast::kernel_grad(isa, &x, &g, &idx, d);
                assert_eq!(
                    bits(&fast),
                    bits(&conv_kernel_grad(&x, &g, &idx, d)),
                    "{isa:?}"
                );
            }
        }
    }

    /// Infinities and NaNs reach the same outputs on both paths (values
    /// bit for bit; a NaN where the reference has one).
    #[test]
    fn fast_paths_propagate_nan_and_inf_as_the_reference() {
        let d = Dims {
            n: 2,
            s: 9,
            c: 16,
            t: 4,
            cg: 16,
            o: 20,
            p: 7,
            groups: 1,
        };
        let mut x = values(d.n * d.s * d.c, 1);
        let mut k = values(d.t * d.cg * d.o, 2);
        let mut g = values(d.n * d.p * d.o, 3);
        x[5] = f32::INFINITY;
        x[77] = f32::NAN;
        k[40] = f32::NEG_INFINITY;
        g[13] = f32::NAN;
        g[100] = f32::INFINITY;
        let idx: Vec<Option<usize>> = (0..d.p * d.t)
            .map(|i| (i % 5 != 4).then_some((i * 7) % d.s))
            .collect();
        let inv: Vec<Option<usize>> = (0..d.s * d.t)
            .map(|i| (i % 5 != 2).then_some((i * 3) % d.p))
            .collect();
        let same = |a: &[f32], b: &[f32]| {
            assert_eq!(a.len(), b.len());
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                assert!(
                    (x.is_nan() && y.is_nan()) || x.to_bits() == y.to_bits(),
                    "element {i}: {x} vs {y}"
                );
            }
            assert!(a.iter().any(|v| v.is_nan()) && a.iter().any(|v| v.is_infinite()));
        };
        for isa in isas() {
            same(
                &conv_fast::forward(isa, &x, &k, &idx, d),
                &conv_forward(&x, &k, &idx, d),
            );
        }
        for isa in isas() {
            same(
                &conv_fast::input_grad(isa, &g, &k, &inv, d),
                &conv_input_grad(&g, &k, &inv, d, false),
            );
        }
        for isa in isas() {
            same(
                &conv_fast::kernel_grad(isa, &x, &g, &idx, d),
                &conv_kernel_grad(&x, &g, &idx, d),
            );
        }
    }
}
