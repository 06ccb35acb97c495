//! BatchNorm's forward pass as XLA:CPU compiles it inside `jax.jit` (Flax's
//! `nn.jit` of a module holding a `BatchNorm`), measured against jaxlib
//! 0.10.2 on an AMD EPYC (AVX-512) host from the optimized HLO and the
//! kernels' machine code (`XLA_FLAGS=--xla_dump_to`).
//!
//! For `x` of shape `[..., C]` (the feature axis last, `R` rows) XLA emits
//! separate fusions, each compiled on its own by LLVM with multiply-adds
//! contracted:
//!
//! - `s1 = sum(x)` per column ([`column_sums`]) and `s2 = sum(x * x)`
//!   ([`sum_squares`]), each from `+0`; in `s2` LLVM contracts the
//!   products into the sums.
//! - `jnp.mean`'s division becomes a product by `c = 1/R` (an `f32`
//!   constant); with the momentum `m`, the running mean is
//!   `fma(ra_mean, m, s1 * c2)` where `c2 = (1 - m) * c` is folded into one
//!   constant ([`Step::MeanUpdate`]); the variance is
//!   `max(fma(s2, c, -(s1 c)²), 0)` ([`Step::Var`]) and its running
//!   average `fma(ra_var, m, var * (1 - m))` ([`Step::VarUpdate`]).
//! - `rsqrt(var + eps)` is XLA's rsqrt ([`super::math::rsqrt`]: the CPU's
//!   `rsqrtss` plus a Newton step, so the numbers are this CPU's).
//! - The output is `fma(x - mean, k, bias)` with `k = rsqrt(..) * scale`
//!   ([`Step::Affine`]); `x - mean` rounds `s1 * c` first, unless the
//!   normalization loop is not unrolled (many features), where the product
//!   is contracted into the difference ([`Step::Center`]).

use super::vectors::with_fma;

/// From this many elements XLA:CPU hands a reduction to YNNPACK.
pub(super) use super::ynn_reduce::YNN_MIN;

/// One step of the compiled forward pass; each has at most three inputs
/// (a replayed step's limit) and one output.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Step {
    /// `x [..., C]` → `s1 [C]`, the column sums ([`column_sums`]).
    Sums,
    /// `x [..., C]` → `s2 [C]`, the column sums of squares
    /// ([`sum_squares`]).
    Squares,
    /// `(s1, s2)` → the clipped variance; `c` is `1/R`.
    Var {
        /// `1/R` as an `f32`.
        c: f32,
    },
    /// `(s1, ra_mean)` → the new running mean.
    MeanUpdate {
        /// The momentum.
        m: f32,
        /// `(1 - m) * (1/R)`, folded in `f32` as XLA folds it.
        c2: f32,
    },
    /// `(var, ra_var)` → the new running variance.
    VarUpdate {
        /// The momentum.
        m: f32,
        /// `1 - m`.
        om: f32,
    },
    /// `(x, s1)` → `x - s1 * c`, the product rounded, except for the
    /// columns before `contracted`, where it is one fused multiply-add.
    Center {
        /// `1/R` as an `f32`.
        c: f32,
        /// The columns whose product is contracted come first.
        contracted: usize,
    },
    /// `(d, k, bias)` → `fma(d, k, bias)`, `k` and `bias` repeating along
    /// the rows.
    Affine,
}

impl Step {
    /// The output's shape, from the first input's.
    pub(crate) fn shape(self, first: &[usize]) -> Vec<usize> {
        match self {
            Step::Sums | Step::Squares => first.last().map_or_else(Vec::new, |&c| vec![c]),
            _ => first.to_vec(),
        }
    }

    /// `out` from the inputs, `first` being the first input's shape.
    pub(crate) fn forward(self, first: &[usize], ins: [&[f32]; 3], out: &mut [f32]) {
        with_fma(
            #[inline(always)]
            || self.forward_body(first, ins, out),
        )
    }

    /// The loops of [`Step::forward`].
    #[inline(always)]
    fn forward_body(self, first: &[usize], ins: [&[f32]; 3], out: &mut [f32]) {
        let [a, b, k] = ins;
        match self {
            Step::Sums => column_sums(a, first, out),
            Step::Squares => sum_squares(a, first, out),
            Step::Var { c } => {
                let unit = out.len() == 1;
                for ((o, &s1), &s2) in out.iter_mut().zip(a).zip(b) {
                    *o = variance(s1, s2, c, unit);
                }
            }
            Step::MeanUpdate { m, c2 } => {
                for ((o, &s1), &ra) in out.iter_mut().zip(a).zip(b) {
                    *o = ra.mul_add(m, s1 * c2);
                }
            }
            Step::VarUpdate { m, om } => {
                for ((o, &v), &ra) in out.iter_mut().zip(a).zip(b) {
                    *o = ra.mul_add(m, v * om);
                }
            }
            Step::Center { c, contracted } => {
                let n = b.len();
                for (row, x) in out.chunks_exact_mut(n).zip(a.chunks_exact(n)) {
                    for (j, ((o, &x), &s1)) in row.iter_mut().zip(x).zip(b).enumerate() {
                        *o = if j < contracted {
                            (-s1).mul_add(c, x)
                        } else {
                            x - s1 * c
                        };
                    }
                }
            }
            Step::Affine => {
                let n = b.len();
                for (row, d) in out.chunks_exact_mut(n).zip(a.chunks_exact(n)) {
                    for (((o, &d), &k), &bias) in row.iter_mut().zip(d).zip(b).zip(k) {
                        *o = d.mul_add(k, bias);
                    }
                }
            }
        }
    }
}

/// `max(s2 c - (s1 c)², 0)`, the first product contracted into the
/// difference. With a single feature XLA's constants are `f32[1]` arrays
/// and the algebraic simplifier reassociates `(s1 c)²` to `(s1 s1)(c c)`.
/// A NaN stays (LLVM's `maximum`), and `-0` becomes `+0`.
fn variance(s1: f32, s2: f32, c: f32, unit: bool) -> f32 {
    clip(unclipped_variance(s1, s2, c, unit))
}

/// `s2 c - (s1 c)²` before [`variance`] clips it at 0.
pub(super) fn unclipped_variance(s1: f32, s2: f32, c: f32, unit: bool) -> f32 {
    let m2 = if unit {
        (s1 * s1) * (c * c)
    } else {
        let mean = s1 * c;
        mean * mean
    };
    s2.mul_add(c, -m2)
}

/// `max(d, 0)` as LLVM's `maximum`: a NaN stays, `-0` becomes `+0`.
pub(super) fn clip(d: f32) -> f32 {
    if d.is_nan() || d > 0.0 {
        d
    } else {
        0.0
    }
}

/// The columns of `x - mean` whose `s1 * c` LLVM contracts into the
/// difference: none while it fully unrolls the loop over the `features`
/// (trip counts measured for each combination of scale and bias: from 192,
/// 240 or 288 features it does not), else all but the last
/// `features % 16`, which its remainder loop handles after hoisting the
/// product.
pub(crate) fn contracted_columns(features: usize, use_scale: bool, use_bias: bool) -> usize {
    let unrolled_below = match (use_scale, use_bias) {
        (true, true) => 192,
        (true, false) | (false, true) => 240,
        (false, false) => 288,
    };
    if features < unrolled_below {
        0
    } else {
        features - features % 16
    }
}

/// The reduced axes of `shape` (all but the last) and the number of
/// features.
pub(super) fn split(shape: &[usize]) -> (&[usize], usize) {
    match shape.split_last() {
        Some((&c, dims)) => (dims, c),
        None => (&[], 1),
    }
}

/// `s1`: the sum of each column of `x` (row-major, `shape`, features
/// last) as the jitted BatchNorm sums it: from 4,096 elements YNNPACK's
/// order ([`super::ynn_reduce::ynn_sum`]); below, one reduced axis
/// (axes of length 1 do not count) in XLA's windows of 32
/// ([`super::reduce::xla_row_sum`]), several in the order of a reduce over
/// leading axes ([`super::reduce::reduce_all`], not vectorized).
pub(crate) fn column_sums(x: &[f32], shape: &[usize], out: &mut [f32]) {
    let (dims, c) = split(shape);
    if x.len() >= YNN_MIN && x.len() > c {
        // YNNPACK's order, which depends on the axes' lengths (its tiles).
        let leading = (1u32 << (shape.len() - 1)) - 1;
        return super::ynn_reduce::ynn_sum(x, shape, leading, out);
    }
    if loops(dims) <= 1 && x.len() <= super::reduce::TREE_WINDOW * c {
        // At most 32 rows, each column left to right from +0: row by row
        // is the same order.
        out.fill(0.0);
        for row in x.chunks_exact(c) {
            out.iter_mut().zip(row).for_each(|(o, &v)| *o += v);
        }
        return;
    }
    let mut lane = Vec::with_capacity(x.len() / c.max(1));
    for (j, o) in out.iter_mut().enumerate() {
        lane.clear();
        lane.extend(x[j..].iter().step_by(c).copied());
        *o = if loops(dims) <= 1 {
            super::reduce::xla_row_sum(&lane)
        } else {
            super::reduce::reduce_all(&lane, dims, super::reduce::Loops::InOrder)
        };
    }
}

/// The number of loops over `dims` (axes of length 1 have none).
pub(super) fn loops(dims: &[usize]) -> usize {
    dims.iter().filter(|&&d| d != 1).count()
}

/// `s2`: the sum of the squares of each column, as the jitted BatchNorm
/// computes it.
///
/// - From 4,096 elements, or with a reduced axis longer than 32 (which
///   XLA first reduces in windows), the squares are rounded, then summed
///   as [`column_sums`] sums.
/// - One reduced axis (at most 32 rows): LLVM unrolls the rows, folds the
///   `+0` start into the first square and contracts the others:
///   `fma(x0, x0, x1²)`, then `fma(xi, xi, acc)`.
/// - Several: the loop nest of [`super::reduce`]'s `nest_sum` with every
///   product contracted, from `+0`: the innermost loop unrolled, the next
///   one vectorized when its trip counts allow
///   ([`super::reduce::vector_factor`]).
pub(crate) fn sum_squares(x: &[f32], shape: &[usize], out: &mut [f32]) {
    let (dims, c) = split(shape);
    if x.len() >= YNN_MIN || dims.iter().any(|&d| d > super::reduce::TREE_WINDOW) {
        let squares: Vec<f32> = x.iter().map(|&v| v * v).collect();
        return column_sums(&squares, shape, out);
    }
    if loops(dims) <= 1 {
        // At most 32 rows, unrolled: `fma(x0, x0, x1²)`, then
        // `fma(xi, xi, acc)`; row by row is the same order.
        let mut rows = x.chunks_exact(c);
        match (rows.next(), rows.next()) {
            (Some(r0), Some(r1)) => {
                for ((o, &x0), &x1) in out.iter_mut().zip(r0).zip(r1) {
                    *o = x0.mul_add(x0, x1 * x1);
                }
            }
            (Some(r0), None) => out.iter_mut().zip(r0).for_each(|(o, &x0)| *o = x0 * x0),
            _ => out.fill(0.0),
        }
        for row in rows {
            out.iter_mut()
                .zip(row)
                .for_each(|(o, &v)| *o = v.mul_add(v, *o));
        }
        return;
    }
    let mut lane = Vec::with_capacity(x.len() / c.max(1));
    for (j, o) in out.iter_mut().enumerate() {
        lane.clear();
        lane.extend(x[j..].iter().step_by(c).copied());
        *o = nest_squares(&lane, dims);
    }
}

/// The squares of one column over several reduced axes (each at most 32),
/// by the loop nest as LLVM vectorizes it.
fn nest_squares(v: &[f32], dims: &[usize]) -> f32 {
    let loops: Vec<usize> = dims.iter().copied().filter(|&d| d != 1).collect();
    let [.., b, c] = loops[..] else {
        return fold_squares(0.0, v);
    };
    let vf = super::reduce::vector_factor(b, c);
    if vf == 0 {
        return fold_squares(0.0, v);
    }
    super::reduce::vector_nest(0.0, v, (b, c, vf), |lane, x| x.mul_add(x, lane))
}

/// `acc` plus the squares of `v`, left to right, each contracted.
fn fold_squares(acc: f32, v: &[f32]) -> f32 {
    v.iter().fold(acc, |a, &x| x.mul_add(x, a))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// XLA's order for six rows, as read from its machine code:
    /// `fma(x5, x5, fma(x4, x4, ... fma(x0, x0, x1 * x1)))`.
    #[test]
    fn unrolled_squares_fold_the_first_two_rows() {
        let v = [1.0f32 + f32::EPSILON, 3.0, -2.5, 0.1, 7.0, 1e-3];
        let mut want = v[0].mul_add(v[0], v[1] * v[1]);
        for &x in &v[2..] {
            want = x.mul_add(x, want);
        }
        let mut got = [0.0f32];
        sum_squares(&v, &[6, 1], &mut got);
        assert_eq!(got[0].to_bits(), want.to_bits());
    }

    #[test]
    fn few_features_are_never_contracted() {
        assert_eq!(contracted_columns(191, true, true), 0);
        assert_eq!(contracted_columns(200, true, true), 192);
        assert_eq!(contracted_columns(239, false, true), 0);
        assert_eq!(contracted_columns(300, false, false), 288);
    }
}
