//! Matrix multiplication (2-D, batched with broadcasting, and the 1-D cases
//! of `jnp.matmul`), summed in the order of XLA:CPU (jaxlib 0.10.2): the
//! YNNPACK dot kernels for most products (see [`super::ynn_dot`]), XLA's own
//! sequential chains for the others.

use ndarray::{ArrayD, ArrayView2, ArrayViewD, Axis, Ix2, IxDyn};
use smallvec::smallvec;

use crate::tensor::compiled::in_compiled_region;
use crate::tensor::error::{Result, TensorError};
use crate::tensor::shape::{broadcast_shapes_for, sum_to};
use crate::tensor::tape::{FusedOuter, OpKind};
use crate::tensor::Tensor;

use super::ynn_dot::{self, planned_matmul, DotPlan};

/// At most this many multiply-adds of a product that XLA sums with its own
/// emitter go through the plain loops below (no packing, no blocking).
const SMALL: usize = 16 * 16 * 16;

/// The output column that XLA sums without fused multiply-adds, if any.
///
/// The summation of small products follows what XLA's CPU backend compiles
/// for small dots, so that results match JAX bit for bit: each output is a
/// sequential chain `x0*y0`, then fused multiply-adds `fma(x_t, y_t, acc)`.
/// One measured exception (jaxlib 0.10.2, x86-64): for a single row
/// (`m == 1`) with 3 to 8 terms, XLA's column-major GEMV epilogue rounds
/// every product and sum separately in its first leftover column when there
/// are 2 columns, or `8k + 1` columns (k >= 1).
fn plain_column(m: usize, k: usize, n: usize) -> Option<usize> {
    if m != 1 || !(3..=8).contains(&k) {
        None
    } else if n == 2 {
        Some(0)
    } else if n > 8 && n % 8 == 1 {
        Some(n - 1)
    } else {
        None
    }
}

/// One term of an output's sum, in XLA's order (see [`plain_column`]).
#[inline(always)]
fn dot_step(p: usize, j: usize, plain: Option<usize>, x: f32, y: f32, acc: f32) -> f32 {
    if p == 0 {
        x * y
    } else if plain == Some(j) {
        acc + x * y
    } else {
        x.mul_add(y, acc)
    }
}

/// `out = a @ b` for `a: [m, k]` stored in `x` with (row, column) strides
/// `sa`, `b: [k, n]` in `y` with strides `sb`, and row-major `out`, each
/// output summed as [`dot_step`] says.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn small_matmul_body(
    x: &[f32],
    sa: (usize, usize),
    y: &[f32],
    sb: (usize, usize),
    m: usize,
    k: usize,
    n: usize,
    o: &mut [f32],
) {
    if k == 0 {
        o.fill(0.0);
        return;
    }
    let plain = plain_column(m, k, n);
    // One output at a time, its sum in a register: the chains of different
    // outputs are independent, so the CPU overlaps them.
    for i in 0..m {
        let xrow = i * sa.0;
        for (j, out) in o[i * n..(i + 1) * n].iter_mut().enumerate() {
            let ycol = j * sb.1;
            let mut acc = x[xrow] * y[ycol];
            if plain == Some(j) {
                for p in 1..k {
                    acc += x[xrow + p * sa.1] * y[p * sb.0 + ycol];
                }
            } else {
                for p in 1..k {
                    acc = x[xrow + p * sa.1].mul_add(y[p * sb.0 + ycol], acc);
                }
            }
            *out = acc;
        }
    }
}

/// [`small_matmul_body`] compiled with FMA instructions, so that
/// `mul_add` is one instruction instead of a call to libm's `fmaf` (both are
/// exactly rounded: same bits).
///
/// # Safety
///
/// The CPU must support FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn small_matmul_fma(
    x: &[f32],
    sa: (usize, usize),
    y: &[f32],
    sb: (usize, usize),
    m: usize,
    k: usize,
    n: usize,
    o: &mut [f32],
) {
    small_matmul_body(x, sa, y, sb, m, k, n, o)
}

/// `out = a @ b` for operands in contiguous slices with strides; see
/// [`small_matmul_body`].
#[allow(clippy::too_many_arguments)]
fn small_matmul_strided(
    x: &[f32],
    sa: (usize, usize),
    y: &[f32],
    sb: (usize, usize),
    m: usize,
    k: usize,
    n: usize,
    o: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU supports FMA, checked just above; that is the only
        // requirement of `small_matmul_fma`, whose body is safe code.
        unsafe { small_matmul_fma(x, sa, y, sb, m, k, n, o) };
        return;
    }
    small_matmul_body(x, sa, y, sb, m, k, n, o)
}

/// `out = a @ b` for 2-D operands; `out` is row-major zeros.
fn small_matmul(a: &ArrayView2<'_, f32>, b: &ArrayView2<'_, f32>, o: &mut [f32]) {
    let (m, k, n) = (a.nrows(), a.ncols(), b.ncols());
    let (sa, sb) = (a.strides(), b.strides());
    match (a.as_slice_memory_order(), b.as_slice_memory_order()) {
        (Some(x), Some(y)) if sa.iter().chain(sb).all(|&s| s >= 0) => {
            let sa = (sa[0] as usize, sa[1] as usize);
            let sb = (sb[0] as usize, sb[1] as usize);
            small_matmul_strided(x, sa, y, sb, m, k, n, o);
        }
        _ => {
            let plain = plain_column(m, k, n);
            for (i, orow) in o.chunks_exact_mut(n).enumerate() {
                for (p, brow) in b.rows().into_iter().enumerate() {
                    let x = a[[i, p]];
                    for (j, (o, &y)) in orow.iter_mut().zip(brow.iter()).enumerate() {
                        *o = dot_step(p, j, plain, x, y, *o);
                    }
                }
            }
        }
    }
}

/// Whether XLA hands `[m, k] @ [k, n]` to YNNPACK, for operands with
/// these (row, column) strides; `Some(b_transposed)` if so.
///
/// XLA:CPU (`ynn_support.cc`, jaxlib 0.10.2) sends a dot to YNNPACK when
/// `max(m, k, n) >= 8` and the left operand is canonical: a left operand
/// stored transposed (`A^T @ g`, which XLA folds into the dot as a
/// contraction over A's first axis) and matrix-vector products (one row or
/// column, which XLA turns into vector dots) take XLA's own emitter. A right
/// operand stored transposed (`g @ W^T`) stays with YNNPACK, which packs it.
fn ynn_route(m: usize, k: usize, n: usize, sa: (isize, isize), sb: (isize, isize)) -> Option<bool> {
    let lhs_transposed = sa.1 != 1 && sa.0 == 1 && k > 1;
    if m == 1 || n == 1 || m.max(k).max(n) < 8 || lhs_transposed {
        None
    } else {
        Some(sb.0 == 1 && sb.1 != 1 && k > 1)
    }
}

/// `out = a @ b` for operands in contiguous slices with non-negative
/// (row, column) strides, summed in XLA's order (see [`ynn_route`]);
/// `batches`: how many matrices the left and right operands of the whole
/// (batched) product hold, which YNNPACK weighs when deciding to pack B.
#[allow(clippy::too_many_arguments)]
fn dot_into(
    x: &[f32],
    sa: (usize, usize),
    y: &[f32],
    sb: (usize, usize),
    (m, k, n): (usize, usize, usize),
    batches: (usize, usize),
    out: &mut [f32],
) {
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        out.fill(0.0);
        return;
    }
    let route = ynn_route(
        m,
        k,
        n,
        (sa.0 as isize, sa.1 as isize),
        (sb.0 as isize, sb.1 as isize),
    );
    let plan = match route {
        None if m * n * k <= SMALL => {
            out.fill(0.0);
            small_matmul_strided(x, sa, y, sb, m, k, n, out);
            return;
        }
        None => DotPlan::chain(k, n),
        Some(b_transposed) => ynn_dot::plan(m, k, n, b_transposed, batches.0, batches.1),
    };
    if sb == (n, 1) {
        planned_matmul(x, sa, y, m, k, n, &plan, out);
    } else {
        // B row-major for the kernels (rows of B are read contiguously).
        let mut packed = Vec::with_capacity(k * n);
        for p in 0..k {
            packed.extend((0..n).map(|j| y[p * sb.0 + j * sb.1]));
        }
        planned_matmul(x, sa, &packed, m, k, n, &plan, out);
    }
}

/// [`matmul2d_into`] for operands given as contiguous slices with
/// non-negative (row, column) strides; skips building views for small
/// products (compiled steps). Same arithmetic, same bits.
#[allow(clippy::too_many_arguments)]
pub(crate) fn matmul_slices_into(
    x: &[f32],
    sa: (usize, usize),
    y: &[f32],
    sb: (usize, usize),
    m: usize,
    k: usize,
    n: usize,
    out: &mut [f32],
) {
    dot_into(x, sa, y, sb, (m, k, n), (1, 1), out);
}

/// A 2-D view as a contiguous slice with non-negative strides, copied to a
/// row-major array if it is not one.
fn as_strided<'a>(
    v: &'a ArrayView2<'_, f32>,
    copy: &'a mut Vec<f32>,
) -> (&'a [f32], (usize, usize)) {
    let s = v.strides();
    match v.as_slice_memory_order() {
        Some(x) if s.iter().all(|&s| s >= 0) => (x, (s[0] as usize, s[1] as usize)),
        _ => {
            *copy = v.iter().copied().collect();
            (copy.as_slice(), (v.ncols(), 1))
        }
    }
}

/// `out = a @ b` for 2-D `a: [m, k]`, `b: [k, n]` with any strides, into
/// the row-major `out` of length `m * n` (whatever it held before).
/// Eager `matmul` and compiled steps share it, so both compute the same bits.
pub(crate) fn matmul2d_into(a: &ArrayView2<'_, f32>, b: &ArrayView2<'_, f32>, out: &mut [f32]) {
    let (m, k, n) = (a.nrows(), a.ncols(), b.ncols());
    assert!(b.nrows() == k && out.len() == m * n);
    if m * n * k <= SMALL
        && ynn_route(
            m,
            k,
            n,
            (a.strides()[0], a.strides()[1]),
            (b.strides()[0], b.strides()[1]),
        )
        .is_none()
    {
        out.fill(0.0);
        small_matmul(a, b, out);
        return;
    }
    let (mut ca, mut cb) = (Vec::new(), Vec::new());
    let (x, sa) = as_strided(a, &mut ca);
    let (y, sb) = as_strided(b, &mut cb);
    dot_into(x, sa, y, sb, (m, k, n), (1, 1), out);
}

/// The matrix at batch `index` of a `[..., r, c]` view.
fn batch_matrix<'a>(v: &ArrayViewD<'a, f32>, index: &[usize]) -> ArrayView2<'a, f32> {
    let mut v = v.clone();
    for &i in index {
        v = v.index_axis_move(Axis(0), i);
    }
    v.into_dimensionality::<Ix2>().expect("2-D")
}

/// `a @ b` for `a: [..., m, k]`, `b: [..., k, n]` (both at least 2-D, with
/// matching `k`), broadcasting the batch axes. Any strides are accepted.
pub(crate) fn matmul_raw(a: ArrayViewD<'_, f32>, b: ArrayViewD<'_, f32>) -> Result<ArrayD<f32>> {
    let (ra, rb) = (a.ndim(), b.ndim());
    let (m, k) = (a.shape()[ra - 2], a.shape()[ra - 1]);
    let (k2, n) = (b.shape()[rb - 2], b.shape()[rb - 1]);
    let incompatible = || TensorError::Incompatible {
        op: "matmul",
        lhs: a.shape().to_vec(),
        rhs: b.shape().to_vec(),
    };
    if k != k2 {
        return Err(incompatible());
    }
    if ra == 2 && rb == 2 {
        let mut out = ArrayD::<f32>::zeros(IxDyn(&[m, n]));
        let (a2, b2) = (
            a.view().into_dimensionality::<Ix2>().expect("2-D"),
            b.view().into_dimensionality::<Ix2>().expect("2-D"),
        );
        matmul2d_into(&a2, &b2, out.as_slice_mut().expect("row-major"));
        return Ok(out);
    }
    let batch = broadcast_shapes_for("matmul", &a.shape()[..ra - 2], &b.shape()[..rb - 2])
        .map_err(|_| incompatible())?;
    let mut a_shape = batch.clone();
    a_shape.extend([m, k]);
    let mut b_shape = batch.clone();
    b_shape.extend([k, n]);
    let mut out_shape = batch.clone();
    out_shape.extend([m, n]);
    let av = a
        .broadcast(IxDyn(&a_shape))
        .expect("batch shapes broadcast");
    let bv = b
        .broadcast(IxDyn(&b_shape))
        .expect("batch shapes broadcast");
    let mut out = ArrayD::<f32>::zeros(IxDyn(&out_shape));
    if m == 0 || n == 0 || k == 0 {
        return Ok(out);
    }
    let nb = batch.len();
    // Batch axes along which each operand really varies (not broadcast).
    let count_of = |v: &ArrayViewD<'_, f32>| -> usize {
        (0..nb)
            .filter(|&d| v.strides()[d] != 0)
            .map(|d| batch[d])
            .product()
    };
    let batches = (count_of(&a), count_of(&b));
    let count: usize = batch.iter().product();
    let mut index = vec![0usize; nb];
    let mut o = out.as_slice_mut().expect("row-major");
    for _ in 0..count {
        let (a2, b2) = (batch_matrix(&av, &index), batch_matrix(&bv, &index));
        let (this, rest) = o.split_at_mut(m * n);
        o = rest;
        let (mut ca, mut cb) = (Vec::new(), Vec::new());
        let (x, sa) = as_strided(&a2, &mut ca);
        let (y, sb) = as_strided(&b2, &mut cb);
        dot_into(x, sa, y, sb, (m, k, n), batches, this);
        // Advance the row-major batch index.
        for d in (0..nb).rev() {
            index[d] += 1;
            if index[d] < batch[d] {
                break;
            }
            index[d] = 0;
        }
    }
    Ok(out)
}

impl Tensor {
    /// Inside a compiled region (scan's body), the cotangent of `[m, k] @
    /// [k, n]` that is an outer product — the right operand's when `m == 1`,
    /// the left's when `n == 1` — as XLA fuses it into its accumulation.
    fn fused_outer(&self, other: &Tensor) -> Option<FusedOuter> {
        if self.ndim() != 2 || other.ndim() != 2 || !in_compiled_region() {
            return None;
        }
        let (m, n) = (self.shape()[0], other.shape()[1]);
        if m == 1 {
            // dB[i, j] = A[0, i] * g[0, j].
            let a = self.data.clone();
            Some(FusedOuter {
                input: 1,
                factors: Box::new(move |g| {
                    (a.iter().copied().collect(), g.iter().copied().collect())
                }),
            })
        } else if n == 1 {
            // dA[i, p] = g[i, 0] * B[p, 0].
            let b = other.data.clone();
            Some(FusedOuter {
                input: 0,
                factors: Box::new(move |g| {
                    (g.iter().copied().collect(), b.iter().copied().collect())
                }),
            })
        } else {
            None
        }
    }

    /// The matrix product `jnp.matmul(self, other)`: `[m, k] @ [k, n]`,
    /// batched over leading axes with broadcasting (`[b, m, k] @ [k, n]`,
    /// `[b, 1, m, k] @ [c, k, n]`, ...); a 1-D operand is a vector (a row on
    /// the left, a column on the right) whose axis is removed from the
    /// result.
    ///
    /// Fails with [`TensorError::Incompatible`] naming both shapes when the
    /// inner lengths differ or the batch axes do not broadcast.
    ///
    /// ```
    /// use flaxen::tensor::Tensor;
    /// let a = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
    /// let b = Tensor::from_vec(vec![1.0, 0.0], &[2]).unwrap();
    /// assert_eq!(a.matmul(&b).unwrap().to_vec(), [1.0, 3.0]);
    /// assert!(a.matmul(&Tensor::zeros(&[3, 2])).is_err());
    /// ```
    pub fn matmul(&self, other: &Tensor) -> Result<Tensor> {
        let incompatible = || TensorError::Incompatible {
            op: "matmul",
            lhs: self.shape().to_vec(),
            rhs: other.shape().to_vec(),
        };
        match (self.ndim(), other.ndim()) {
            (0, _) | (_, 0) => Err(incompatible()),
            (1, 1) => {
                if self.shape() != other.shape() {
                    return Err(incompatible());
                }
                Ok(self.mul(other)?.sum_all())
            }
            (1, _) => {
                let r = self
                    .expand_dims(0)?
                    .matmul(other)
                    .map_err(|_| incompatible())?;
                r.squeeze(-2)
            }
            (_, 1) => {
                let r = self
                    .matmul(&other.expand_dims(1)?)
                    .map_err(|_| incompatible())?;
                r.squeeze(-1)
            }
            _ => {
                let out = matmul_raw(self.data.view(), other.data.view())?.into_shared();
                let (ad, bd) = (self.data.clone(), other.data.clone());
                let fused = self.fused_outer(other);
                let kind = if self.ndim() == 2 && other.ndim() == 2 && fused.is_none() {
                    OpKind::Matmul
                } else {
                    // Compiled steps do not replay fused accumulations.
                    OpKind::Other
                };
                Ok(Tensor::record_fused(
                    out,
                    &[self, other],
                    kind,
                    move |g, needs| {
                        // dA = g @ B^T, dB = A^T @ g, summed over broadcast batch axes.
                        let ga = needs[0].then(|| {
                            let bt = {
                                let mut v = bd.view();
                                let r = v.ndim();
                                v.swap_axes(r - 2, r - 1);
                                v
                            };
                            sum_to(
                                matmul_raw(g.view(), bt).expect("shapes checked"),
                                ad.shape(),
                            )
                        });
                        let gb = needs[1].then(|| {
                            let at = {
                                let mut v = ad.view();
                                let r = v.ndim();
                                v.swap_axes(r - 2, r - 1);
                                v
                            };
                            sum_to(
                                matmul_raw(at, g.view()).expect("shapes checked"),
                                bd.shape(),
                            )
                        });
                        smallvec![ga, gb]
                    },
                    fused,
                ))
            }
        }
    }
}
