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
//!   and summed in XLA's windows of 32 (see `rows::xla_row_sum`).

use super::reduce::{xla_row_sum, TREE_WINDOW};

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

/// The loops of [`row_major_gemv`].
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
    for (i, o) in out.iter_mut().enumerate().take(m) {
        let row = &x[i * row_stride..i * row_stride + k];
        let mut lanes = [0.0f32; LANES];
        for (c, chunk) in row[..main].chunks_exact(LANES).enumerate() {
            for (q, (lane, &a)) in lanes.iter_mut().zip(chunk).enumerate() {
                *lane = a.mul_add(y[(c * LANES + q) * ys], *lane);
            }
        }
        let mut tail = 0.0f32;
        for (p, &a) in row.iter().enumerate().skip(main) {
            tail = a.mul_add(y[p * ys], tail);
        }
        *o = if main == 0 {
            tail
        } else if i < full_rows {
            pairwise(&lanes) + tail
        } else {
            halving(&lanes) + tail
        };
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
        let products: Vec<f32> = (0..k).map(|p| x[p * xs] * y[p * ys]).collect();
        xla_row_sum(&products)
    }
}
