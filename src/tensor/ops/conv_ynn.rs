//! The convolutions XLA:CPU hands to YNNPACK, and their operands in the
//! form YNNPACK sums them ([`crate::xla::ynn_conv`]).
//!
//! JAX computes each cotangent of a convolution as a convolution of its
//! own, and XLA (`IsConvolutionOpSupportedByYnn`) offers each to YNNPACK
//! when it is 2-D, has no input dilation, the larger of its input and
//! output features (in total) is at least 17, and neither its output nor
//! its window is larger than its input:
//! - the forward pass as written;
//! - the input's cotangent (stride 1): the cotangent convolved with the
//!   flipped kernel, whose input features are the convolution's outputs;
//!   with strides it has an input dilation and never goes;
//! - the kernel's cotangent (one group): the input, batch and features
//!   swapped, convolved with the cotangent over a window of the output's
//!   size, whose input features are the batch; of a depthwise convolution
//!   (multiplier 1), the diagonal of that dense convolution. Other grouped
//!   ones are 3-D convolutions with an input dilation to XLA and never go.

use super::conv::{weight_rows, weights, Dims};
use super::conv_fast::{self, Isa, Lanes};
use crate::xla::ynn_conv::{ynn_conv_sums, YnnConvPlan, YnnShape};

/// The main part of a convolution's sums on `conv_fast`'s register tiles
/// where the plan and the CPU (`isa`) allow it (`chain(isa, lanes)`:
/// every output's partial sums over the taps and one chunk of channels,
/// reduced), else zeros; and whether it ran (the rest is then only the
/// channels past the last multiple of `tile_k`).
fn main_part(
    isa: Option<Isa>,
    plan: &YnnConvPlan,
    channels: usize,
    outputs: usize,
    chain: impl Fn(Isa, Lanes) -> Vec<f32>,
) -> (Vec<f32>, bool) {
    let (Some((tile_k, chunk)), Some(isa)) = (plan.tiled(), isa) else {
        return (vec![0.0; outputs], false);
    };
    let main = channels / tile_k * tile_k;
    let mut acc: Option<Vec<f32>> = None;
    let mut first = 0;
    while first < main {
        let end = (first + chunk).min(main);
        let lanes = Lanes {
            first,
            count: end - first,
            tile_k,
        };
        // Each chunk's sums added to those before (`v + acc`).
        let mut v = chain(isa, lanes);
        if let Some(a) = &acc {
            v.iter_mut().zip(a).for_each(|(v, a)| *v += a);
        }
        acc = Some(v);
        first = end;
    }
    (acc.unwrap_or_else(|| vec![0.0; outputs]), true)
}

/// Whether XLA hands a 2-D convolution to YNNPACK: `features` its input
/// and output features in total; `input`, `output` and `window` its
/// spatial sizes.
fn offered(features: (usize, usize), input: &[usize], output: &[usize], window: &[usize]) -> bool {
    input.len() == 2
        && features.0.max(features.1) >= 17
        && (0..2).all(|i| output[i] <= input[i] && window[i] <= input[i])
}

/// Which of a convolution's three computations YNNPACK runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct YnnRoutes {
    /// The forward pass.
    pub(crate) forward: bool,
    /// The input's cotangent.
    pub(crate) input_grad: bool,
    /// The kernel's cotangent.
    pub(crate) kernel_grad: bool,
}

impl YnnRoutes {
    /// The routes of a convolution with sizes `d`, spatial sizes `spatial`
    /// (input), `out` and `window`, without input dilation when `plain`
    /// and stride 1 when `unit_strides`; `swapped`: whether XLA swaps the
    /// operands of the (input, kernel) cotangents' convolutions (it then
    /// runs them as its own loop).
    pub(crate) fn of(
        d: &Dims,
        (spatial, out, window): (&[usize], &[usize], &[usize]),
        plain: bool,
        unit_strides: bool,
        swapped: (bool, bool),
    ) -> YnnRoutes {
        if !plain {
            return YnnRoutes::default();
        }
        // A depthwise convolution with a multiplier above 1 has its
        // kernel's cotangent made a 3-D convolution with an input dilation
        // (seen in XLA's HLO), like other grouped ones.
        let depthwise = d.cg == 1 && d.groups == d.c && d.og() == 1;
        YnnRoutes {
            forward: offered((d.c, d.o), spatial, out, window),
            input_grad: unit_strides && !swapped.0 && offered((d.o, d.c), out, spatial, window),
            kernel_grad: (d.groups == 1 || depthwise)
                && !swapped.1
                && offered((d.n, d.o), spatial, window, out),
        }
    }
}

/// The forward pass: `x` `[n, s, c]`, kernel `[tap, cg, o]`, `idx` the
/// window's input positions; `out` the output's spatial sizes.
pub(crate) fn forward(
    x: &[f32],
    k: &[f32],
    idx: &[Option<usize>],
    d: Dims,
    isa: Option<Isa>,
    out: &[usize],
) -> Vec<f32> {
    let shape = YnnShape {
        width: out[1],
        rows_batch: d.n * out[0],
        taps: d.t,
        channels: d.cg,
        features: d.og(),
        groups: d.groups,
    };
    let plan = YnnConvPlan::cached(&shape);
    let (mut y, tails) = main_part(isa, &plan, d.cg, d.n * d.p * d.o, |isa, lanes| {
        conv_fast::forward_lanes(isa, x, k, idx, d, lanes)
    });
    if plan.rest(d.cg, tails) {
        let og = d.og();
        let w = weight_rows(d.groups, d.t * d.cg, og, |g, i| {
            &d.kernel_row(k, i)[g * og..]
        });
        let lhs = |r: usize, g: usize, t: usize| {
            let (n, m) = (r / d.p, r % d.p);
            idx[m * d.t + t].map(|s| &x[(n * d.s + s) * d.c + g * d.cg..][..d.cg])
        };
        ynn_conv_sums(&plan, &shape, lhs, &w, |_| 0..shape.features, tails, &mut y);
    }
    y
}

/// The input's cotangent: the cotangent `g` `[n, p, o]` convolved with the
/// flipped kernel; `inv[s * t + tap]` the output position reading input
/// `s` through `tap`; `spatial` the input's spatial sizes.
pub(crate) fn input_grad(
    g: &[f32],
    k: &[f32],
    inv: &[Option<usize>],
    d: Dims,
    isa: Option<Isa>,
    spatial: &[usize],
) -> Vec<f32> {
    let og = d.og();
    let shape = YnnShape {
        width: spatial[1],
        rows_batch: d.n * spatial[0],
        taps: d.t,
        channels: og,
        features: d.cg,
        groups: d.groups,
    };
    let plan = YnnConvPlan::cached(&shape);
    let (mut dx, tails) = main_part(isa, &plan, og, d.n * d.s * d.c, |isa, lanes| {
        conv_fast::input_grad_lanes(isa, g, k, inv, d, lanes)
    });
    if plan.rest(og, tails) {
        // The flipped kernel's channels are the group's outputs, its
        // features the group's inputs.
        let w = weights(d.groups, d.t * og, d.cg, |grp, i, j| {
            d.flipped_kernel(k, grp, i, j)
        });
        let lhs = |r: usize, grp: usize, t: usize| {
            let (n, s) = (r / d.s, r % d.s);
            inv[s * d.t + d.t - 1 - t].map(|m| &g[(n * d.p + m) * d.o + grp * og..][..og])
        };
        let all = |_| 0..shape.features;
        ynn_conv_sums(&plan, &shape, lhs, &w, all, tails, &mut dx);
    }
    dx
}

/// The kernel's cotangent (one group, or depthwise): the input with batch
/// and features swapped, `[c, s, n]`, convolved with the cotangent `[p, n,
/// o]` over windows of the output's size; the kernel's taps are the
/// output positions of that convolution (`window` the kernel's spatial
/// sizes), the cotangent's positions its taps.
pub(crate) fn kernel_grad(
    x: &[f32],
    g: &[f32],
    idx: &[Option<usize>],
    d: Dims,
    isa: Option<Isa>,
    window: &[usize],
) -> Vec<f32> {
    let shape = YnnShape {
        width: window[1],
        rows_batch: d.c * window[0],
        taps: d.p,
        channels: d.n,
        features: d.o,
        groups: 1,
    };
    // Rows: kernel tap, then input feature (the cotangent's layout when
    // there is one group; a depthwise one keeps each row's own features,
    // on the plain loops).
    let plan = YnnConvPlan::cached(&shape);
    let (mut dense, tails) = if d.groups == 1 {
        main_part(isa, &plan, d.n, d.t * d.c * d.o, |isa, lanes| {
            conv_fast::kernel_grad_lanes(isa, x, g, idx, d, lanes)
        })
    } else {
        (vec![0.0f32; d.t * d.c * d.o], false)
    };
    if plan.rest(d.n, tails) {
        let mut xt = vec![0.0f32; x.len()];
        for n in 0..d.n {
            for s in 0..d.s {
                for c in 0..d.c {
                    xt[(c * d.s + s) * d.n + n] = x[(n * d.s + s) * d.c + c];
                }
            }
        }
        let w = weight_rows(1, d.p * d.n, d.o, |_, i| d.cotangent_row(g, i));
        let lhs = |r: usize, _: usize, m: usize| {
            let (t, c) = (r / d.c, r % d.c);
            idx[m * d.t + t].map(|s| &xt[(c * d.s + s) * d.n..][..d.n])
        };
        let og = d.og();
        let columns = |r: usize| {
            if d.groups == 1 {
                0..d.o
            } else {
                let c = r % d.c;
                c * og..(c + 1) * og
            }
        };
        ynn_conv_sums(&plan, &shape, lhs, &w, columns, tails, &mut dense);
    }
    if d.groups == 1 {
        return dense;
    }
    // Depthwise: kernel element (tap, 0, f) is the dense one of input
    // feature f / og.
    let og = d.og();
    let mut dk = vec![0.0f32; d.t * d.o];
    for t in 0..d.t {
        for f in 0..d.o {
            dk[t * d.o + f] = dense[(t * d.c + f / og) * d.o + f];
        }
    }
    dk
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::ops::conv::{window_indices, ConvSpec};

    /// Hashed values in `[-2, 2)`, a few exact zeros among them.
    fn values(n: usize, seed: u64) -> Vec<f32> {
        (0..n as u64)
            .map(|i| {
                let h = (i * 2654435761 + seed * 40503) % (1 << 32);
                if h.is_multiple_of(13) {
                    0.0
                } else {
                    (h as f64 / 4294967296.0 * 4.0 - 2.0) as f32
                }
            })
            .collect()
    }

    /// The register tiles (where this CPU has them) give the plain loops'
    /// bits for the three computations: partial sums of 1, 2 and 4,
    /// leftover channels, chunks of channels, groups.
    #[test]
    fn tiles_equal_the_plain_loops() {
        let Some(isa) = Isa::detect() else {
            return;
        };
        // (n, h, w, c, kh, kw, f, groups)
        let cases = [
            (2, 6, 5, 17, 3, 3, 8, 1),
            (2, 6, 6, 16, 3, 3, 32, 1),
            (1, 5, 5, 24, 3, 3, 64, 1),
            (2, 4, 4, 64, 3, 3, 64, 1),
            (1, 4, 4, 130, 3, 3, 32, 1),
            (17, 4, 4, 8, 3, 3, 8, 1),
            (2, 5, 5, 34, 3, 3, 8, 2),
            (2, 5, 5, 64, 3, 3, 64, 4),
        ];
        for (i, &(n, h, w, c, kh, kw, f, groups)) in cases.iter().enumerate() {
            let spec = ConvSpec {
                padding: vec![(kh / 2, kh / 2), (kw / 2, kw / 2)],
                feature_group_count: groups,
                ..ConvSpec::new(2)
            };
            let (out, idx) = window_indices("test", &[h, w], &[kh, kw], &spec).unwrap();
            let d = Dims {
                n,
                s: h * w,
                c,
                t: kh * kw,
                cg: c / groups,
                o: f,
                p: out.iter().product(),
                groups,
            };
            let mut inv = vec![None; d.s * d.t];
            for (j, src) in idx.iter().enumerate() {
                if let Some(s) = src {
                    inv[s * d.t + j % d.t] = Some(j / d.t);
                }
            }
            let x = values(n * h * w * c, 3 * i as u64 + 1);
            let k = values(d.t * d.cg * f, 3 * i as u64 + 2);
            let g = values(n * d.p * f, 3 * i as u64 + 3);
            let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
            let what = format!("case {i}");
            assert_eq!(
                bits(forward(&x, &k, &idx, d, Some(isa), &out)),
                bits(forward(&x, &k, &idx, d, None, &out)),
                "{what}: forward"
            );
            assert_eq!(
                bits(input_grad(&g, &k, &inv, d, Some(isa), &[h, w])),
                bits(input_grad(&g, &k, &inv, d, None, &[h, w])),
                "{what}: input gradient"
            );
            if groups == 1 {
                assert_eq!(
                    bits(kernel_grad(&x, &g, &idx, d, Some(isa), &[kh, kw])),
                    bits(kernel_grad(&x, &g, &idx, d, None, &[kh, kw])),
                    "{what}: kernel gradient"
                );
            }
        }
    }
}
