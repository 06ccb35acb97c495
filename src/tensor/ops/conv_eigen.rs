//! The convolutions XLA:CPU keeps on Eigen's contraction whose sums Eigen
//! cuts ([`crate::xla::eigen_conv`]), and their operands in the form
//! Eigen contracts them: per group, patches `[P, K]` by a kernel
//! `[K, F/G]`.
//!
//! JAX computes each cotangent as a convolution of its own, which Eigen
//! runs as such:
//! - the forward pass: patches of the input (taps row-major, the group's
//!   input features innermost) by the kernel;
//! - the input's cotangent (stride 1): patches of the output's cotangent
//!   over the flipped kernel's taps (the group's outputs innermost), by
//!   the kernel laid out `[tap, out, in]`;
//! - the kernel's cotangent (one group): the input with batch and features
//!   swapped, its rows the input features times the taps, convolved over
//!   the output positions (row-major, the batch innermost) with the
//!   cotangent; of a depthwise convolution, the diagonal of that dense
//!   convolution (XLA computes all of it and masks the rest);
//! - the kernel's cotangent (several groups, not depthwise): a 3-D
//!   convolution whose third axis enumerates the groups, with input
//!   dilation `G` on it (`EigenConv3D` on volume patches), see
//!   [`grouped_kernel_grad`].

use super::conv::{weight_rows, weights, Dims};
use crate::xla::eigen_conv::{image_patch_costs, EigenConvPlan, VOLUME_PATCH_COSTS};
use crate::xla::eigen_dot::{Machine, OperandCosts};
use crate::xla::plan_cache::{cached, PlanCache};
use std::sync::Arc;

/// Which computations of a convolution run on Eigen with cut sums; each
/// plan is made (or looked up) when its pass runs, so a forward pass
/// alone plans only itself.
#[derive(Clone, Copy, Debug)]
pub(crate) struct EigenRoutes {
    d: Dims,
    /// Whether XLA runs the (forward, input's cotangent, kernel's
    /// cotangent) on Eigen's generic 2-D convolution.
    on: (bool, bool, bool),
    /// Without strides or dilations: the convolutions whose one-column
    /// contractions were measured in oneDNN's matrix-vector order (others
    /// keep their plain route).
    unit: bool,
    /// Whether XLA runs the kernel's cotangent, if grouped and not
    /// depthwise, on Eigen's 3-D convolution.
    grouped: bool,
}

impl EigenRoutes {
    /// The routes of a convolution with sizes `d` (see the fields).
    pub(crate) fn of(d: &Dims, on: (bool, bool, bool), unit: bool, grouped: bool) -> EigenRoutes {
        EigenRoutes {
            d: *d,
            on,
            unit,
            grouped,
        }
    }

    /// The forward pass's plan (`None`: another route, or sums the plain
    /// routes give).
    pub(crate) fn forward(&self) -> Option<Arc<EigenConvPlan>> {
        let d = &self.d;
        self.plan(self.on.0, d.n * d.p, d.t * d.cg, d.og(), d.groups)
    }

    /// The input's cotangent's plan.
    pub(crate) fn input_grad(&self) -> Option<Arc<EigenConvPlan>> {
        let d = &self.d;
        self.plan(self.on.1, d.n * d.s, d.t * d.og(), d.cg, d.groups)
    }

    /// The kernel's cotangent's plan: one group, or the dense convolution
    /// of a depthwise one.
    pub(crate) fn kernel_grad(&self) -> Option<Arc<EigenConvPlan>> {
        let d = &self.d;
        let on = self.on.2 && (d.groups == 1 || self.depthwise());
        self.plan(on, d.c * d.t, d.p * d.n, d.o, 1)
    }

    /// The plan of the kernel's cotangent of a grouped convolution that is
    /// not depthwise ([`grouped_kernel_grad`]). Every plan, even one
    /// range: its terms include the other groups' zeros, which no plain
    /// route visits (one column: they take `gemv_t`'s lanes).
    pub(crate) fn grouped_kernel_grad(&self) -> Option<Arc<EigenConvPlan>> {
        let d = &self.d;
        let (rows, terms) = (d.cg * d.t * d.groups, d.p * d.groups * d.n);
        let on = self.grouped && d.groups > 1 && !self.depthwise();
        (on && ![rows, terms, d.og()].contains(&0))
            .then(|| cached_plan(rows, terms, d.og(), VOLUME_PATCH_COSTS))
    }

    fn depthwise(&self) -> bool {
        let d = &self.d;
        d.cg == 1 && d.og() == 1 && d.groups == d.c
    }

    fn plan(
        &self,
        on: bool,
        rows: usize,
        terms: usize,
        columns: usize,
        groups: usize,
    ) -> Option<Arc<EigenConvPlan>> {
        (on && ![rows, terms, columns].contains(&0))
            .then(|| cached_plan(rows, terms, columns, image_patch_costs(groups)))
            .filter(|p| !p.is_plain() && (columns != 1 || self.unit))
    }
}

/// The arguments of an [`EigenConvPlan`] on this machine (the costs as
/// bits).
type PlanKey = (usize, usize, usize, [u64; 3]);

thread_local! {
    static PLANS: PlanCache<PlanKey, EigenConvPlan> = PlanCache::new();
}

/// [`EigenConvPlan::new`] on this machine, made once per shape and thread.
fn cached_plan(
    rows: usize,
    terms: usize,
    columns: usize,
    costs: OperandCosts,
) -> Arc<EigenConvPlan> {
    let bits = [costs.lhs, costs.rhs, costs.rhs_bytes].map(f64::to_bits);
    cached(&PLANS, (rows, terms, columns, bits), || {
        EigenConvPlan::new(rows, terms, columns, costs, &Machine::current())
    })
}

/// The forward pass: `x` `[n, s, c]`, kernel `[tap, cg, o]`, `idx` the
/// window's input positions (`None`: padding).
pub(crate) fn forward(
    x: &[f32],
    k: &[f32],
    idx: &[Option<usize>],
    d: Dims,
    plan: &EigenConvPlan,
) -> Vec<f32> {
    let og = d.og();
    let mut y = vec![0.0f32; d.n * d.p * d.o];
    for g in 0..d.groups {
        let w = weight_rows(1, d.t * d.cg, og, |_, i| &d.kernel_row(k, i)[g * og..]);
        let sums = plan.sums(&w, |r, a| {
            let (b, pos) = (r / d.p, r % d.p);
            for (t, taps) in a.chunks_exact_mut(d.cg.max(1)).enumerate() {
                match idx[pos * d.t + t] {
                    Some(s) => taps.copy_from_slice(&x[(b * d.s + s) * d.c + g * d.cg..][..d.cg]),
                    None => taps.fill(0.0),
                }
            }
        });
        for (r, row) in sums.chunks_exact(og.max(1)).enumerate() {
            y[r * d.o + g * og..][..og].copy_from_slice(row);
        }
    }
    y
}

/// The input's cotangent (stride 1): `gr` the output's cotangent
/// `[n, p, o]`, `inv[s * t + tap]` the output position reading input `s`
/// through `tap`.
pub(crate) fn input_grad(
    gr: &[f32],
    k: &[f32],
    inv: &[Option<usize>],
    d: Dims,
    plan: &EigenConvPlan,
) -> Vec<f32> {
    let og = d.og();
    let mut dx = vec![0.0f32; d.n * d.s * d.c];
    for g in 0..d.groups {
        let w = weights(1, d.t * og, d.cg, |_, i, j| d.flipped_kernel(k, g, i, j));
        let sums = plan.sums(&w, |r, a| {
            let (b, s) = (r / d.s, r % d.s);
            for (tt, outs) in a.chunks_exact_mut(og.max(1)).enumerate() {
                match inv[s * d.t + d.t - 1 - tt] {
                    Some(m) => outs.copy_from_slice(&gr[(b * d.p + m) * d.o + g * og..][..og]),
                    None => outs.fill(0.0),
                }
            }
        });
        for (r, row) in sums.chunks_exact(d.cg.max(1)).enumerate() {
            dx[r * d.c + g * d.cg..][..d.cg].copy_from_slice(row);
        }
    }
    dx
}

/// The kernel's cotangent, `[tap, cg, o]`, of one group or depthwise (the
/// dense convolution's diagonal): rows `(input feature, tap)`, terms
/// `(output position, image)`.
pub(crate) fn kernel_grad(
    x: &[f32],
    gr: &[f32],
    idx: &[Option<usize>],
    d: Dims,
    plan: &EigenConvPlan,
) -> Vec<f32> {
    // The cotangent `[n, p, o]` as `[p, n, o]`: term `(m, b)`'s row.
    let w = weight_rows(1, d.p * d.n, d.o, |_, i| d.cotangent_row(gr, i));
    let sums = plan.sums(&w, |r, a| {
        let (c, t) = (r / d.t, r % d.t);
        for (m, images) in a.chunks_exact_mut(d.n.max(1)).enumerate() {
            match idx[m * d.t + t] {
                Some(s) => {
                    for (b, v) in images.iter_mut().enumerate() {
                        *v = x[(b * d.s + s) * d.c + c];
                    }
                }
                None => images.fill(0.0),
            }
        }
    });
    let mut dk = vec![0.0f32; d.t * d.cg * d.o];
    for c in 0..d.c {
        for t in 0..d.t {
            let row = &sums[(c * d.t + t) * d.o..][..d.o];
            if d.groups == 1 {
                dk[(t * d.cg + c) * d.o..][..d.o].copy_from_slice(row);
            } else {
                // Depthwise: feature `c`'s own output.
                dk[t * d.c + c] = row[c];
            }
        }
    }
    dk
}

/// The kernel's cotangent, `[tap, cg, o]`, of a grouped convolution that
/// is not depthwise, as XLA computes it: one 3-D convolution, its third
/// axis the groups with input dilation `G`, on Eigen's volume patches.
/// Rows `p = (c * t + tap) * G + g`, terms `j = (position * G + z) * n +
/// image` (positions row-major); a term is the input's `x[image, input of
/// (position, tap), g * cg + c]` when `z == g` and the tap is inside the
/// input, else a zero that Eigen still counts (in its plan, and in
/// `gemv_t`'s lanes for one output per group); the kernel's term `j` is
/// the cotangent `gr[image, position, z * og + f]`.
pub(crate) fn grouped_kernel_grad(
    x: &[f32],
    gr: &[f32],
    idx: &[Option<usize>],
    d: Dims,
    plan: &EigenConvPlan,
) -> Vec<f32> {
    let (og, g_n) = (d.og(), d.groups);
    // `[position, z, image, f]`: the cotangent, term by term.
    let w = weight_rows(d.p * g_n, d.n, og, |mz, b| {
        let (m, z) = (mz / g_n, mz % g_n);
        &d.cotangent_row(gr, m * d.n + b)[z * og..]
    });
    let sums = plan.sums(&w, |r, a| {
        let (c, t, g) = (r / (d.t * g_n), r / g_n % d.t, r % g_n);
        a.fill(0.0);
        for m in 0..d.p {
            if let Some(s) = idx[m * d.t + t] {
                let images = &mut a[(m * g_n + g) * d.n..][..d.n];
                for (b, v) in images.iter_mut().enumerate() {
                    *v = x[(b * d.s + s) * d.c + g * d.cg + c];
                }
            }
        }
    });
    // Row `(c, tap, g)`'s `og` sums are `dk[tap, c, g * og + f]`.
    let mut dk = vec![0.0f32; d.t * d.cg * d.o];
    for (r, row) in sums.chunks_exact(og).enumerate() {
        let (c, t, g) = (r / (d.t * g_n), r / g_n % d.t, r % g_n);
        dk[(t * d.cg + c) * d.o + g * og..][..og].copy_from_slice(row);
    }
    dk
}
