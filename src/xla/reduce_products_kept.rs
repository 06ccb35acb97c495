//! Sums of a product over several axes followed by the kept ones
//! (`jnp.sum(x * c, axis=(0, 1))` of a `[B, C, K]` array, a BatchNorm's
//! `sum(g * xhat, axis=(0, 1, 2))` over NHWC) as XLA:CPU computes them when
//! the multiply is fused into the reduction: one loop nest per output
//! (the kept index outermost), over the reduced axes in row-major order,
//! whose elements lie `K` apart in memory (`K` the kept elements). LLVM
//! contracts each product into the running sum (`vfmadd`), and vectorizes
//! the nest's last two loops (`b` rows of `c` products) or not, by a cost
//! that depends on what the loop loads. Read from the object code of
//! `[2, 3, 4]` and `[8, 4, 4, 8]`, then measured against jaxlib 0.10.2 on
//! 2,814 sums of `[b, c, K]` and a few of four and five axes (a full
//! factor, a row, a column, a scalar, a square; `b` from 2 to 25, 28, 31
//! and 32, `c` from 2 to 9, 10, 12, 16 and 32, `K` from 2 to 8, 12, 16
//! and 32): this gives XLA's bits for all but 49, which are left to the
//! rounded products' plain sums (`false`): 16 rows or more with
//! `c * K <= 8`, and a column factor with two kept axes or more
//! (`tools/oracle/generate_fused_sums.py` keeps some of the shapes).

use super::reduce::product_blocks;

/// What LLVM loads for one product of a nest over reduced axes followed by
/// kept ones: it decides how the nest is vectorized.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KeptLoads {
    /// Two factors of the product's shape: two loads `K` apart.
    Two,
    /// One load `K` apart: a square, or a factor times one that does not
    /// change along the reduced axes (a row of the kept axes, a scalar),
    /// loaded once per output.
    One,
    /// A factor of the product's shape times one of the reduced axes alone
    /// (a column broadcast along the one kept axis): a load `K` apart and
    /// a contiguous one.
    Column,
}

/// How LLVM compiles the loop over the `b` rows of `c` products of each
/// output, `k` outputs (the loads `k` apart): `Some(0)` a chain of fused
/// multiply-adds in order, `Some(vf)` rows taken by `vf` lanes as
/// [`product_blocks`] takes them, `None` when not known.
///
/// * `b` of 2, 4 or 8 (the loops unrolled, their rows packed into one
///   vector of `b` lanes): one load per product while rows are short
///   enough (3 products for two rows, 4 when `k` is a power of two; 4 for
///   4 rows; 5 for 8), a column factor for rows up to 8 (8 rows: 8 lanes
///   up to 6 products, 4 for 7, and for 8 products 2 lanes when `k` is a
///   power of two, 4 otherwise).
/// * From 16 rows (LLVM's loop vectorizer): 8 lanes for rows of up to 4
///   products with one load, up to 8 for a column factor as above; not
///   known when the `c` products of a row and their gap are 8 elements or
///   fewer (`c * k <= 8`: interleaved loads, whose last group of lanes goes
///   to the scalar loop, not always).
/// * Two factors of the product's shape, and any other row count: the
///   chain.
fn lanes(loads: KeptLoads, b: usize, c: usize, k: usize) -> Option<usize> {
    if b > 32 || c > 32 {
        return None;
    }
    if b >= 16 && c * k <= 8 {
        return None;
    }
    Some(match (loads, b) {
        (KeptLoads::Two, _) => 0,
        (KeptLoads::One, 2) if c <= 3 || (c == 4 && k.is_power_of_two()) => 2,
        (KeptLoads::One, 4) if c <= 4 => 4,
        (KeptLoads::One, 8) if c <= 5 => 8,
        (KeptLoads::One, 16..) if c <= 4 => 8,
        (KeptLoads::Column, 2 | 4) if c <= 8 => b,
        (KeptLoads::Column, 8) => wide_column(c, k),
        // The loop vectorizer's lanes for rows of 3 and 4 (as
        // `reduce::vector_factor`'s for contiguous rows).
        (KeptLoads::Column, 20..=23 | 28..=31) if (3..=4).contains(&c) => 4,
        (KeptLoads::Column, 16..) => wide_column(c, k),
        _ => 0,
    })
}

/// The lanes for rows of `c` products of a column factor (8 rows, or from
/// 16), `k` outputs: 8 up to 6 products, 4 for 7, and for 8 products 2
/// when `k` is a power of two, 4 otherwise; the chain for longer rows.
fn wide_column(c: usize, k: usize) -> usize {
    match c {
        ..=6 => 8,
        7 => 4,
        8 if k.is_power_of_two() => 2,
        8 => 4,
        _ => 0,
    }
}

/// `out[o]`: the sum over `reduced` (the lengths of the reduced axes
/// longer than 1, in order) of the products `at(r * k + o)` (`r` the
/// reduced elements' row-major index, `k = out.len()` the kept elements,
/// all after them), as XLA fuses it (see [`lanes`]); `false` (nothing
/// written) where the order is not known.
pub(crate) fn kept_after_sums(
    reduced: &[usize],
    loads: KeptLoads,
    at: impl Fn(usize) -> (f32, f32),
    out: &mut [f32],
) -> bool {
    let k = out.len();
    let [.., b, c] = reduced[..] else {
        return false;
    };
    let Some(vf) = lanes(loads, b, c, k) else {
        return false;
    };
    let n: usize = reduced.iter().product();
    for (o, v) in out.iter_mut().enumerate() {
        let at = |r: usize| at(r * k + o);
        let fold = |acc: f32, range: std::ops::Range<usize>| {
            range.fold(acc, |acc, r| {
                let (x, y) = at(r);
                x.mul_add(y, acc)
            })
        };
        *v = match vf {
            0 => fold(0.0, 0..n),
            2 => product_blocks::<2>(n, (b, c), &at, fold),
            4 => product_blocks::<4>(n, (b, c), &at, fold),
            _ => product_blocks::<8>(n, (b, c), &at, fold),
        };
    }
    true
}
