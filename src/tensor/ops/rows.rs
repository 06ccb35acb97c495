//! Row kernels: reductions and softmax along the last axis of row-major
//! data, shared by eager operations and compiled steps so that both compute
//! the same bits. `row_sums` is sequential, left to right; the softmax
//! kernels sum in the order of XLA:CPU's compiled `jax.nn.softmax`.

use crate::xla::math as xla_math;
use crate::xla::reduce::xla_row_sum;

/// NaN-propagating max, as XLA's reduce_max.
pub(crate) fn nan_max(acc: f32, x: f32) -> f32 {
    if acc.is_nan() || x.is_nan() {
        f32::NAN
    } else {
        acc.max(x)
    }
}

/// The row maximum (NaN-propagating; the order does not matter).
fn row_max(row: &[f32]) -> f32 {
    row.iter().fold(f32::NEG_INFINITY, |a, &v| nan_max(a, v))
}

/// `e = exp(x - max)` of one row into `e`, returning `sum(e)` in XLA's order.
fn shifted_exp(row: &[f32], e: &mut [f32]) -> f32 {
    let m = row_max(row);
    for (o, &v) in e.iter_mut().zip(row) {
        *o = xla_math::exp(v - m);
    }
    xla_row_sum(e)
}

/// `jax.nn.softmax` of each row, as its jitted XLA computation does:
/// `e = exp(x - max)`, `s = sum(e)`, then `e * (1 / s)` (XLA turns the
/// division by the broadcast sum into a multiplication by its reciprocal).
pub(crate) fn softmax_rows(x: &[f32], n: usize, out: &mut [f32]) {
    if n == 0 {
        return;
    }
    for (orow, row) in out.chunks_exact_mut(n).zip(x.chunks_exact(n)) {
        let r = 1.0 / shifted_exp(row, orow);
        orow.iter_mut().for_each(|o| *o *= r);
    }
}

/// The softmax backward pass in place, from the input `x`, as JAX's jitted
/// pullback computes it: with `e = exp(x - max)` and `s = sum(e)`,
/// `t = sum((g * (1 / (s * s))) * e)` and `dx = (g * (1 / s) - t) * e`
/// (no fused multiply-add: XLA keeps the product and the sum apart).
pub(crate) fn softmax_rows_backward(g: &mut [f32], x: &[f32], n: usize) {
    if n == 0 {
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
        for (g, &e) in grow.iter_mut().zip(&e) {
            *g = (*g * r + -t) * e;
        }
    }
}

/// `jax.nn.log_softmax` of each row: `(x - max) - log(sum(exp(x - max)))`.
pub(crate) fn log_softmax_rows(x: &[f32], n: usize, out: &mut [f32]) {
    if n == 0 {
        return;
    }
    for (orow, row) in out.chunks_exact_mut(n).zip(x.chunks_exact(n)) {
        let lse = xla_math::log(shifted_exp(row, orow));
        let m = row_max(row);
        for (o, &v) in orow.iter_mut().zip(row) {
            *o = (v - m) - lse;
        }
    }
}

/// The log-softmax backward pass in place, from the input `x`, as JAX's
/// jitted pullback computes it: `c = -sum(g) / sum(e)` with
/// `e = exp(x - max)`, then `dx = g + c * e` as one fused multiply-add.
pub(crate) fn log_softmax_rows_backward(g: &mut [f32], x: &[f32], n: usize) {
    if n == 0 {
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
}

/// The softmax tangent in place, from the input `x`, as JAX's jvp of
/// `e / sum(e)` runs op by op: `te = t * e`, `ts = sum(te)`, then
/// `te / s + ((-ts) * e) * (1 / (s * s))`, the first division by the
/// broadcast sum as a multiplication by its reciprocal.
pub(crate) fn softmax_rows_jvp(t: &mut [f32], x: &[f32], n: usize) {
    if n == 0 {
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
            *t = te * r + ((-ts) * e) * r2;
        }
    }
}

/// The log-softmax tangent in place, from the input `x`: JAX's jvp of
/// `shifted - log(sum(exp(shifted)))`, `t - sum(t * e) / s`.
pub(crate) fn log_softmax_rows_jvp(t: &mut [f32], x: &[f32], n: usize) {
    if n == 0 {
        return;
    }
    let mut e = vec![0.0f32; n];
    let mut te = vec![0.0f32; n];
    for (trow, row) in t.chunks_exact_mut(n).zip(x.chunks_exact(n)) {
        let s = shifted_exp(row, &mut e);
        for ((p, &t), &e) in te.iter_mut().zip(trow.iter()).zip(&e) {
            *p = t * e;
        }
        let tl = xla_row_sum(&te) / s;
        trow.iter_mut().for_each(|t| *t -= tl);
    }
}
