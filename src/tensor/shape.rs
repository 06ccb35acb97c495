//! Shape arithmetic: NumPy broadcasting, axis normalization, and reducing a
//! broadcast gradient back to its input's shape.

use ndarray::{ArrayD, ArrayViewD, Dimension};

use super::error::{Result, TensorError};

/// Whether two shapes are equal, compared inline: comparing the slices
/// with `==` calls `memcmp`, a call that costs more than the few lengths
/// (a tiny eager step compares shapes a dozen times per operation chain).
#[inline]
pub(crate) fn same_shape(a: &[usize], b: &[usize]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// The shape NumPy broadcasting gives `a` and `b` (align right; each pair of
/// lengths must be equal or contain a 1).
///
/// ```
/// use flaxen::tensor::broadcast_shapes;
/// assert_eq!(broadcast_shapes(&[8, 1, 3], &[5, 1]).unwrap(), vec![8, 5, 3]);
/// assert!(broadcast_shapes(&[2, 3], &[4]).is_err());
/// ```
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    broadcast_shapes_for("broadcast_shapes", a, b)
}

pub(crate) fn broadcast_shapes_for(
    op: &'static str,
    a: &[usize],
    b: &[usize],
) -> Result<Vec<usize>> {
    if same_shape(a, b) {
        return Ok(a.to_vec());
    }
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for (i, o) in out.iter_mut().enumerate() {
        let da = dim_from_right(a, n - 1 - i);
        let db = dim_from_right(b, n - 1 - i);
        *o = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => {
                return Err(TensorError::Incompatible {
                    op,
                    lhs: a.to_vec(),
                    rhs: b.to_vec(),
                })
            }
        };
    }
    Ok(out)
}

/// The length of the axis `k` places from the right, 1 past the left end.
fn dim_from_right(shape: &[usize], k: usize) -> usize {
    if k < shape.len() {
        shape[shape.len() - 1 - k]
    } else {
        1
    }
}

/// `axis` in `0..ndim`, counting negative axes from the end as NumPy does.
pub(crate) fn normalize_axis(op: &'static str, axis: isize, ndim: usize) -> Result<usize> {
    let a = if axis < 0 { axis + ndim as isize } else { axis };
    if a < 0 || a >= ndim as isize {
        Err(TensorError::Axis { op, axis, ndim })
    } else {
        Ok(a as usize)
    }
}

/// Normalized, sorted, deduplicated axes.
pub(crate) fn normalize_axes(op: &'static str, axes: &[isize], ndim: usize) -> Result<Vec<usize>> {
    let mut out = axes
        .iter()
        .map(|&a| normalize_axis(op, a, ndim))
        .collect::<Result<Vec<_>>>()?;
    out.sort_unstable();
    let n = out.len();
    out.dedup();
    if out.len() != n {
        return Err(TensorError::Argument {
            op,
            message: format!("repeated axis in {axes:?}"),
        });
    }
    Ok(out)
}

/// Sums a gradient of the broadcast shape down to `shape` (the reverse of
/// broadcasting). Returns the buffer unchanged when the shapes agree.
pub(crate) fn sum_to(grad: ArrayD<f32>, shape: &[usize]) -> ArrayD<f32> {
    if same_shape(grad.shape(), shape) {
        return grad;
    }
    sum_to_view(grad.view(), shape)
}

/// `g` (row-major, of shape `g_shape`) summed down to `acc`, of a
/// `shape` repeated along `g_shape`'s leading axes (a bias, a scalar), as
/// XLA sums the transposed broadcast; eager backpropagation and a compiled
/// step's replay both sum so.
pub(crate) fn sum_leading_into(g: &[f32], g_shape: &[usize], shape: &[usize], acc: &mut [f32]) {
    let n = acc.len();
    // The reduced dimensions: those before the target's (its leading ones
    // are broadcast too).
    let kept = shape.iter().skip_while(|&&d| d == 1).count();
    let reduced = &g_shape[..g_shape.len().saturating_sub(kept)];
    if n > 0 && reduced.len() > 1 && reduced.iter().all(|&d| d <= 32) {
        // Several reduced dimensions, none longer than XLA's tree window:
        // one reduce, left to right (measured: a convolution's bias over
        // (N, H, W)).
        acc.copy_from_slice(&g[..n]);
        for row in g[n..].chunks_exact(n) {
            acc.iter_mut().zip(row).for_each(|(d, &x)| *d += x);
        }
    } else {
        crate::xla::reduce::sum_columns_into(g, acc);
    }
}

/// [`sum_to`] of a borrowed gradient, for a shape that differs from it.
pub(crate) fn sum_to_view(grad: ArrayViewD<'_, f32>, shape: &[usize]) -> ArrayD<f32> {
    // Fast path: row-major gradient, target repeated along leading axes
    // (a bias or a scalar): add up the rows.
    let n: usize = shape.iter().product();
    if let Some(gs) = grad.as_slice() {
        if n > 0 && !gs.is_empty() && crate::tensor::ops::is_trailing(shape, grad.shape()) {
            let mut acc = zeros_vec(n);
            sum_leading_into(gs, grad.shape(), shape, &mut acc);
            return array_from_vec(ndarray::IxDyn(shape), acc);
        }
    }
    // JAX transposes the broadcast into one `reduce_sum` over all the
    // broadcast axes (the new leading ones and those of length 1), then a
    // reshape: one sum over several axes in XLA's order, not one axis
    // after another (measured: `x - mean` of a LayerNorm over two axes).
    let lead = grad.ndim() - shape.len();
    let axes: Vec<usize> = (0..grad.ndim())
        .filter(|&a| a < lead || (shape[a - lead] == 1 && grad.shape()[a] != 1))
        .collect();
    let summed = crate::tensor::ops::reduce::sum_axes(grad, &axes);
    let summed = if summed.is_standard_layout() {
        summed
    } else {
        summed.as_standard_layout().into_owned()
    };
    summed
        .into_shape_with_order(ndarray::IxDyn(shape))
        .expect("the kept axes are the target's")
}

/// Up to this many zeros are cleared by hand (see [`zeros_vec`]): 1 KiB,
/// about glibc's largest per-thread cached block.
const SMALL_ZEROS: usize = 256;

/// `n` zeros. A small buffer is allocated (from malloc's per-thread cache)
/// and then cleared: glibc's `calloc`, which `vec![0.0; n]` calls, skips
/// that cache and cost about five times as much at these sizes (measured:
/// the products and elementwise outputs of the eager 2-3-2 MLP step).
/// Larger buffers keep `calloc`, which gets fresh pages already zeroed.
pub(crate) fn zeros_vec(n: usize) -> Vec<f32> {
    if n <= SMALL_ZEROS {
        let mut v = Vec::with_capacity(n);
        v.resize(n, 0.0);
        v
    } else {
        vec![0.0; n]
    }
}

/// `values`, row-major, as an array of shape `dim`: what
/// `ArrayD::from_shape_vec` gives, without its general check of strides
/// against the buffer (about half of the 300 instructions it takes for a
/// dynamic shape, and every eager operation builds its output so).
///
/// Panics unless `values` holds exactly the shape's number of elements.
pub(crate) fn array_from_vec(dim: ndarray::IxDyn, values: Vec<f32>) -> ArrayD<f32> {
    let mut size = 1usize;
    let mut nonzero = 1usize;
    for &d in dim.slice() {
        size = size.saturating_mul(d);
        if d != 0 {
            nonzero = nonzero.saturating_mul(d);
        }
    }
    assert!(
        size == values.len() && nonzero <= isize::MAX as usize,
        "{} values for a shape of {dim:?}",
        values.len()
    );
    // SAFETY: `from_shape_vec_unchecked` with the default (row-major)
    // strides requires that the product of the non-zero axis lengths not
    // exceed `isize::MAX` (checked above) and that the row-major offsets
    // of the shape's elements lie inside `values`: they are exactly
    // `0..size`, and `size == values.len()` (checked above; when an axis is
    // 0 there are no elements). Row-major strides never reach one element
    // by two indices.
    unsafe { ArrayD::from_shape_vec_unchecked(dim, values) }
}

/// The number of elements of `shape`, checked for elements of `elem_size`
/// bytes: a product that overflows, or an array larger than `isize::MAX`
/// bytes, is [`TensorError::Argument`] naming `op` and the shape. A shape
/// with a zero dimension is empty, whatever its other dimensions, as long
/// as `ndarray` can represent it (the product of the non-zero dimensions
/// fits `isize`: `[0, 1 << 62, 1]` is empty, `[0, 1 << 62, 4]` an error).
/// Every constructor that allocates from a caller's shape goes through this
/// (or [`try_alloc`]).
pub(crate) fn checked_len_of(op: &'static str, shape: &[usize], elem_size: usize) -> Result<usize> {
    let nonzero = shape
        .iter()
        .filter(|&&d| d != 0)
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n <= isize::MAX as usize);
    let len = match nonzero {
        Some(_) if shape.contains(&0) => Some(0),
        Some(n) => Some(n).filter(|&n| n <= isize::MAX as usize / elem_size.max(1)),
        None => None,
    };
    len.ok_or_else(|| TensorError::Argument {
        op,
        message: format!("shape {shape:?} has too many elements to allocate"),
    })
}

/// An empty buffer with room for `shape`'s elements, or a typed error when
/// the count overflows or the memory cannot be had (instead of aborting).
pub(crate) fn try_alloc(op: &'static str, shape: &[usize]) -> Result<Vec<f32>> {
    try_alloc_of(op, shape)
}

/// [`try_alloc`] for any element type.
pub(crate) fn try_alloc_of<T>(op: &'static str, shape: &[usize]) -> Result<Vec<T>> {
    let size = std::mem::size_of::<T>();
    let n = checked_len_of(op, shape, size)?;
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| TensorError::Argument {
        op,
        message: format!(
            "cannot allocate {n} elements ({} bytes) for shape {shape:?}",
            n.saturating_mul(size)
        ),
    })?;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sum_to_reduces_leading_and_unit_axes() {
        let g = ArrayD::from_elem(ndarray::IxDyn(&[4, 2, 3]), 1.0f32);
        let r = sum_to(g, &[2, 1]);
        assert_eq!(r.shape(), &[2, 1]);
        assert!(r.iter().all(|&x| x == 12.0));
    }
}

#[cfg(test)]
mod array_from_vec_tests {
    use super::array_from_vec;
    use ndarray::{ArrayD, IxDyn};

    /// The arrays `from_shape_vec` gives: scalars, empty shapes (a zero
    /// axis beside long ones), several axes.
    #[test]
    fn builds_what_from_shape_vec_builds() {
        let shapes: [&[usize]; 5] = [&[], &[3], &[2, 3, 4], &[0, 5], &[4, 0, 1 << 40]];
        for shape in shapes {
            let n: usize = shape.iter().product();
            let v: Vec<f32> = (0..n).map(|i| i as f32).collect();
            let want = ArrayD::from_shape_vec(IxDyn(shape), v.clone()).unwrap();
            assert_eq!(array_from_vec(IxDyn(shape), v), want, "{shape:?}");
        }
    }

    #[test]
    #[should_panic(expected = "5 values for a shape")]
    fn a_wrong_length_panics() {
        array_from_vec(IxDyn(&[2, 3]), vec![0.0; 5]);
    }

    /// Non-zero lengths whose product passes `isize::MAX` are refused even
    /// when a zero axis makes the array empty (as `from_shape_vec` does).
    #[test]
    #[should_panic(expected = "0 values for a shape")]
    fn an_empty_shape_too_large_to_index_panics() {
        array_from_vec(IxDyn(&[0, 1 << 40, 1 << 40]), Vec::new());
    }
}
