//! The orders in which XLA:CPU sums: along a row (its tree-reduction
//! windows), and down the columns of a matrix (windows of rows, or
//! YNNPACK's tiles), as measured against jaxlib 0.10.2.

/// `out[r] = sum(x[r, :])` for rows of length `n`, each in XLA's order
/// ([`xla_row_sum`]; checked against `jnp.sum(x, axis=-1)` for rows of up
/// to 100 elements).
pub(crate) fn row_sums(x: &[f32], n: usize, out: &mut [f32]) {
    if n == 0 {
        out.fill(0.0);
        return;
    }
    for (o, row) in out.iter_mut().zip(x.chunks_exact(n)) {
        *o = xla_row_sum(row);
    }
}

/// The sum of all elements of an array of `ndim` axes in row-major order:
/// in XLA's order for a vector ([`xla_row_sum`]; checked against
/// `jnp.sum` up to about 1000 elements); left to right for more axes, which
/// XLA sums in another, vectorized order (exact up to 31 elements only).
pub(crate) fn sum_all(x: &[f32], ndim: usize) -> f32 {
    if ndim <= 1 {
        xla_row_sum(x)
    } else {
        x.iter().sum::<f32>()
    }
}

/// The reduction window of XLA's CPU `TreeReductionRewriter`: a reduced
/// dimension longer than this is first reduced in windows of this length.
pub(crate) const TREE_WINDOW: usize = 32;

/// `sum(row)` in the order of a reduce that XLA:CPU emits as a loop fusion
/// (jitted `jax.nn.softmax` / `log_softmax`): left to right when the row has
/// at most 32 elements. A longer row is split as `TreeReductionRewriter`
/// does: padded (with the init value 0) to a multiple of 32, the padding
/// split evenly with the odd element at the end (`Padding::kSame`), and each
/// window summed left to right; the window sums are then reduced the same
/// way (the pass runs to a fixed point, so 1500 elements give 47 window
/// sums, then 2, then one).
pub(crate) fn xla_row_sum(row: &[f32]) -> f32 {
    let n = row.len();
    if n <= TREE_WINDOW {
        return row.iter().fold(0.0, |acc, &v| acc + v);
    }
    let windows = n.div_ceil(TREE_WINDOW);
    let low = (windows * TREE_WINDOW - n) / 2;
    let parts: Vec<f32> = (0..windows)
        .map(|w| {
            // Window `w` covers padded positions [32w, 32w + 32).
            let start = (w * TREE_WINDOW).saturating_sub(low);
            let end = ((w + 1) * TREE_WINDOW).saturating_sub(low).min(n);
            row[start..end].iter().fold(0.0f32, |acc, &v| acc + v)
        })
        .collect();
    xla_row_sum(&parts)
}

/// Sums the rows of `g` (rows of `dst.len()` values) into `dst`, each
/// column in XLA's order (windows of 32 rows, [`xla_row_sum`]), as JAX
/// reduces the cotangent of a broadcast bias.
///
/// XLA:CPU sums narrow columns (10 wide, measured) in this order, but
/// reduces wide ones (128) with its vectorized column emitter, whose order
/// is not emulated (see `tests/train_digits.rs`).
///
pub(crate) fn sum_columns_into(g: &[f32], dst: &mut [f32]) {
    let n = dst.len();
    if g.len() == n {
        dst.copy_from_slice(g);
        return;
    }
    let rows = g.len().checked_div(n).unwrap_or(0);
    if (YNN_REDUCE_MIN..=YNN_REDUCE_TILE).contains(&g.len()) && rows <= YNN_REDUCE_ROWS {
        return ynn_column_sums(g, dst);
    }
    if g.len() <= 32 * n {
        // Up to 32 rows XLA adds them in order: row by row is the same and
        // faster.
        dst.copy_from_slice(&g[..n]);
        for row in g[n..].chunks_exact(n) {
            dst.iter_mut().zip(row).for_each(|(d, &x)| *d += x);
        }
        return;
    }
    // XLA's windows of 32 rows (kSame padding), each summed in order from
    // zero, row by row over contiguous memory; then each column's window
    // sums reduced the same way.
    let rows = g.len() / n;
    let windows = rows.div_ceil(32);
    let low = (windows * 32 - rows) / 2;
    let mut parts = vec![0.0f32; windows * n];
    for (w, part) in parts.chunks_exact_mut(n).enumerate() {
        let start = (w * 32).saturating_sub(low);
        let end = ((w + 1) * 32).saturating_sub(low).min(rows);
        for row in g[start * n..end * n].chunks_exact(n) {
            part.iter_mut().zip(row).for_each(|(p, &x)| *p += x);
        }
    }
    let mut column = Vec::with_capacity(windows);
    for (j, d) in dst.iter_mut().enumerate() {
        column.clear();
        column.extend(parts[j..].iter().step_by(n).copied());
        *d = xla_row_sum(&column);
    }
}

/// From this many elements XLA:CPU hands a column reduction to YNNPACK.
const YNN_REDUCE_MIN: usize = 4096;
/// The largest reduction (elements) and the most rows that YNNPACK sums in
/// one tile as [`ynn_column_sums`] does (measured; larger ones are split
/// in ways not reproduced yet).
const YNN_REDUCE_TILE: usize = 32768;
const YNN_REDUCE_ROWS: usize = 256;

/// Column sums as YNNPACK's `sum_kn` kernel computes them for one tile
/// (measured against jax 0.10.2 for 4,096 to 32,768 elements and at most
/// 256 rows): chunks of 16 rows, each the sum (from `+0`) of its groups of
/// 4 rows, each group summed from `+0` row by row; the chunks' sums added
/// in order, from `+0`.
fn ynn_column_sums(g: &[f32], dst: &mut [f32]) {
    let n = dst.len();
    dst.fill(0.0);
    let mut chunk = vec![0.0f32; n];
    let mut group = vec![0.0f32; n];
    for rows16 in g.chunks(16 * n) {
        chunk.fill(0.0);
        for rows4 in rows16.chunks(4 * n) {
            group.fill(0.0);
            for row in rows4.chunks_exact(n) {
                group.iter_mut().zip(row).for_each(|(a, &x)| *a += x);
            }
            chunk.iter_mut().zip(&group).for_each(|(c, &a)| *c += a);
        }
        dst.iter_mut().zip(&chunk).for_each(|(d, &c)| *d += c);
    }
}
