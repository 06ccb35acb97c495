//! How XLA:CPU (jaxlib 0.10.2) sums the 2-D convolutions it hands to
//! YNNPACK: those with 17 or more input or output features (the larger of
//! the two, in total), and the cotangents that are such convolutions in
//! turn (see `tensor::ops::conv_ynn` for which).
//!
//! XLA's `DefineConvolution` zero-pads the input, views it as a stencil
//! `[N, Ho, Wo, (G,) KH, KW, Cg]` and defines one YNNPACK dot with three
//! reduction dimensions: the group's channels `Cg` innermost, then the
//! window's columns and rows. So it is not a flattened `im2col` product:
//!
//! - The kernel is chosen from the output features per group and the
//!   channels alone ([`plan_with_taps`]), which gives `tile_k` partial
//!   sums per output; packing is decided as for a dot whose `m` is the
//!   output's width (a grouped convolution is always packed).
//! - Only the channels are cut into chunks (each covering every tap).
//!   Per chunk, one kernel call: partial sum `q` takes the channels
//!   `c ≡ q (mod tile_k)`, tap by tap (row-major), from `+0`; they are
//!   reduced as `(s0 + s1) + (s2 + s3)` and the call's result is added to
//!   the output so far (`v + acc`).
//! - The channels past the last multiple of `tile_k` run as one more call
//!   per tap, each rounded and added after the main part.
//! - The kernels picked are AVX-512 and FMA3 ones, which fuse their
//!   multiply-adds, except for one channel and at most four features,
//!   where SSE2's `8x4x1` wins: it rounds each product and adds it, and in
//!   a convolution its taps accumulate in one register (depthwise
//!   convolutions with a multiplier of at most 4).
//!
//! Modelled with a helper's study (XNNPACK `ynnpack/` of 2026-06-18, XLA's
//! `ynn_emitter.cc`) and checked against JAX: 0 of the outputs of 163
//! convolutions and cotangents differ (tests/fixtures/convs.json holds a
//! selection).

use std::ops::Range;
use std::sync::Arc;

use super::dot::{plan_with_taps, DotPlan};
use super::plan_cache::{cached, PlanCache};
use super::vectors::on_widest_vectors;

/// A convolution as XLA hands it to YNNPACK, per group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct YnnShape {
    /// The output's width: the rows of one dot call (YNNPACK's `m`).
    pub(crate) width: usize,
    /// How many such rows of outputs there are (images times output
    /// rows), which YNNPACK weighs when deciding to pack the kernel.
    pub(crate) rows_batch: usize,
    /// Window positions (the outer reduction dimensions).
    pub(crate) taps: usize,
    /// Input channels per group (the innermost reduction dimension).
    pub(crate) channels: usize,
    /// Output features per group.
    pub(crate) features: usize,
    /// Feature groups.
    pub(crate) groups: usize,
}

/// How YNNPACK sums one convolution's outputs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct YnnConvPlan {
    /// Partial sums per output, column tiles and their chunks of channels.
    plan: DotPlan,
    /// Whether the kernel fuses its multiply-adds.
    fma: bool,
}

thread_local! {
    static PLANS: PlanCache<YnnShape, YnnConvPlan> = PlanCache::new();
}

impl YnnConvPlan {
    /// [`YnnConvPlan::new`], made once per shape and thread.
    pub(crate) fn cached(shape: &YnnShape) -> Arc<YnnConvPlan> {
        cached(&PLANS, *shape, || YnnConvPlan::new(shape))
    }

    /// The plan of the convolution `shape`.
    pub(crate) fn new(shape: &YnnShape) -> YnnConvPlan {
        let YnnShape {
            width,
            rows_batch,
            taps,
            channels,
            features,
            groups,
        } = *shape;
        // A grouped convolution's kernel reaches the dot transposed (split
        // by group), which YNNPACK always packs.
        let (plan, fma) = if groups > 1 {
            plan_with_taps(
                1,
                channels,
                taps,
                features,
                true,
                groups * width * rows_batch,
                groups,
            )
        } else {
            plan_with_taps(width, channels, taps, features, false, rows_batch, 1)
        };
        YnnConvPlan { plan, fma }
    }

    /// Whether [`ynn_conv_sums`] has anything to add over `channels`
    /// channels, with `tails_only` as it would be called.
    pub(crate) fn rest(&self, channels: usize, tails_only: bool) -> bool {
        !tails_only || !channels.is_multiple_of(self.plan.tile_k)
    }

    /// For convolutions whose kernel fuses its multiply-adds and whose
    /// outputs are one column tile: `(tile_k, chunk)`, the main part's
    /// partial sums and chunks of channels, which the register tiles of
    /// `conv_fast` can run (each partial sum of each chunk one chain over
    /// the taps and every `tile_k`-th channel); [`ynn_conv_sums`] with
    /// `tails_only` then adds the rest.
    pub(crate) fn tiled(&self) -> Option<(usize, usize)> {
        match self.plan.tiles[..] {
            [(_, _, kc)] if self.fma => Some((self.plan.tile_k, kc.max(self.plan.tile_k))),
            _ => None,
        }
    }
}

/// Sums `out.len() / (groups * features)` rows of outputs of the
/// convolution `shape` into `out` (`[row, group, feature]`, row-major) in
/// YNNPACK's order. Output `(r, g, j)` is the sum over taps `t` and
/// channels `c` of `lhs(r, g, t)[c] * w[((g * taps + t) * channels + c) *
/// features + j]`; `lhs` gives the `channels` values tap `t` reads, or
/// `None` in the padding (zeros, which still decide the sign of a zero
/// sum). `columns(r)`: the features wanted in row `r` (within a group; the
/// others are left at 0). `tails_only`: `out` holds the sums of the
/// channels up to the last multiple of `tile_k` already (see
/// [`YnnConvPlan::tiled`]); only the remaining channels' are added.
pub(crate) fn ynn_conv_sums<'a, L, C>(
    plan: &YnnConvPlan,
    shape: &YnnShape,
    lhs: L,
    w: &[f32],
    columns: C,
    tails_only: bool,
    out: &mut [f32],
) where
    L: Fn(usize, usize, usize) -> Option<&'a [f32]> + Sync,
    C: Fn(usize) -> Range<usize> + Sync,
{
    use rayon::prelude::*;
    let row_len = shape.groups * shape.features;
    if row_len == 0 || (tails_only && shape.channels.is_multiple_of(plan.plan.tile_k)) {
        return;
    }
    let width = plan
        .plan
        .tiles
        .iter()
        .map(|&(a, b, _)| b - a)
        .max()
        .unwrap_or(0);
    let init = || (vec![0.0f32; 4 * width], vec![0.0f32; shape.channels]);
    out.par_chunks_mut(row_len)
        .enumerate()
        .for_each_init(init, |(lanes, zeros), (r, row)| {
            on_widest_vectors(
                #[inline(always)]
                || {
                    let cols = columns(r);
                    for g in 0..shape.groups {
                        let x = |t: usize| lhs(r, g, t).unwrap_or(zeros);
                        let w = &w[g * shape.taps * shape.channels * shape.features..];
                        let out = &mut row[g * shape.features..][..shape.features];
                        let parts = (&cols, tails_only);
                        if plan.fma {
                            group_sums::<true>(plan, shape, &x, w, parts, lanes, out);
                        } else {
                            group_sums::<false>(plan, shape, &x, w, parts, lanes, out);
                        }
                    }
                },
            )
        });
}

/// `acc + x * w`, fused or with the product rounded.
#[inline(always)]
fn mac<const FMA: bool>(x: f32, w: f32, acc: f32) -> f32 {
    if FMA {
        x.mul_add(w, acc)
    } else {
        acc + x * w
    }
}

/// One group's outputs of one row (see [`ynn_conv_sums`]): `x(t)` the
/// tap's channels, `w` the group's `[tap, channel, feature]` weights.
#[inline(always)]
fn group_sums<'a, const FMA: bool>(
    plan: &YnnConvPlan,
    shape: &YnnShape,
    x: &impl Fn(usize) -> &'a [f32],
    w: &[f32],
    (cols, tails_only): (&Range<usize>, bool),
    lanes: &mut [f32],
    out: &mut [f32],
) {
    let (taps, k1, f) = (shape.taps, shape.channels, shape.features);
    let tk = plan.plan.tile_k;
    let main = k1 / tk * tk;
    // Past the main part when it is done already.
    let start = if tails_only { main } else { 0 };
    for &(j0, j1, kc) in &plan.plan.tiles {
        let (a, b) = (j0.max(cols.start), j1.min(cols.end));
        if a >= b {
            continue;
        }
        let n = b - a;
        let out = &mut out[a..b];
        let mut first = start == 0;
        // Adds one call's partial sums, reduced, to the outputs so far.
        let mut finish = |lanes: &[f32], first: &mut bool| {
            for (j, o) in out.iter_mut().enumerate() {
                let l = |q: usize| lanes[q * n + j];
                let v = match tk {
                    1 => l(0),
                    2 => l(0) + l(1),
                    _ => (l(0) + l(1)) + (l(2) + l(3)),
                };
                *o = if *first { v } else { v + *o };
            }
            *first = false;
        };
        let mut s = start;
        while s < main {
            let e = (s + kc.max(tk)).min(main);
            let lanes = &mut lanes[..tk * n];
            lanes.fill(0.0);
            for t in 0..taps {
                let xs = x(t);
                for c in (s..e).step_by(tk) {
                    for q in 0..tk {
                        let xv = xs[c + q];
                        let wr = &w[(t * k1 + c + q) * f + a..][..n];
                        for (l, &wv) in lanes[q * n..][..n].iter_mut().zip(wr) {
                            *l = mac::<FMA>(xv, wv, *l);
                        }
                    }
                }
            }
            finish(lanes, &mut first);
            s = e;
        }
        if main < k1 {
            for t in 0..taps {
                let lanes = &mut lanes[..tk * n];
                lanes.fill(0.0);
                let xs = x(t);
                for c in main..k1 {
                    let q = c - main;
                    let wr = &w[(t * k1 + c) * f + a..][..n];
                    for (l, &wv) in lanes[q * n..][..n].iter_mut().zip(wr) {
                        *l = mac::<FMA>(xs[c], wv, *l);
                    }
                }
                finish(lanes, &mut first);
            }
        }
    }
}
