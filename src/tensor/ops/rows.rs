//! Row kernels: reductions and softmax along the last axis of row-major
//! data, shared by eager operations and compiled steps so that both compute
//! the same bits. Every sum is sequential, left to right.

use crate::random::xla_math;

/// NaN-propagating max, as XLA's reduce_max.
pub(crate) fn nan_max(acc: f32, x: f32) -> f32 {
    if acc.is_nan() || x.is_nan() {
        f32::NAN
    } else {
        acc.max(x)
    }
}

/// `out[r] = sum(x[r, :])` for rows of length `n`.
pub(crate) fn row_sums(x: &[f32], n: usize, out: &mut [f32]) {
    if n == 0 {
        out.fill(0.0);
        return;
    }
    for (o, row) in out.iter_mut().zip(x.chunks_exact(n)) {
        *o = row.iter().sum::<f32>();
    }
}

/// `jax.nn.softmax` of each row: `exp(x - max) / sum(exp(x - max))`.
pub(crate) fn softmax_rows(x: &[f32], n: usize, out: &mut [f32]) {
    if n == 0 {
        return;
    }
    for (orow, row) in out.chunks_exact_mut(n).zip(x.chunks_exact(n)) {
        let m = row.iter().fold(f32::NEG_INFINITY, |a, &v| nan_max(a, v));
        for (o, &v) in orow.iter_mut().zip(row) {
            *o = xla_math::exp(v - m);
        }
        let s = orow.iter().sum::<f32>();
        orow.iter_mut().for_each(|o| *o /= s);
    }
}

/// The softmax backward pass in place: `g = (g - sum(g * y)) * y` per row.
pub(crate) fn softmax_rows_backward(g: &mut [f32], y: &[f32], n: usize) {
    if n == 0 {
        return;
    }
    for (grow, yrow) in g.chunks_exact_mut(n).zip(y.chunks_exact(n)) {
        let gy = grow.iter().zip(yrow).map(|(&g, &y)| g * y).sum::<f32>();
        for (g, &y) in grow.iter_mut().zip(yrow) {
            *g = (*g - gy) * y;
        }
    }
}

/// `jax.nn.log_softmax` of each row: `x - max - log(sum(exp(x - max)))`.
pub(crate) fn log_softmax_rows(x: &[f32], n: usize, out: &mut [f32]) {
    if n == 0 {
        return;
    }
    for (orow, row) in out.chunks_exact_mut(n).zip(x.chunks_exact(n)) {
        let m = row.iter().fold(f32::NEG_INFINITY, |a, &v| nan_max(a, v));
        for (o, &v) in orow.iter_mut().zip(row) {
            *o = v - m;
        }
        let lse = xla_math::log(orow.iter().map(|&s| xla_math::exp(s)).sum::<f32>());
        orow.iter_mut().for_each(|o| *o -= lse);
    }
}

/// The log-softmax backward pass in place: `g -= exp(y) * sum(g)` per row.
pub(crate) fn log_softmax_rows_backward(g: &mut [f32], y: &[f32], n: usize) {
    if n == 0 {
        return;
    }
    for (grow, yrow) in g.chunks_exact_mut(n).zip(y.chunks_exact(n)) {
        let s = grow.iter().sum::<f32>();
        for (g, &y) in grow.iter_mut().zip(yrow) {
            *g -= xla_math::exp(y) * s;
        }
    }
}
