//! Matrix multiplication (2-D, batched with broadcasting, and the 1-D cases
//! of `jnp.matmul`) through the `gemm` crate's AVX-512/AVX2 kernels.

use ndarray::{ArcArray, ArrayD, ArrayView2, ArrayViewD, Axis, Ix2, IxDyn, ShapeBuilder};
use smallvec::smallvec;

use crate::tensor::batched::{current_layout, virtual_layout, with_layout, Virtual};
use crate::tensor::compiled::in_compiled_region;
use crate::tensor::error::{Result, TensorError};
use crate::tensor::shape::{broadcast_shapes_for, sum_to};
use crate::tensor::tape::{DotFactors, FusedOuter, OpKind};
use crate::tensor::Tensor;

/// Below this many multiply-adds a product runs on the calling thread.
const PARALLEL_THRESHOLD: usize = 48 * 48 * 48;

/// At most this many multiply-adds go through a plain loop: gemm's setup
/// costs more than the product.
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
    // Inside a `vmap`, as part of JAX's batched product (see
    // `tensor::batched`).
    match current_layout() {
        None => gemv_plain_column(m, k, n),
        Some(Virtual::Rows { rows, .. }) => gemv_plain_column(rows, k, n),
        Some(Virtual::Cols { cols, offset }) => gemv_plain_column(m, k, cols)
            .and_then(|c| c.checked_sub(offset))
            .filter(|&c| c < n),
    }
}

/// [`plain_column`] of a product computed on its own.
fn gemv_plain_column(m: usize, k: usize, n: usize) -> Option<usize> {
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
    if m * n * k <= SMALL || k == 0 {
        out.fill(0.0);
        small_matmul_strided(x, sa, y, sb, m, k, n, out);
        return;
    }
    let a = ArrayView2::from_shape((m, k).strides(sa), x).expect("strides within the slice");
    let b = ArrayView2::from_shape((k, n).strides(sb), y).expect("strides within the slice");
    matmul2d_into(&a, &b, out);
}

/// `out = a @ b` for 2-D `a: [m, k]`, `b: [k, n]` with any strides, into
/// the row-major `out` of length `m * n` (whatever it held before).
/// Eager `matmul` and compiled steps share it, so both compute the same bits.
pub(crate) fn matmul2d_into(a: &ArrayView2<'_, f32>, b: &ArrayView2<'_, f32>, out: &mut [f32]) {
    let (m, k, n) = (a.nrows(), a.ncols(), b.ncols());
    assert!(b.nrows() == k && out.len() == m * n);
    if m * n * k <= SMALL || k == 0 {
        out.fill(0.0);
        small_matmul(a, b, out);
        return;
    }
    let (sa, sb) = (a.strides(), b.strides());
    let parallelism = if m * n * k >= PARALLEL_THRESHOLD {
        gemm::Parallelism::Rayon(0)
    } else {
        gemm::Parallelism::None
    };
    // SAFETY: `a` and `b` are valid 2-D views of shapes `[m, k]` and
    // `[k, n]`, so every element `(i, p)` / `(p, j)` that gemm reads through
    // the given row and column strides, with `i < m`, `p < k`, `j < n`, lies
    // in their storage. `out` is an exclusively borrowed slice of exactly
    // `m * n` elements, addressed row-major (column stride 1, row stride
    // `n`), so every write is in bounds; it cannot alias `a` or `b`, which
    // are shared borrows. `read_dst = false`: gemm overwrites `out` without
    // reading it (`k > 0` here).
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            out.as_mut_ptr(),
            1,
            n as isize,
            false,
            a.as_ptr(),
            sa[1],
            sa[0],
            b.as_ptr(),
            sb[1],
            sb[0],
            0.0,
            1.0,
            false,
            false,
            false,
            parallelism,
        );
    }
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
    let (sa, sb, so) = (av.strides(), bv.strides(), out.strides().to_vec());
    let parallelism = if m * n * k >= PARALLEL_THRESHOLD {
        gemm::Parallelism::Rayon(0)
    } else {
        gemm::Parallelism::None
    };
    let count: usize = batch.iter().product();
    let mut index = vec![0usize; nb];
    for _ in 0..count {
        let offset = |strides: &[isize]| -> isize {
            index
                .iter()
                .zip(strides)
                .map(|(&i, &s)| i as isize * s)
                .sum()
        };
        let (oa, ob, oo) = (offset(sa), offset(sb), offset(&so));
        // SAFETY: `av`, `bv` and `out` are valid arrays of shapes
        // `batch + [m, k]`, `batch + [k, n]` and `batch + [m, n]`; `index` is
        // within `batch`, so the offsets computed from each array's own
        // strides point at the first element of one matrix of that array, and
        // every element `(i, j)` that gemm reads or writes is reached from it
        // through that array's row/column strides with `i`, `j` below the
        // given dimensions, hence stays inside the array's allocation (zero
        // strides of broadcast axes only repeat reads). `out` is freshly
        // allocated, exclusively borrowed, row-major, so its matrices do not
        // overlap each other or the inputs. `read_dst = false`, so the
        // zero-initialized destination is only written.
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                out.as_mut_ptr().offset(oo),
                so[nb + 1],
                so[nb],
                false,
                av.as_ptr().offset(oa),
                sa[nb + 1],
                sa[nb],
                bv.as_ptr().offset(ob),
                sb[nb + 1],
                sb[nb],
                0.0,
                1.0,
                false,
                false,
                false,
                parallelism,
            );
        }
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
    /// Inside a compiled region (scan's body), the cotangent of `a @ b`
    /// (`[m, k] @ [k, n]`) that is an outer product — `b`'s when `m == 1`,
    /// `a`'s when `n == 1` — as XLA fuses it into its accumulation.
    fn fused_outer(a: &ArcArray<f32, IxDyn>, b: &ArcArray<f32, IxDyn>) -> Option<FusedOuter> {
        if a.ndim() != 2 || b.ndim() != 2 || !in_compiled_region() {
            return None;
        }
        let (m, n) = (a.shape()[0], b.shape()[1]);
        if m == 1 {
            // dB[i, j] = A[0, i] * g[0, j].
            let a = a.clone();
            Some(FusedOuter {
                input: 1,
                factors: Box::new(move |g| {
                    (a.iter().copied().collect(), g.iter().copied().collect())
                }),
            })
        } else if n == 1 {
            // dA[i, p] = g[i, 0] * B[p, 0].
            let b = b.clone();
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
            // A dot product: one row times one column.
            (1, 1) => self
                .matmul_of(other, true, true)
                .map_err(|_| incompatible()),
            (1, _) => self
                .matmul_of(other, true, false)
                .map_err(|_| incompatible()),
            (_, 1) => self
                .matmul_of(other, false, true)
                .map_err(|_| incompatible()),
            _ => self.matmul_of(other, false, false),
        }
    }

    /// `self @ other`, a vector operand (`lhs_vec`: a row on the left,
    /// `rhs_vec`: a column on the right) taken as a matrix whose unit axis
    /// is removed from the result; one recorded operation.
    fn matmul_of(&self, other: &Tensor, lhs_vec: bool, rhs_vec: bool) -> Result<Tensor> {
        let ad = if lhs_vec {
            self.data.clone().insert_axis(Axis(0))
        } else {
            self.data.clone()
        };
        let bd = if rhs_vec {
            other.data.clone().insert_axis(Axis(1))
        } else {
            other.data.clone()
        };
        let two_d = ad.ndim() == 2 && bd.ndim() == 2;
        let layout = if two_d {
            virtual_layout(self, other, ad.shape()[0], bd.shape()[1])
        } else {
            None
        };
        let out = with_layout(layout, || matmul_raw(ad.view(), bd.view()))?;
        // Without the unit axes of vector operands ([..., 1, n] and
        // [..., m, 1]).
        let full = out.shape().to_vec();
        let mut squeezed = full.clone();
        let r = full.len();
        if rhs_vec {
            squeezed.remove(r - 1);
        }
        if lhs_vec {
            squeezed.remove(r - 2);
        }
        let out = out
            .into_shape_with_order(IxDyn(&squeezed))
            .expect("only unit axes removed");
        if !self.is_traced() && !other.is_traced() {
            // Nothing to record (and no backward closures to build).
            return Ok(Tensor::constant(out.into_shared()));
        }
        let fused = Tensor::fused_outer(&ad, &bd);
        // In JAX's batched program, `g @ B^T` keeps the forward's folded
        // rows and `A^T @ g` its folded columns.
        let rows = layout.filter(|l| matches!(l, Virtual::Rows { .. }));
        let cols = layout.filter(|l| matches!(l, Virtual::Cols { .. }));
        let kind = if self.ndim() == 2 && other.ndim() == 2 && fused.is_none() {
            OpKind::Matmul
        } else {
            // Compiled steps do not replay fused accumulations.
            OpKind::Other
        };
        // The output's cotangent with the unit axes back.
        let widen = move |full: &[usize], g: &ArrayD<f32>| -> ArrayD<f32> {
            g.to_shape(IxDyn(full))
                .expect("only unit axes added")
                .into_owned()
        };
        let full_dot = full.clone();
        let (sa, sb) = (self.shape().to_vec(), other.shape().to_vec());
        let (a2, b2) = (ad.clone(), bd.clone());
        let dot: Option<DotFactors> = two_d.then(|| -> DotFactors {
            let (sa, sb) = (sa.clone(), sb.clone());
            Box::new(move |g, input| {
                let g = widen(&full_dot, g);
                if input == 1 {
                    (a2.to_owned(), g, sb.clone())
                } else {
                    (g.t().to_owned(), b2.t().to_owned(), sa.clone())
                }
            })
        });
        Ok(Tensor::record_fused(
            out.into_shared(),
            &[self, other],
            kind,
            move |g, needs| {
                let g = widen(&full, &g);
                // dA = g @ B^T, dB = A^T @ g, summed over broadcast batch
                // axes, in the operands' own shapes.
                let ga = needs[0].then(|| {
                    let mut bt = bd.view();
                    let r = bt.ndim();
                    bt.swap_axes(r - 2, r - 1);
                    let ga = sum_to(
                        with_layout(rows, || matmul_raw(g.view(), bt)).expect("shapes checked"),
                        ad.shape(),
                    );
                    ga.into_shape_with_order(IxDyn(&sa)).expect("same size")
                });
                let gb = needs[1].then(|| {
                    let mut at = ad.view();
                    let r = at.ndim();
                    at.swap_axes(r - 2, r - 1);
                    let gb = sum_to(
                        with_layout(cols, || matmul_raw(at, g.view())).expect("shapes checked"),
                        bd.shape(),
                    );
                    gb.into_shape_with_order(IxDyn(&sb)).expect("same size")
                });
                smallvec![ga, gb]
            },
            fused,
            dot,
        ))
    }
}
