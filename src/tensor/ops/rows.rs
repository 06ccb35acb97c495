//! Row kernels: reductions and softmax along the last axis of row-major
//! data, shared by eager operations and compiled steps so that both compute
//! the same bits. The softmax kernels compute as XLA:CPU does in each of
//! JAX's ways of running a softmax ([`Softmax`]), with YNNPACK's sums and
//! `exp` from 4,096 elements.

use crate::xla::math as xla_math;
use crate::xla::reduce::{xla_row_sum, TREE_WINDOW};
use crate::xla::vectors::on_widest_vectors;
use crate::xla::ynn_exp::ynn_exp;
use crate::xla::ynn_reduce::{self, YNN_MIN};

/// NaN-propagating max, as XLA's reduce_max.
#[inline(always)]
pub(crate) fn nan_max(acc: f32, x: f32) -> f32 {
    if acc.is_nan() || x.is_nan() {
        f32::NAN
    } else {
        acc.max(x)
    }
}

/// The row maximum (NaN-propagating; the order does not matter).
#[inline(always)]
fn row_max(row: &[f32]) -> f32 {
    row.iter().fold(f32::NEG_INFINITY, |a, &v| nan_max(a, v))
}

/// `e = exp(x - max)` of one row into `e`, returning `sum(e)` in XLA's order.
#[inline(always)]
pub(crate) fn shifted_exp(row: &[f32], e: &mut [f32]) -> f32 {
    let m = row_max(row);
    for (o, &v) in e.iter_mut().zip(row) {
        *o = xla_math::exp(v - m);
    }
    xla_row_sum(e)
}

/// Which of JAX's computations of a softmax a row kernel reproduces. They
/// differ only from [`YNN_MIN`] input elements on, where XLA hands the
/// row sums to YNNPACK, and the `exp` with them where it fuses one into
/// such a sum (see [`softmax_rows`], [`log_softmax_rows`]); below, in the
/// softmax's backward pass only.
/// Whether the rows of `n` elements of a tensor of `shape` are a single
/// row beside other axes (all of extent 1): YNNPACK then rewrites a jitted
/// sum of products over the row into a dot (its `rewrite_sum_to_dot`
/// needs a kept axis of extent 1), summed in the dot's order
/// ([`crate::xla::dot::vector_dot`]); a 1-D tensor keeps no axis.
pub(crate) fn dot_row(shape: &[usize], n: usize) -> bool {
    shape.len() >= 2 && shape.iter().product::<usize>() == n
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Softmax {
    /// JAX's eager operations: `jax.nn.softmax` runs op by op (jax
    /// 0.10.2), `jax.nn.log_softmax` as its own jitted function.
    Eager,
    /// Eager, under a differentiation (`jax.vjp`, `jax.grad`): JAX's
    /// forward program of `log_softmax` then also returns `exp(x - max)`
    /// for the backward pass, which takes the `exp` out of the sum.
    Traced,
    /// Inside one jitted computation ([`in_compiled_region`]).
    ///
    /// [`in_compiled_region`]: crate::tensor::in_compiled_region
    Jitted,
}

/// `x - max` of each row of `x` into `d`.
#[inline(always)]
fn shifted(x: &[f32], n: usize, d: &mut [f32]) {
    for (drow, row) in d.chunks_exact_mut(n).zip(x.chunks_exact(n)) {
        let m = row_max(row);
        for (o, &v) in drow.iter_mut().zip(row) {
            *o = v - m;
        }
    }
}

/// `exp(x - max)` of every row of `x` into `e`, with YNNPACK's `exp` when
/// `ynn`, and the row sums of `e` in YNNPACK's order (`fused`: see
/// [`ynn_reduce::row_sums`]).
#[inline(always)]
fn ynn_shifted_exp(x: &[f32], n: usize, ynn: bool, fused: bool, e: &mut [f32]) -> Vec<f32> {
    shifted(x, n, e);
    // Two loops rather than a function pointer, so that each inlines.
    if ynn {
        e.iter_mut().for_each(|v| *v = ynn_exp(*v));
    } else {
        e.iter_mut().for_each(|v| *v = xla_math::exp(*v));
    }
    let mut s = vec![0.0f32; x.len() / n];
    ynn_reduce::row_sums(e, n, fused, &mut s);
    s
}

/// `jax.nn.softmax` of each row: `e = exp(x - max)`, `s = sum(e)`, then
/// `e * (1 / s)` (XLA turns the division by the broadcast sum into a
/// multiplication by its reciprocal). Below [`YNN_MIN`] elements the sums
/// are XLA's own, eagerly and jitted alike; from there YNNPACK sums the
/// stored `e`, which is XLA's `exp` eagerly and, jitted, YNNPACK's (XLA
/// fuses `exp(x - max)` into a YNNPACK computation).
pub(crate) fn softmax_rows(x: &[f32], n: usize, out: &mut [f32], mode: Softmax) {
    on_widest_vectors(
        #[inline(always)]
        || {
            if n == 0 {
                return;
            }
            if x.len() >= YNN_MIN {
                let s = ynn_shifted_exp(x, n, mode == Softmax::Jitted, false, out);
                for (orow, s) in out.chunks_exact_mut(n).zip(s) {
                    let r = 1.0 / s;
                    orow.iter_mut().for_each(|o| *o *= r);
                }
                return;
            }
            for (orow, row) in out.chunks_exact_mut(n).zip(x.chunks_exact(n)) {
                let r = 1.0 / shifted_exp(row, orow);
                orow.iter_mut().for_each(|o| *o *= r);
            }
        },
    )
}

/// The softmax backward pass in place, from the input `x`, as JAX's
/// pullback computes it: with `e = exp(x - max)` and `s = sum(e)`,
/// `t = sum((g * (1 / (s * s))) * e)` and `dx = (g * (1 / s) - t) * e`.
/// Eagerly every operation rounds; jitted, LLVM contracts `g * (1 / s)`
/// into the subtraction, `fma(g, 1 / s, -t) * e`. From [`YNN_MIN`]
/// elements YNNPACK sums `e` (stored) and the products (fused when jitted,
/// stored eagerly), and `e` is YNNPACK's `exp` when jitted. Jitted, a
/// single row beside axes of extent 1 (`dot_row`) has its sum of products
/// made a dot; from [`YNN_MIN`] rows XLA hands the whole pullback to
/// YNNPACK, which rounds `g * (1 / s)` before the subtraction.
pub(crate) fn softmax_rows_backward(
    g: &mut [f32],
    x: &[f32],
    n: usize,
    mode: Softmax,
    dot_row: bool,
) {
    on_widest_vectors(
        #[inline(always)]
        || {
            if n == 0 {
                return;
            }
            let jitted = mode == Softmax::Jitted;
            // From 4,096 rows the whole pullback runs in YNNPACK's fusion,
            // whose multiply and add are not contracted.
            let rows_many = x.len() / n >= YNN_MIN;
            let finish = |grow: &mut [f32], e: &[f32], r: f32, t: f32| {
                for (g, &e) in grow.iter_mut().zip(e) {
                    *g = if jitted && !rows_many {
                        g.mul_add(r, -t) * e
                    } else {
                        (*g * r + -t) * e
                    };
                }
            };
            if x.len() >= YNN_MIN {
                let mut e = vec![0.0f32; x.len()];
                let s = ynn_shifted_exp(x, n, jitted, false, &mut e);
                // `g * a` per row, then (unless a dot takes the two factors)
                // times `e`.
                let mut ge = vec![0.0f32; x.len()];
                for ((prow, grow), &s) in ge.chunks_exact_mut(n).zip(g.chunks_exact(n)).zip(&s) {
                    let a = 1.0 / (s * s);
                    for (p, &g) in prow.iter_mut().zip(grow) {
                        *p = g * a;
                    }
                }
                let mut t = vec![0.0f32; s.len()];
                if jitted && dot_row {
                    t[0] = crate::xla::dot::vector_dot(&ge, &e);
                } else {
                    ge.iter_mut().zip(&e).for_each(|(p, &e)| *p *= e);
                    ynn_reduce::row_sums(&ge, n, jitted, &mut t);
                }
                for (((grow, erow), &s), &t) in
                    g.chunks_exact_mut(n).zip(e.chunks_exact(n)).zip(&s).zip(&t)
                {
                    finish(grow, erow, 1.0 / s, t);
                }
                return;
            }
            let mut e = vec![0.0f32; n];
            let mut ge = vec![0.0f32; n];
            for (grow, row) in g.chunks_exact_mut(n).zip(x.chunks_exact(n)) {
                let s = shifted_exp(row, &mut e);
                let a = 1.0 / (s * s);
                let r = 1.0 / s;
                for ((p, &g), &e) in ge.iter_mut().zip(grow.iter()).zip(&e) {
                    *p = (g * a) * e;
                }
                let t = xla_row_sum(&ge);
                finish(grow, &e, r, t);
            }
        },
    )
}

/// `jax.nn.log_softmax` of each row: `(x - max) - log(sum(exp(x - max)))`.
/// From [`YNN_MIN`] elements YNNPACK computes the sums with `exp` fused
/// in, its own `exp` — except under an eager differentiation, whose
/// forward program keeps XLA's `exp(x - max)` for the backward pass and
/// YNNPACK sums it stored.
pub(crate) fn log_softmax_rows(x: &[f32], n: usize, out: &mut [f32], mode: Softmax) {
    on_widest_vectors(
        #[inline(always)]
        || {
            if n == 0 {
                return;
            }
            if x.len() >= YNN_MIN {
                let traced = mode == Softmax::Traced;
                let s = ynn_shifted_exp(x, n, !traced, !traced, out);
                shifted(x, n, out);
                // From 4,096 rows XLA hands the sums' log to YNNPACK too.
                let ynn_log = !traced && s.len() >= YNN_MIN;
                for (orow, s) in out.chunks_exact_mut(n).zip(s) {
                    let lse = if ynn_log {
                        crate::xla::ynn_log::ynn_log(s)
                    } else {
                        xla_math::log(s)
                    };
                    orow.iter_mut().for_each(|o| *o -= lse);
                }
                return;
            }
            for (orow, row) in out.chunks_exact_mut(n).zip(x.chunks_exact(n)) {
                let lse = xla_math::log(shifted_exp(row, orow));
                let m = row_max(row);
                for (o, &v) in orow.iter_mut().zip(row) {
                    *o = (v - m) - lse;
                }
            }
        },
    )
}

/// The log-softmax backward pass in place, from the input `x`, as JAX's
/// pullback computes it: `c = -sum(g) / sum(e)` with `e = exp(x - max)`,
/// then `dx = g + c * e` as one fused multiply-add. From [`YNN_MIN`]
/// elements YNNPACK sums `g` and the stored `e`, which is YNNPACK's `exp`
/// when jitted (it sits in the fused row maximum there) and XLA's eagerly;
/// from [`YNN_MIN`] rows the update runs in YNNPACK's fusion too, as
/// `g + c * e` rounded twice.
pub(crate) fn log_softmax_rows_backward(
    g: &mut [f32],
    x: &[f32],
    n: usize,
    mode: Softmax,
    _dot_row: bool,
) {
    on_widest_vectors(
        #[inline(always)]
        || {
            if n == 0 {
                return;
            }
            if x.len() >= YNN_MIN {
                let mut e = vec![0.0f32; x.len()];
                let s = ynn_shifted_exp(x, n, mode == Softmax::Jitted, false, &mut e);
                let mut gs = vec![0.0f32; s.len()];
                // From 4,096 rows the update runs in YNNPACK's fusion, whose
                // multiply and add are not contracted.
                let rows_many = s.len() >= YNN_MIN;
                ynn_reduce::row_sums(g, n, false, &mut gs);
                for (((grow, erow), &s), &gs) in g
                    .chunks_exact_mut(n)
                    .zip(e.chunks_exact(n))
                    .zip(&s)
                    .zip(&gs)
                {
                    let c = -gs / s;
                    for (g, &e) in grow.iter_mut().zip(erow) {
                        *g = if rows_many {
                            *g + c * e
                        } else {
                            c.mul_add(e, *g)
                        };
                    }
                }
                return;
            }
            let mut e = vec![0.0f32; n];
            for (grow, row) in g.chunks_exact_mut(n).zip(x.chunks_exact(n)) {
                let s = shifted_exp(row, &mut e);
                let c = -xla_row_sum(grow) / s;
                for (g, &e) in grow.iter_mut().zip(&e) {
                    *g = c.mul_add(e, *g);
                }
            }
        },
    )
}

/// The softmax tangent in place, from the input `x`. `jax.nn.softmax`
/// (not jitted as a whole) is `e / sum(e)` with `e = exp(x - max)`; its
/// jvp runs `jnp.exp` (`te = t * e`), `jnp.sum` (`ts = sum(te)`, XLA's row
/// order) and `jnp.true_divide`, whose jvp XLA:CPU compiles (HLO after
/// optimization) as `te * (1 / s) + ((-ts) * e) * (1 / (s * s))`, the
/// division by the broadcast sum as a multiplication by its reciprocal.
/// Under `jax.jvp` that is one fusion and LLVM contracts the first product
/// into the sum, `fma(te, 1 / s, ((-ts) * e) * (1 / (s * s)))`; under
/// `jax.linearize` the divide, negate, multiplies and add run one by one,
/// each rounded ([`forward::fused`](crate::tensor::forward::fused); both
/// measured against jaxlib 0.10.2 on rows of 1 to 127 elements).
pub(crate) fn softmax_rows_jvp(t: &mut [f32], x: &[f32], n: usize, _dot_row: bool) {
    on_widest_vectors(
        #[inline(always)]
        || {
            if n == 0 {
                return;
            }
            let fused = crate::tensor::forward::fused();
            if x.len() >= YNN_MIN {
                // YNNPACK sums `e` and `te`, both stored (the outputs of `exp` and
                // of the tangent's product).
                let mut e = vec![0.0f32; x.len()];
                let s = ynn_shifted_exp(x, n, false, false, &mut e);
                let te: Vec<f32> = t.iter().zip(&e).map(|(&t, &e)| t * e).collect();
                let mut ts = vec![0.0f32; s.len()];
                ynn_reduce::row_sums(&te, n, false, &mut ts);
                for (((trow, (terow, erow)), &s), &ts) in t
                    .chunks_exact_mut(n)
                    .zip(te.chunks_exact(n).zip(e.chunks_exact(n)))
                    .zip(&s)
                    .zip(&ts)
                {
                    let (r, r2) = (1.0 / s, 1.0 / (s * s));
                    for ((t, &te), &e) in trow.iter_mut().zip(terow).zip(erow) {
                        let rest = ((-ts) * e) * r2;
                        *t = if fused {
                            te.mul_add(r, rest)
                        } else {
                            te * r + rest
                        };
                    }
                }
                return;
            }
            let mut e = vec![0.0f32; n];
            let mut te = vec![0.0f32; n];
            for (trow, row) in t.chunks_exact_mut(n).zip(x.chunks_exact(n)) {
                let s = shifted_exp(row, &mut e);
                for ((p, &t), &e) in te.iter_mut().zip(trow.iter()).zip(&e) {
                    *p = t * e;
                }
                let ts = xla_row_sum(&te);
                let (r, r2) = (1.0 / s, 1.0 / (s * s));
                for ((t, &te), &e) in trow.iter_mut().zip(&te).zip(&e) {
                    let rest = ((-ts) * e) * r2;
                    *t = if fused {
                        te.mul_add(r, rest)
                    } else {
                        te * r + rest
                    };
                }
            }
        },
    )
}

/// The log-softmax tangent in place, from the input `x`: JAX's jvp of
/// `shifted - log(sum(exp(shifted)))`, `t - sum(t * e) / s` with
/// `e = exp(x - max)`, `s = sum(e)`. `jax.nn.log_softmax` is jitted as a
/// whole, so under `jax.jvp` and `jax.linearize` alike its tangent is one
/// XLA computation: for rows of up to 32 elements XLA fuses the product
/// into the row reduction and LLVM contracts each step, `acc = fma(t, e,
/// acc)` left to right from `+0`; longer rows are first cut into windows
/// (`TreeReductionRewriter`), the product is not fused, and the rounded
/// products are summed in XLA's row order. The division is a true one.
/// From [`YNN_MIN`] elements YNNPACK sums the products, except that a
/// single row beside axes of extent 1 (`dot_row`) becomes a YNNPACK dot.
///
/// Not reproduced: for rows of 5 to 8 elements and at least 8 rows along
/// the axis before the softmax axis, LLVM vectorizes the fused reduction
/// across rows (4 or 8 rows at a time, chosen by its cost model for the
/// row count); those rows round the products and add them left to right
/// without FMA, the rows left over after the last full vector keep the
/// FMA chain.
pub(crate) fn log_softmax_rows_jvp(t: &mut [f32], x: &[f32], n: usize, dot_row: bool) {
    on_widest_vectors(
        #[inline(always)]
        || {
            if n == 0 {
                return;
            }
            if x.len() >= YNN_MIN {
                // From 4,096 elements YNNPACK sums the stored `e` and, fused into
                // its reduction, the rounded products `t * e`, under `jax.jvp` and
                // `jax.linearize` alike (measured).
                let mut e = vec![0.0f32; x.len()];
                let s = ynn_shifted_exp(x, n, false, false, &mut e);
                let mut dots = vec![0.0f32; s.len()];
                if dot_row {
                    dots[0] = crate::xla::dot::vector_dot(t, &e);
                } else {
                    let te: Vec<f32> = t.iter().zip(&e).map(|(&t, &e)| t * e).collect();
                    ynn_reduce::row_sums(&te, n, true, &mut dots);
                }
                for ((trow, &s), &dot) in t.chunks_exact_mut(n).zip(&s).zip(&dots) {
                    let tl = dot / s;
                    trow.iter_mut().for_each(|t| *t -= tl);
                }
                return;
            }
            let mut e = vec![0.0f32; n];
            let mut te = vec![0.0f32; n];
            for (trow, row) in t.chunks_exact_mut(n).zip(x.chunks_exact(n)) {
                let s = shifted_exp(row, &mut e);
                let dot = if n <= TREE_WINDOW {
                    trow.iter()
                        .zip(&e)
                        .fold(0.0f32, |acc, (&t, &e)| t.mul_add(e, acc))
                } else {
                    for ((p, &t), &e) in te.iter_mut().zip(trow.iter()).zip(&e) {
                        *p = t * e;
                    }
                    xla_row_sum(&te)
                };
                let tl = dot / s;
                trow.iter_mut().for_each(|t| *t -= tl);
            }
        },
    )
}
