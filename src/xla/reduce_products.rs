//! Sums of a product over some of its axes (`jnp.sum(x * c, axis=0)`,
//! `jnp.mean(jnp.square(x), axis=-1)`) as XLA:CPU computes them when the
//! multiply is fused into the reduction: a jitted program, where the
//! multiply and the reduce are one loop fusion and LLVM contracts each
//! product into the running sum (`vfmadd`), so the product is never
//! rounded on its own. The sum over all axes is
//! [`super::reduce::product_sum`].

use smallvec::SmallVec;

use super::reduce::{product_sum, ProductLoop, TREE_WINDOW};
use super::reduce_products_kept::{kept_after_sums, KeptLoads};
use super::ynn_reduce::YNN_MIN;

/// What the two factors of a product are, which decides how LLVM
/// compiles its fused sum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pair {
    /// One array times itself (`square`, `x * x`).
    Square,
    /// Two arrays of the product's shape.
    Full,
    /// One factor broadcast (a scalar, a row, a column): `spread` is the
    /// bit set of the product's axes along which it changes (those where
    /// its length is above 1) when the other factor has the product's
    /// shape, `None` when both are broadcast.
    Broadcast {
        /// The axes along which the broadcast factor changes.
        spread: Option<u32>,
    },
}

/// `out[o]`: the sum over the axes in bit set `axes` of the product of
/// row-major `shape` (element `i` being `at(i) = (x_i, y_i)`), output `o`
/// in the row-major order of the kept axes, as XLA:CPU fuses it; `false`
/// (nothing written) where XLA does not fuse them, or fuses them in an
/// order not followed here: the caller then rounds the products and sums
/// them in the plain order.
///
/// Measured against jaxlib 0.10.2 (`tools/oracle/generate_fused_sums.py`):
///
/// * With [`YNN_MIN`] elements or more, XLA hands the fusion to YNNPACK,
///   which rounds the products of two full factors first (with a
///   broadcast factor its order is not known); with a reduced axis longer
///   than [`TREE_WINDOW`], the tree reduction splits the multiply from
///   the reduce (both `false`).
/// * One reduced axis (of length above 1; any axis): each output is one
///   chain of fused multiply-adds from `+0`, `acc = fma(x_k, y_k, acc)`,
///   along the axis. For a square (`x * x`) LLVM first drops the `+0` (a
///   square is never `-0`), so the chain starts from the second product
///   rounded: `fma(x_0, x_0, x_1 * x_1)`, then on. Except along the last
///   axis, rows of 5 to 8 products of a square or of two full factors:
///   LLVM vectorizes the loop over the rows (each lane a row, its
///   products rounded, then some rows left to the scalar loop; lanes not
///   followed here: `false`) unless there is one row, or 3, 5 to 7, or 9
///   to 15, or 2 of two full factors (not vectorized: the chains;
///   measured for 2 to 40 rows).
///
///   Of 2,816 two-axis shapes measured (18 or 14 row counts from 1 to
///   4,096, 22 column counts from 1 to 512, both axes; the second factor
///   of the same shape, a row, a column, or a square), this gives XLA's
///   bits for 2,694; the others are rows of 5 to 8 vectorized (17) and
///   YNNPACK's fusions with a broadcast factor (105).
/// * Several reduced axes, all after every kept axis of length above 1:
///   each output summed as [`product_sum`] sums an array of the reduced
///   axes (its loop nest vectorized the same way).
/// * Several reduced axes followed by the kept ones: one nest per output
///   over the reduced axes, its products `K` elements apart, vectorized
///   by what it loads ([`kept_after_sums`]); with a kept axis before or
///   between them: not followed (`false`).
pub(crate) fn product_sums(
    shape: &[usize],
    axes: u32,
    pair: Pair,
    at: impl Fn(usize) -> (f32, f32),
    out: &mut [f32],
) -> bool {
    let n: usize = shape.iter().product();
    let reduced = |a: usize| axes & (1 << a) != 0;
    if n == 0
        || n >= YNN_MIN
        || shape.len() > 32
        || (0..shape.len()).any(|a| reduced(a) && shape[a] > TREE_WINDOW)
    {
        return false;
    }
    // The axes with a loop (longer than 1), reduced or kept.
    let long: SmallVec<[usize; 8]> = (0..shape.len()).filter(|&a| shape[a] > 1).collect();
    let summed: SmallVec<[usize; 8]> = long.iter().copied().filter(|&a| reduced(a)).collect();
    match summed[..] {
        [] => {
            // Nothing summed: each output one product (rounded once).
            for (i, o) in out.iter_mut().enumerate() {
                let (x, y) = at(i);
                *o = x.mul_add(y, 0.0);
            }
            true
        }
        [axis] => {
            let last = long.last() == Some(&axis);
            let rows = out.len();
            let scalar_rows =
                matches!(rows, 1 | 3 | 5..=7 | 9..=15) || (rows == 2 && pair == Pair::Full);
            let broadcast = matches!(pair, Pair::Broadcast { .. });
            if !broadcast && last && (5..=8).contains(&shape[axis]) && !scalar_rows {
                return false;
            }
            chains(shape, axis, pair == Pair::Square, &at, out);
            true
        }
        [first, ..] => {
            if long.iter().any(|&a| a > first && !reduced(a)) {
                return kept_after(shape, axes, pair, at, out);
            }
            let inner: usize = shape[first..].iter().product();
            let red: SmallVec<[usize; 8]> = summed.iter().map(|&a| shape[a]).collect();
            let product_loop = ProductLoop {
                two_loads: pair == Pair::Full,
                fused_body: false,
            };
            for (o, v) in out.iter_mut().enumerate() {
                let base = o * inner;
                *v = product_sum(&red, product_loop, |i| at(base + i)).expect("checked: fused");
            }
            true
        }
    }
}

/// [`product_sums`] over several reduced axes (the bit set `axes`) with a
/// kept one after them: [`kept_after_sums`] when every kept axis (longer
/// than 1) follows every reduced one and the loads are known, else `false`.
fn kept_after(
    shape: &[usize],
    axes: u32,
    pair: Pair,
    at: impl Fn(usize) -> (f32, f32),
    out: &mut [f32],
) -> bool {
    let long = |a: &usize| shape[*a] > 1;
    let summed: SmallVec<[usize; 8]> = (0..shape.len())
        .filter(long)
        .filter(|&a| axes & (1 << a) != 0)
        .collect();
    let kept: SmallVec<[usize; 8]> = (0..shape.len())
        .filter(long)
        .filter(|&a| axes & (1 << a) == 0)
        .collect();
    let last_summed = summed.last().copied().unwrap_or(0);
    if kept.iter().any(|&a| a < last_summed) {
        return false;
    }
    let summed_mask = summed.iter().fold(0u32, |m, &a| m | 1 << a);
    let long_mask = summed_mask | kept.iter().fold(0u32, |m, &a| m | 1 << a);
    let loads = match pair {
        Pair::Square => KeptLoads::One,
        Pair::Full => KeptLoads::Two,
        Pair::Broadcast { spread: Some(s) } => match s & long_mask {
            s if s & summed_mask == 0 => KeptLoads::One,
            // A column broadcast along the one kept axis.
            s if s == summed_mask && kept.len() == 1 => KeptLoads::Column,
            _ => return false,
        },
        Pair::Broadcast { spread: None } => return false,
    };
    let reduced: SmallVec<[usize; 8]> = summed.iter().map(|&a| shape[a]).collect();
    kept_after_sums(&reduced, loads, at, out)
}

/// [`product_sums`] over one reduced `axis`: each output a chain of fused
/// multiply-adds along it (for a square, from the second product rounded).
#[inline(always)]
fn chains(
    shape: &[usize],
    axis: usize,
    square: bool,
    at: &impl Fn(usize) -> (f32, f32),
    out: &mut [f32],
) {
    let m = shape[axis];
    let stride: usize = shape[axis + 1..].iter().product();
    for (o, v) in out.iter_mut().enumerate() {
        let base = (o / stride) * m * stride + o % stride;
        let term = |k: usize| at(base + k * stride);
        let (acc, from) = if square {
            let (x0, _) = term(0);
            let (x1, _) = term(1);
            (x0.mul_add(x0, x1 * x1), 2)
        } else {
            (0.0, 0)
        };
        *v = (from..m).fold(acc, |acc, k| {
            let (x, y) = term(k);
            x.mul_add(y, acc)
        });
    }
}
