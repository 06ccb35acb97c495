//! The summation order of XLA:CPU's matrix-vector products (jaxlib 0.10.2,
//! x86-64), measured against JAX (tools/oracle/generate_gemv.py):
//!
//! * `[m, k] @ [k, 1]` with `m >= 2` and a row-major matrix: XLA's
//!   row-major GEMV emitter keeps, per row, 8 accumulators (one 256-bit
//!   vector) of fused multiply-adds from `+0` over the first `8 * (k / 8)`
//!   terms, term `j` in lane `j % 8`. Rows in full tiles of 8 rows reduce
//!   their lanes with AVX horizontal adds,
//!   `((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7))`; the rows after
//!   the last full tile reduce by halving,
//!   `((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))`. The
//!   remaining `k % 8` terms are a chain of fused multiply-adds from `+0`,
//!   added to the reduced lanes. One row times a matrix stored transposed
//!   (`g @ B^T` with `g: [1, k]`, B row-major `[n, k]`, the cotangent of a
//!   one-row product, alone or per batch) is the same GEMV over B's rows.
//! * `[1, k] @ [k, 1]`: a reduction of the products. Up to 32 terms, one
//!   chain of fused multiply-adds from `+0`; beyond, the products rounded
//!   and summed in XLA's windows of 32 (see `rows::xla_row_sum`); from
//!   4,096 terms, the rounded products summed by YNNPACK
//!   (`ynn_reduce::ynn_sum`: XLA rewrites such a dot into a reduce of a
//!   multiply, and hands reduces that long to YNNPACK). `[m, k] @ [k, 1]`
//!   with `m >= 2` stays the GEMV above at every `k` (checked to 40,000).
//! * `[1, k] @ [k, n]` with a row-major B (a `Dense(1)` head's weight
//!   gradient `c^T @ x`, which XLA runs as `dot(c[k, 1], x[k, n])`
//!   contracting the batch): XLA's column-major GEMV, one chain of fused
//!   multiply-adds per output (tiles of 8 outputs and 8 terms, stored and
//!   reloaded between tiles: exact), but in one *plain column*
//!   (`matmul::plain_column`: the first of the columns after the last
//!   full tile of 8, when there are 2 columns or `8j + 1`, and `k >= 3`)
//!   the products of terms `1..8` are rounded and added on their own
//!   ([`plain_column_sum`]; measured with a helper's probe of 118,140
//!   outputs, `k` from 2 to 8192, and the oracle's `head_grads`).

use super::reduce::{xla_row_sum, TREE_WINDOW};
use super::ynn_reduce::{ynn_sum, YNN_MIN};

/// The terms of a plain column (see the module's notes) whose products
/// XLA's column-major GEMV rounds and adds on their own: `1..PLAIN_TERMS`
/// (the first tile of 8 terms, as LLVM compiles its epilogue for one
/// leftover output); later terms are fused multiply-adds.
pub(crate) const PLAIN_TERMS: usize = 8;

/// The sum of a plain column's output: `term(p)` gives term `p`'s two
/// factors; the first product plus `start` (`+0`, or `-0` to keep a `-0`
/// product), terms `1..PLAIN_TERMS` rounded and added, the rest fused.
#[inline(always)]
pub(crate) fn plain_column_sum(start: f32, k: usize, term: impl Fn(usize) -> (f32, f32)) -> f32 {
    if k == 0 {
        return 0.0;
    }
    let (x, y) = term(0);
    let mut acc = x * y + start;
    for p in 1..k.min(PLAIN_TERMS) {
        let (x, y) = term(p);
        acc += x * y;
    }
    for p in PLAIN_TERMS..k {
        let (x, y) = term(p);
        acc = x.mul_add(y, acc);
    }
    acc
}

/// Lanes of one GEMV accumulator vector.
const LANES: usize = 8;
/// Rows of a GEMV tile.
const TILE_ROWS: usize = 8;

/// The lanes' sum as AVX's horizontal adds give it (rows in full tiles).
#[inline(always)]
fn pairwise(l: &[f32; LANES]) -> f32 {
    ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]))
}

/// The lanes' sum by halving (rows after the last full tile).
#[inline(always)]
fn halving(l: &[f32; LANES]) -> f32 {
    ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]))
}

/// The loops of [`row_major_gemv`]. Each row's lanes are one chain of
/// fused multiply-adds per lane; the rows of a tile run side by side, so
/// that eight chains are in flight rather than one (a row alone waited
/// on each FMA's latency: `[128, 512] @ [512, 1]` took 11 times `gemm`'s
/// time).
#[inline(always)]
fn row_major_gemv_body(
    x: &[f32],
    row_stride: usize,
    y: &[f32],
    ys: usize,
    m: usize,
    k: usize,
    out: &mut [f32],
) {
    let main = k / LANES * LANES;
    let full_rows = m / TILE_ROWS * TILE_ROWS;
    // The vector contiguous (a copy when strided).
    let copied: Vec<f32>;
    let v: &[f32] = if ys == 1 {
        &y[..k]
    } else {
        copied = (0..k).map(|p| y[p * ys]).collect();
        &copied
    };
    let row = |i: usize| &x[i * row_stride..i * row_stride + k];
    // The tail's chain and the lanes' reduction of a row after the last
    // full tile (a tile's rows are finished side by side below).
    let finish = |i: usize, lanes: &[f32; LANES]| {
        let mut tail = 0.0f32;
        for (&a, &b) in row(i)[main..].iter().zip(&v[main..]) {
            tail = a.mul_add(b, tail);
        }
        if main == 0 {
            tail
        } else {
            halving(lanes) + tail
        }
    };
    for t in (0..full_rows).step_by(TILE_ROWS) {
        let rows: [&[f32]; TILE_ROWS] = std::array::from_fn(|r| &row(t + r)[..main]);
        let mut lanes = [[0.0f32; LANES]; TILE_ROWS];
        for (c, vc) in v[..main].chunks_exact(LANES).enumerate() {
            for (l, r) in lanes.iter_mut().zip(&rows) {
                let a = &r[c * LANES..c * LANES + LANES];
                for q in 0..LANES {
                    l[q] = a[q].mul_add(vc[q], l[q]);
                }
            }
        }
        // The tails' chains side by side too, then each row's lanes
        // reduced (a tile's rows reduce pairwise).
        let rows: [&[f32]; TILE_ROWS] = std::array::from_fn(|r| row(t + r));
        let mut tails = [0.0f32; TILE_ROWS];
        for (p, &b) in v.iter().enumerate().skip(main) {
            for (tail, r) in tails.iter_mut().zip(&rows) {
                *tail = r[p].mul_add(b, *tail);
            }
        }
        for (r, (l, &tail)) in lanes.iter().zip(&tails).enumerate() {
            out[t + r] = if main == 0 { tail } else { pairwise(l) + tail };
        }
    }
    for (i, o) in out.iter_mut().enumerate().take(m).skip(full_rows) {
        let mut lanes = [0.0f32; LANES];
        for (a, vc) in row(i)[..main]
            .chunks_exact(LANES)
            .zip(v.chunks_exact(LANES))
        {
            for q in 0..LANES {
                lanes[q] = a[q].mul_add(vc[q], lanes[q]);
            }
        }
        *o = finish(i, &lanes);
    }
}

/// [`row_major_gemv_body`] compiled with FMA instructions (same bits).
///
/// # Safety
///
/// The CPU must support FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
unsafe fn row_major_gemv_fma(
    x: &[f32],
    row_stride: usize,
    y: &[f32],
    ys: usize,
    m: usize,
    k: usize,
    out: &mut [f32],
) {
    row_major_gemv_body(x, row_stride, y, ys, m, k, out)
}

/// `out = a @ v` for a row-major `a: [m, k]` (row `i` at `x[i *
/// row_stride..][..k]`) and `v: [k]` (element `p` at `y[p * ys]`), in
/// XLA's row-major GEMV order (see the module's documentation).
pub(crate) fn row_major_gemv(
    x: &[f32],
    row_stride: usize,
    y: &[f32],
    ys: usize,
    m: usize,
    k: usize,
    out: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU supports FMA, checked just above; that is the only
        // requirement of `row_major_gemv_fma`, whose body is safe code.
        unsafe { row_major_gemv_fma(x, row_stride, y, ys, m, k, out) };
        return;
    }
    row_major_gemv_body(x, row_stride, y, ys, m, k, out)
}

/// `sum_p a[p] * v[p]` for `a` at `x[p * xs]` and `v` at `y[p * ys]`, as
/// XLA computes `[1, k] @ [k, 1]` (see the module's documentation).
pub(crate) fn vector_dot(x: &[f32], xs: usize, y: &[f32], ys: usize, k: usize) -> f32 {
    if k <= TREE_WINDOW {
        (0..k).fold(0.0f32, |acc, p| x[p * xs].mul_add(y[p * ys], acc))
    } else {
        // Contiguous operands as slices (the strided loop did not
        // vectorize: most of a `[1, 2048] @ [2048, 1]` product).
        let products: Vec<f32> = if xs == 1 && ys == 1 {
            x[..k].iter().zip(&y[..k]).map(|(&a, &b)| a * b).collect()
        } else {
            (0..k).map(|p| x[p * xs] * y[p * ys]).collect()
        };
        if k >= YNN_MIN {
            // From 4,096 terms XLA rewrites the dot into a reduce of the
            // rounded products, which it hands to YNNPACK.
            let mut out = [0.0f32];
            ynn_sum(&products, &[k], 1, &mut out);
            out[0]
        } else {
            xla_row_sum(&products)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One row at a time, as the module's documentation states the order.
    fn reference(x: &[f32], rs: usize, y: &[f32], ys: usize, m: usize, k: usize) -> Vec<f32> {
        let main = k / LANES * LANES;
        (0..m)
            .map(|i| {
                let mut lanes = [0.0f32; LANES];
                for p in 0..main {
                    lanes[p % LANES] = x[i * rs + p].mul_add(y[p * ys], lanes[p % LANES]);
                }
                let tail = (main..k).fold(0.0f32, |t, p| x[i * rs + p].mul_add(y[p * ys], t));
                if main == 0 {
                    tail
                } else if i < m / TILE_ROWS * TILE_ROWS {
                    pairwise(&lanes) + tail
                } else {
                    halving(&lanes) + tail
                }
            })
            .collect()
    }

    #[test]
    fn tiles_of_rows_sum_as_one_row_at_a_time() {
        let mut s = 5u64;
        let mut value = || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            match s >> 60 {
                0 => -0.0,
                1 => 0.0,
                _ => ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 7.0,
            }
        };
        for m in [1, 2, 7, 8, 9, 16, 17, 33] {
            for k in [0, 1, 7, 8, 9, 64, 100] {
                for (rs, ys) in [(k, 1), (k + 3, 1), (k + 1, 3)] {
                    let x: Vec<f32> = (0..m * rs + k).map(|_| value()).collect();
                    let y: Vec<f32> = (0..k * ys + 1).map(|_| value()).collect();
                    let mut out = vec![f32::NAN; m];
                    row_major_gemv(&x, rs, &y, ys, m, k, &mut out);
                    let want = reference(&x, rs, &y, ys, m, k);
                    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&out), bits(&want), "m {m} k {k} strides {rs} {ys}");
                }
            }
        }
    }
}
