//! The column sums of a scaled array `x * c` (`c` one scalar) as XLA:CPU
//! computes them when it duplicates the multiply into the reduction: the
//! bias gradient of a jitted mean of squares, whose cotangent XLA's
//! simplifier folds into `x * (2 / n)` (optimized HLO of jaxlib 0.10.2:
//! `reduce(multiply(sub, broadcast(0.0416666679)), dimensions={0})` in
//! one loop fusion). Each column is summed down its rows in order from
//! `+0`, and LLVM contracts each product into the add that accumulates
//! it: `acc = fma(x, c, acc)`, never rounding the product.

use super::reduce::TREE_WINDOW;
use super::vectors::with_fma;
use super::ynn_reduce::YNN_MIN;

/// `dst[j] = sum_i x[i, j] * c` over the rows of `x` (rows of
/// `dst.len()` values) as XLA's fused loop sums them, or `false` (and
/// `dst` untouched) where that order is not followed: more than
/// [`TREE_WINDOW`] rows (XLA's tree reduction splits them into windows
/// first) or [`YNN_MIN`] elements or more (YNNPACK's reduction); there
/// the caller sums the rounded products as it would without the fusion.
pub(crate) fn scaled_column_sums(x: &[f32], c: f32, dst: &mut [f32]) -> bool {
    let n = dst.len();
    if n == 0 || !x.len().is_multiple_of(n) {
        return false;
    }
    let rows = x.len() / n;
    if rows == 0 || rows > TREE_WINDOW || x.len() >= YNN_MIN {
        return false;
    }
    // With FMA enabled each `mul_add` is one instruction, not a call to
    // `fmaf` (the bits are the same either way).
    with_fma(
        #[inline(always)]
        || {
            dst.fill(0.0);
            for row in x.chunks_exact(n) {
                for (d, &v) in dst.iter_mut().zip(row) {
                    *d = v.mul_add(c, *d);
                }
            }
        },
    );
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_product_is_added_unrounded() {
        // (1 + 2^-23) squared is 1 + 2^-22 + 2^-46: the rounded product
        // loses the last term, the fused one keeps it in the sum.
        let e = f32::EPSILON;
        let (x, c) = ([-1.0, 1.0 + e], 1.0 + e);
        let mut dst = [0.0];
        assert!(scaled_column_sums(&x, c, &mut dst));
        assert_eq!(dst[0], e + e * e);
        assert_eq!((x[0] * c) + (x[1] * c), e);
    }

    #[test]
    fn long_columns_are_left_to_the_caller() {
        let x = vec![1.0; 33];
        let mut dst = [7.0];
        assert!(!scaled_column_sums(&x, 0.5, &mut dst));
        assert_eq!(dst, [7.0]);
    }
}
