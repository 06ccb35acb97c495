//! Matrix multiplication (2-D, batched with broadcasting, and the 1-D cases
//! of `jnp.matmul`), summed in the order of XLA:CPU (jaxlib 0.10.2): the
//! YNNPACK dot kernels for most products (see [`crate::xla::dot`]), XLA's own
//! sequential chains for the others. Products larger than
//! [`exact_matmul_limit`] (none by default) use the `gemm` crate's kernels
//! instead.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use ndarray::{ArcArray, Array2, ArrayD, ArrayView2, ArrayViewD, Axis, Dimension, Ix2, IxDyn};

use smallvec::smallvec;

use crate::tensor::batched::{current_layout, virtual_layout, with_layout, Virtual};
use crate::tensor::compiled::in_compiled_region;
use crate::tensor::error::{Result, TensorError};
use crate::tensor::forward::bilinear;
use crate::tensor::shape::{broadcast_shapes_for, same_shape, sum_to, zeros_vec};
use crate::tensor::tape::{DotFactors, FusedOuter, OpKind};
use crate::tensor::Tensor;
use crate::xla::dot_tiny::TinySum;

use crate::xla::dot::{self as ynn_dot, DotPlan};
use crate::xla::eigen_dot;

use super::dot_general::{is_canonical, jnp_matmul_dims};
use crate::xla::dot_blocked::planned_matmul;
use crate::xla::fused_dot;
use crate::xla::gemv;

mod fast;
mod routes;

use fast::fast_matmul;

/// At most this many multiply-adds of a product that XLA sums with its own
/// emitter go through the plain loops below (no packing, no blocking).
const SMALL: usize = 16 * 16 * 16;

/// The output column that XLA sums without fused multiply-adds, if any.
///
/// The summation of small products follows what XLA's CPU backend compiles
/// for small dots, so that results match JAX bit for bit: each output is a
/// sequential chain `x0*y0`, then fused multiply-adds `fma(x_t, y_t, acc)`.
/// One measured exception (jaxlib 0.10.2, x86-64): for a single row
/// (`m == 1`) with at least 3 terms, XLA's column-major GEMV epilogue
/// rounds the products and sums of terms `1..8` separately
/// ([`gemv::plain_column_sum`]) in its first leftover column when there
/// are 2 columns, or `8j + 1` columns (j >= 1).
fn plain_column(m: usize, k: usize, n: usize) -> Option<usize> {
    // Inside a `vmap`, as part of JAX's batched product (see
    // `tensor::batched`).
    match current_layout() {
        None => gemv_plain_column(m, k, n),
        Some(Virtual::Rows { rows, .. }) => gemv_plain_column(rows, k, n),
        Some(Virtual::Cols { cols, offset }) => gemv_plain_column(m, k, cols)
            .and_then(|c| c.checked_sub(offset))
            .filter(|&c| c < n),
        Some(Virtual::Batched { .. }) => gemv_plain_column(m, k, n),
    }
}

/// [`plain_column`] of a product computed on its own.
fn gemv_plain_column(m: usize, k: usize, n: usize) -> Option<usize> {
    if m != 1 || k < 3 {
        None
    } else if n == 2 {
        Some(0)
    } else if n > 8 && n % 8 == 1 {
        Some(n - 1)
    } else {
        None
    }
}

/// The first output column whose sums XLA:CPU (jaxlib 0.10.2, x86-64)
/// starts from the first product itself rather than from a `+0`
/// accumulator, for `[m, k] @ [k, n]` as XLA sees it (`k >= 1`) with B's
/// (row, column) strides `sb`; `usize::MAX` if none. That only decides the
/// sign of a zero sum: from `+0`, a sum of `-0` products is `+0`; from the
/// first product, it is `-0`. Measured (`jnp.matmul` and its VJP):
///
/// * `k == 1`: every column. XLA's algebraic simplifier rewrites a dot
///   whose contraction has length 1 as a plain multiply (so `-0` products
///   stay `-0`, in any shape and layout).
/// * One row (`m == 1`, `n >= 2`) and B not stored transposed: the
///   columns after the last full group of 8 (`8 * (n / 8)` on; all of
///   them when `n < 8`). XLA's column-major GEMV sums groups of 8 columns
///   in vector accumulators cleared to `+0`, and the leftover columns in
///   an epilogue whose sums start from the first product (the
///   [`plain_column`] among them). With B stored transposed (`g @ W^T`,
///   XLA's row-major GEMV), a vector dot (`n == 1`) or several rows, all
///   sums start from `+0`. (`A^T @ g` with one column, A stored
///   transposed, XLA computes as one row `g^T @ A`: see
///   [`DotRoute::Transposed`].)
///
/// Products with a broadcast operand (`[b, 1, k] @ [k, n]`, `[1, k] @
/// [b, k, n]`) reach this as the one product XLA makes of them, the batch
/// folded into the rows or the columns (see `dot_general`).
fn signed_from(m: usize, k: usize, n: usize, sb: (usize, usize)) -> usize {
    let b_transposed = sb.0 == 1 && sb.1 != 1;
    if k == 1 {
        0
    } else if m == 1 && n >= 2 && !b_transposed {
        n / 8 * 8
    } else {
        usize::MAX
    }
}

/// [`signed_from`] for one matrix of a product with `batches` (as for
/// [`dot_into`]), in the columns of this product: inside a `vmap`, the
/// product is part of JAX's batched one (see `tensor::batched`).
fn signed_columns(
    m: usize,
    k: usize,
    n: usize,
    sb: (usize, usize),
    batches: (usize, usize),
) -> usize {
    if k == 1 {
        return 0;
    }
    match current_layout() {
        None if batches.0 != batches.1 => usize::MAX,
        None | Some(Virtual::Batched { .. }) => signed_from(m, k, n, sb),
        Some(Virtual::Rows { rows, .. }) => signed_from(rows, k, n, sb),
        Some(Virtual::Cols { cols, offset }) => signed_from(m, k, cols, sb).saturating_sub(offset),
    }
}

/// The value XLA's sum of column `j` starts from, added to its first
/// product: `+0`, or `-0` (which leaves every product as it is) from
/// column `from` on (see [`signed_from`]).
#[inline(always)]
fn start(j: usize, from: usize) -> f32 {
    if j >= from {
        -0.0
    } else {
        0.0
    }
}

/// One term of an output's sum, in XLA's order (see [`plain_column`] and
/// [`signed_from`]).
#[inline(always)]
fn dot_step(
    p: usize,
    j: usize,
    (plain, from): (Option<usize>, usize),
    x: f32,
    y: f32,
    acc: f32,
) -> f32 {
    if p == 0 {
        // XLA's accumulator starts at +0 (but in the columns `from` on):
        // the first product is exact, but a -0 product becomes +0.
        x * y + start(j, from)
    } else if plain == Some(j) && p < gemv::PLAIN_TERMS {
        acc + x * y
    } else {
        x.mul_add(y, acc)
    }
}

/// `out = a @ b` for `a: [m, k]` stored in `x` with (row, column) strides
/// `sa`, `b: [k, n]` in `y` with strides `sb`, and row-major `out`, each
/// output summed as [`dot_step`] says (`plain`: [`plain_column`], `from`:
/// [`signed_columns`]).
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
    (plain, from): (Option<usize>, usize),
) {
    if k == 0 {
        o.fill(0.0);
        return;
    }
    // One output at a time, its sum in a register: the chains of different
    // outputs are independent, so the CPU overlaps them.
    for i in 0..m {
        let xrow = i * sa.0;
        for (j, out) in o[i * n..(i + 1) * n].iter_mut().enumerate() {
            let ycol = j * sb.1;
            let term = |p: usize| (x[xrow + p * sa.1], y[p * sb.0 + ycol]);
            if plain == Some(j) {
                *out = gemv::plain_column_sum(start(j, from), k, term);
                continue;
            }
            // From +0 (or the first product), as XLA accumulates (see
            // `dot_step`).
            let mut acc = x[xrow] * y[ycol] + start(j, from);
            for p in 1..k {
                acc = x[xrow + p * sa.1].mul_add(y[p * sb.0 + ycol], acc);
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
    (plain, from): (Option<usize>, usize),
) {
    small_matmul_body(x, sa, y, sb, m, k, n, o, (plain, from))
}

/// `out = a @ b` for operands in contiguous slices with strides; see
/// [`small_matmul_body`]; `plain`: [`plain_column`]'s answer, `from`:
/// [`signed_columns`]'s.
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
    (plain, from): (Option<usize>, usize),
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU supports FMA, checked just above; that is the only
        // requirement of `small_matmul_fma`, whose body is safe code.
        unsafe { small_matmul_fma(x, sa, y, sb, m, k, n, o, (plain, from)) };
        return;
    }
    small_matmul_body(x, sa, y, sb, m, k, n, o, (plain, from))
}

/// `out = a @ b` for 2-D operands; `out` is row-major zeros.
fn small_matmul(a: &ArrayView2<'_, f32>, b: &ArrayView2<'_, f32>, o: &mut [f32]) {
    let (m, k, n) = (a.nrows(), a.ncols(), b.ncols());
    let (sa, sb) = (a.strides(), b.strides());
    match (a.as_slice_memory_order(), b.as_slice_memory_order()) {
        (Some(x), Some(y)) if sa.iter().chain(sb).all(|&s| s >= 0) => {
            let sa = (sa[0] as usize, sa[1] as usize);
            let sb = (sb[0] as usize, sb[1] as usize);
            let from = signed_columns(m, k, n, sb, (1, 1));
            small_matmul_strided(x, sa, y, sb, m, k, n, o, (plain_column(m, k, n), from));
        }
        _ => {
            // B's strides as XLA sees them: only whether B is transposed
            // matters (see `signed_from`).
            let sb = (sb[0].unsigned_abs(), sb[1].unsigned_abs());
            let plain = (plain_column(m, k, n), signed_columns(m, k, n, sb, (1, 1)));
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

/// The route of a product with its left operand stored transposed that
/// XLA hands to Eigen's contraction, where Eigen sums it in more than one
/// block of terms (see [`crate::xla::eigen_dot`]): blocks of one length as
/// a plan (the first block's chain, then each further block from `+0`,
/// added), others as [`DotRoute::Eigen`]. `None` for every other product
/// (one chain per output; inside a `vmap`, not modelled).
fn eigen_route(
    sa: (usize, usize),
    (m, k, n): (usize, usize, usize),
    (pm, pn, batches): (usize, usize, (usize, usize)),
    offset: bool,
) -> Option<DotRoute> {
    let lhs_transposed = sa.1 != 1 && sa.0 == 1 && k > 1;
    if !lhs_transposed || offset || (pm, pn) != (m, n) || batches != (1, 1) {
        return None;
    }
    Some(
        match eigen_dot::eigen_run(m, k, n, &eigen_dot::Machine::current())? {
            eigen_dot::EigenRun::Plan(plan) => DotRoute::Planned(Arc::new(plan)),
            eigen_dot::EigenRun::Blocks(blocks) => DotRoute::Eigen(blocks.into()),
        },
    )
}

/// How one product of a given shape and strides is summed: decided once
/// per shape (compiled steps keep it), then run by [`DotRoute::run`].
#[derive(Clone, Debug)]
pub(crate) enum DotRoute {
    /// An empty output (`m` or `n` is 0).
    Empty,
    /// No terms (`k` is 0): zeros.
    Zeros,
    /// One term (`k` is 1): XLA multiplies (see [`signed_from`]).
    Outer,
    /// XLA's own emitter for a small product: plain chains (but for the
    /// column [`plain_column`] names), from `+0` but in the columns from
    /// [`signed_columns`] on.
    Small(Option<usize>, usize),
    /// A plan summed one output at a time (small products, B read through
    /// its strides).
    Scalar(Arc<DotPlan>),
    /// A plan run by the blocked kernels (B packed row-major first if it is
    /// not).
    Planned(Arc<DotPlan>),
    /// Above [`exact_matmul_limit`]: the `gemm` crate.
    Fast,
    /// A row-major matrix times a vector (`[m, k] @ [k, 1]`, `m >= 2`):
    /// XLA's row-major GEMV (see `gemv`).
    RowGemv,
    /// A vector dot (`[1, k] @ [k, 1]`): XLA's reduction of the products.
    VectorDot,
    /// One row times a matrix stored transposed (`g @ B^T`, `g: [1, k]`,
    /// B row-major `[n, k]`): XLA's row-major GEMV over B's rows.
    RowGemvT,
    /// A matrix stored transposed times a vector (`A^T @ g` with `g: [k,
    /// 1]`, A row-major `[k, m]`): XLA computes `g^T @ A`, one row times a
    /// row-major matrix (its column-major GEMV), along this route of
    /// `[1, k] @ [k, m]`.
    Transposed(Box<DotRoute>),
    /// This route's chains, then output column `.1` summed again as XLA's
    /// column-major GEMV sums its plain column ([`plain_column`],
    /// [`gemv::plain_column_sum`]) from the start [`signed_from`] (`.2`)
    /// gives it: the blocked kernels have no such column.
    PlainColumn(Box<DotRoute>, usize, usize),
    /// A left operand stored transposed, summed as Eigen's contraction
    /// sums it when its blocks of terms differ in length or it shards by
    /// the inner dimension: each block of ranges of terms into a buffer of
    /// its own (each range a chain from `+0`, added to the ranges before
    /// it), the buffers then added in Eigen's order
    /// ([`eigen_dot::combine`]).
    Eigen(Arc<[Vec<(usize, usize)>]>),
}

impl DotRoute {
    /// The route of `[m, k] @ [k, n]` for operands with (row, column)
    /// strides `sa`, `sb`, outside a `vmap` layout; `batches` as for
    /// [`dot_into`].
    pub(crate) fn new(
        sa: (usize, usize),
        sb: (usize, usize),
        (m, k, n): (usize, usize, usize),
        batches: (usize, usize),
    ) -> DotRoute {
        Self::with_plan_shape(sa, sb, (m, k, n), (m, n, batches), false)
    }

    /// [`DotRoute::new`] for a product planned as `pm x pn` with `batches`
    /// (the shape XLA sees inside a `vmap`); `offset`: this item's columns
    /// sit among others' (no per-output route then).
    fn with_plan_shape(
        sa: (usize, usize),
        sb: (usize, usize),
        (m, k, n): (usize, usize, usize),
        (pm, pn, batches): (usize, usize, (usize, usize)),
        offset: bool,
    ) -> DotRoute {
        if m == 0 || n == 0 {
            return DotRoute::Empty;
        }
        if k == 0 {
            return DotRoute::Zeros;
        }
        if k == 1 {
            return DotRoute::Outer;
        }
        if m * k * n > exact_matmul_limit() {
            return DotRoute::Fast;
        }
        // Matrix-vector products, when XLA sees this product alone (not
        // folded into a `vmap`'s batched one).
        // One row times a matrix stored transposed: XLA's dot emitter runs
        // it as B's rows times the row (measured: `[1, k] @ [k, n]`'s
        // cotangent `g @ B^T`, alone and per batch).
        if m == 1 && n >= 2 && (pm, pn) == (m, n) && sb.0 == 1 && sb.1 != 1 {
            return DotRoute::RowGemvT;
        }
        if n == 1 && (pm, pn) == (m, n) {
            if m == 1 {
                return DotRoute::VectorDot;
            }
            if sa.1 == 1 {
                return DotRoute::RowGemv;
            }
            // Alone, or an item of a `vmap` whose operands are all its own:
            // JAX's batched dot sums each item as this product alone
            // (measured: an ensemble of `Dense(1)` heads' weight gradients).
            let own =
                batches == (1, 1) || matches!(current_layout(), Some(Virtual::Batched { .. }));
            if sa.0 == 1 && own {
                // Each output's sum is the same chain of products either
                // way round; the transposed product has XLA's GEMV epilogue
                // (`plain_column`, `signed_from`), measured for `A^T @ g`.
                return DotRoute::Transposed(Box::new(Self::with_plan_shape(
                    (k * sb.0, sb.0),
                    (sa.1, 1),
                    (1, k, m),
                    (1, m, (1, 1)),
                    false,
                )));
            }
        }
        let route = ynn_route(
            pm,
            k,
            pn,
            (sa.0 as isize, sa.1 as isize),
            (sb.0 as isize, sb.1 as isize),
        );
        if let Some(route) = eigen_route(sa, (m, k, n), (pm, pn, batches), offset) {
            return route;
        }
        let plan = match route {
            None if pm * pn * k <= SMALL => {
                let from = signed_columns(m, k, n, sb, batches);
                return DotRoute::Small(plain_column(m, k, n), from);
            }
            None => {
                // In the columns of the product planned (this item's
                // columns among others' inside a `vmap`).
                let from = if batches.0 == batches.1 {
                    signed_from(pm, k, pn, sb)
                } else {
                    usize::MAX
                };
                let plan = Arc::new(DotPlan::chain(k, pn).signed_from(from));
                // XLA's GEMV epilogue's plain column, when this product is
                // the one XLA sees.
                let alone = !offset && (pm, pn) == (m, n) && batches == (1, 1);
                if let (true, Some(j)) = (alone, plain_column(m, k, n)) {
                    return DotRoute::PlainColumn(Box::new(DotRoute::Planned(plan)), j, from);
                }
                plan
            }
            Some(b_transposed) => {
                ynn_dot::cached_plan(pm, k, pn, b_transposed, batches.0, batches.1)
            }
        };
        if !offset && m * k * n <= ynn_dot::SCALAR_LIMIT {
            DotRoute::Scalar(plan)
        } else {
            DotRoute::Planned(plan)
        }
    }

    /// `out = a @ b` along this route, for `a` in `x` with strides `sa`,
    /// `b` in `y` with strides `sb` (the strides the route was decided
    /// for), outside a `vmap` layout. `packed`: scratch for B row-major.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn run(
        &self,
        x: &[f32],
        sa: (usize, usize),
        y: &[f32],
        sb: (usize, usize),
        (m, k, n): (usize, usize, usize),
        out: &mut [f32],
        packed: &mut Vec<f32>,
    ) {
        match self {
            DotRoute::Empty => {}
            DotRoute::Zeros => out.fill(0.0),
            DotRoute::Outer => {
                for (i, row) in out.chunks_exact_mut(n).enumerate() {
                    let xi = x[i * sa.0];
                    for (j, o) in row.iter_mut().enumerate() {
                        *o = xi * y[j * sb.1];
                    }
                }
            }
            DotRoute::Small(plain, from) => {
                small_matmul_strided(x, sa, y, sb, m, k, n, out, (*plain, *from))
            }
            DotRoute::Scalar(plan) if sa.1 == 1 && sb.1 == 1 && sb.0 != 1 && k >= 16 => {
                // B's columns gathered, so that every output is a dot of
                // two contiguous slices (for a few terms, reading B through
                // its strides costs less than gathering it).
                packed.clear();
                packed.resize(n * k, 0.0);
                for (j, col) in packed.chunks_exact_mut(k).enumerate() {
                    for (p, v) in col.iter_mut().enumerate() {
                        *v = y[p * sb.0 + j];
                    }
                }
                ynn_dot::planned_scalar(x, sa, packed, (1, k), (m, k, n), plan, out)
            }
            DotRoute::Scalar(plan) => ynn_dot::planned_scalar(x, sa, y, sb, (m, k, n), plan, out),
            DotRoute::Fast => fast_matmul(x, sa, y, sb, (m, k, n), out),
            DotRoute::RowGemv => gemv::row_major_gemv(x, sa.0, y, sb.0, m, k, out),
            DotRoute::VectorDot => out[0] = gemv::vector_dot(x, sa.1, y, sb.0, k),
            DotRoute::RowGemvT => gemv::row_major_gemv(y, sb.1, x, sa.1, n, k, out),
            DotRoute::Transposed(route) => {
                route.run(y, (k * sb.0, sb.0), x, (sa.1, 1), (1, k, m), out, packed)
            }
            DotRoute::Planned(plan) => planned_matmul(x, sa, y, sb, (m, k, n), plan, out, packed),
            DotRoute::PlainColumn(route, j, from) => {
                route.run(x, sa, y, sb, (m, k, n), out, packed);
                for (i, row) in out.chunks_exact_mut(n).enumerate() {
                    let term = |p: usize| (x[i * sa.0 + p * sa.1], y[p * sb.0 + j * sb.1]);
                    row[*j] = gemv::plain_column_sum(start(*j, *from), k, term);
                }
            }
            DotRoute::Eigen(blocks) => {
                eigen_dot::sum_blocks(x, sa, y, sb, (m, k, n), blocks, out, packed)
            }
        }
    }
}

impl DotRoute {
    /// How each output of a small product on this route (of shape `(m, k,
    /// n)`) is summed, when
    /// [`gathered_product`](crate::xla::dot_tiny::gathered_product) can
    /// compute it: a plan summed in one chunk per output, or XLA's own
    /// emitter's chains (the same sums as the route's, see [`TinySum`]);
    /// `None` for other routes, run as they are.
    pub(crate) fn tiny_sum(&self, (m, k, n): (usize, usize, usize)) -> Option<TinySum> {
        match self {
            DotRoute::Scalar(plan) if m * k * n <= ynn_dot::SCALAR_LIMIT => {
                TinySum::of_plan(plan, k, n)
            }
            DotRoute::Small(plain, from) if m * k * n <= ynn_dot::SCALAR_LIMIT && k >= 2 => {
                Some(TinySum::Chain {
                    plain: *plain,
                    from: *from,
                })
            }
            _ => None,
        }
    }
}

thread_local! {
    /// Scratch for B's packed panels, kept between eager products: a fresh
    /// buffer of megabytes per product cost more in page faults than the
    /// packing itself (784-512-512-10 step: 3.9 ms eager against 1.7 ms
    /// compiled, whose steps keep their scratch).
    static PACKED: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// `out = a @ b` for operands in contiguous slices with non-negative
/// (row, column) strides, summed in XLA's order (see [`ynn_route`]);
/// `batches`: how many matrices the left and right operands of the whole
/// (batched) product hold, which YNNPACK weighs when deciding to pack B.
#[allow(clippy::too_many_arguments)]
pub(crate) fn dot_into(
    x: &[f32],
    sa: (usize, usize),
    y: &[f32],
    sb: (usize, usize),
    (m, k, n): (usize, usize, usize),
    batches: (usize, usize),
    out: &mut [f32],
) {
    let layout = current_layout();
    let planned = planned_shape(m, n, batches);
    let pn = planned.1;
    // With the items folded into the columns, this item's columns sit at
    // their place among zero columns, since a column's sum depends on where
    // it falls in the kernels' tiles.
    let offset = match layout {
        Some(Virtual::Cols { offset, .. }) if pn != n => Some(offset),
        _ => None,
    };
    let route = DotRoute::with_plan_shape(sa, sb, (m, k, n), planned, offset.is_some());
    let (DotRoute::Planned(plan), Some(start)) = (&route, offset) else {
        PACKED.with(|p| route.run(x, sa, y, sb, (m, k, n), out, &mut p.borrow_mut()));
        return;
    };
    let mut packed = vec![0.0; k * pn];
    for p in 0..k {
        for j in 0..n {
            packed[p * pn + start + j] = y[p * sb.0 + j * sb.1];
        }
    }
    let mut wide = vec![0.0; m * pn];
    let mkn = (m, k, pn);
    planned_matmul(
        x,
        sa,
        &packed,
        (pn, 1),
        mkn,
        plan,
        &mut wide,
        &mut Vec::new(),
    );
    for (row, o) in wide.chunks_exact(pn).zip(out.chunks_exact_mut(n)) {
        o.copy_from_slice(&row[start..start + n]);
    }
}

/// The default [`exact_matmul_limit`]: none. Every product is summed in
/// XLA:CPU's order, bit-exact with JAX, unless a program lowers the limit
/// with [`set_exact_matmul_limit`]. (It was 4.2 million multiply-adds
/// until the exact kernels caught up with gemm's on large products.)
pub const DEFAULT_EXACT_MATMUL_LIMIT: usize = usize::MAX;

static EXACT_MATMUL_LIMIT: AtomicUsize = AtomicUsize::new(DEFAULT_EXACT_MATMUL_LIMIT);

/// Sets the size (multiply-adds `m·k·n`) up to which matrix products are
/// summed in XLA:CPU's order, bit-exact with JAX, for the whole process;
/// larger ones use the `gemm` crate's kernels, not in JAX's order (results
/// differ by a few ulp). By default there is no limit
/// ([`DEFAULT_EXACT_MATMUL_LIMIT`]): every product is exact, and a
/// 784-512-512-10 training step matches JAX bit for bit.
///
/// A lower limit trades exactness for speed on the kinds of product where
/// gemm is still faster. Measured on 2 cores, best of many calls, exact
/// against gemm, each pair in the same minute:
///
/// - about as fast or faster: the training step's products (`[128, 784] @
///   [784, 512]` 223 against 213 us, `[128, 512] @ [512, 784]` with B
///   transposed 285 against 337, `A^T @ G` `[784, 128] @ [128, 512]` 220
///   against 226, `[128, 512] @ [512, 10]` 7.0 against 15.7), square ones
///   (`[1024, 1024] @ [1024, 1024]` 4.25 against 4.12 ms), narrow ones
///   (`[2048, 512] @ [512, 36]` 167 against 201, `[6272, 288] @ [288, 64]`
///   459 against 452, `[25088, 144] @ [144, 32]` 489 against 471), few
///   rows (`[8, 1024] @ [1024, 48]` 3.1 against 3.6, `[1, 4096] @ [4096,
///   4096]` 1.7 against 2.7 ms), one column (`[2048, 100] @ [100, 1]` 8.0
///   against 11.2);
/// - slower: long chains, as in weight gradients `A^T @ G` over a large
///   batch (`[512, 8192] @ [8192, 512]` 10.7 against 9.6 ms, run in pieces
///   of 512 terms; `[64, 8192] @ [8192, 512]`, too few rows for pieces to
///   pay, 1.3x), wide products with four partial sums per output (`[128, 512]
///   @ [512, 784]` 251 against 222 us; the step's own, with B transposed,
///   is faster), tall products with B transposed, several partial sums
///   per output and few columns (`[25088, 32] @ [32, 144]` 788 against 634
///   us), products
///   with at most 16 terms (`[512, 16] @ [16, 40]` 6.3 against 4.2 us;
///   `[128, 10] @ [10, 512]` with B transposed 10.8 against 6.5), few rows
///   of four-partial-sum products (`[8, 100] @ [100, 100]` 2.4 against
///   1.6), and dots of two long vectors (`[1, 2048] @ [2048, 1]` 0.7
///   against 0.3).
///
/// A whole training step is not slower with every product exact: the
/// 784-512-512-10 step at batch 128 (`AUTODIFF_BATCHES=1 cargo bench
/// --bench autodiff`) took 0.99 ms compiled against 1.00 ms with the old
/// 4.2M limit (JAX: 1.21 ms), and eagerly 1.03-1.04 ms either way after
/// [`crate::memory::keep_freed_memory`]. Without that call an eager step
/// over large arrays pays glibc's page faults: 2.19 ms every product exact,
/// 1.05 ms with the old limit, only because the gemm crate's own scratch,
/// allocated and freed per call, happened to raise glibc's thresholds
/// above the step's size (convolution steps, which never call gemm, pay
/// the same faults; see [`crate::memory`]).
///
/// ```
/// use flaxen::tensor::{set_exact_matmul_limit, DEFAULT_EXACT_MATMUL_LIMIT};
/// set_exact_matmul_limit(1 << 22); // gemm above 4.2M multiply-adds
/// set_exact_matmul_limit(DEFAULT_EXACT_MATMUL_LIMIT); // every product exact
/// ```
pub fn set_exact_matmul_limit(multiply_adds: usize) {
    EXACT_MATMUL_LIMIT.store(multiply_adds, Ordering::Relaxed);
}

/// The current [`set_exact_matmul_limit`].
pub fn exact_matmul_limit() -> usize {
    EXACT_MATMUL_LIMIT.load(Ordering::Relaxed)
}

/// The rows, columns and batch counts XLA routes and plans `[m, k] @ [k,
/// n]` for: inside a `vmap`, the product is part of JAX's batched one (see
/// `tensor::batched`).
fn planned_shape(m: usize, n: usize, batches: (usize, usize)) -> (usize, usize, (usize, usize)) {
    match current_layout() {
        Some(Virtual::Rows { rows, .. }) => (rows, n, batches),
        Some(Virtual::Cols { cols, .. }) => (m, cols, batches),
        Some(Virtual::Batched { items }) => (m, n, (items, items)),
        None => (m, n, batches),
    }
}

/// `A^T @ g` for a `vmap` item whose left operand `a` (`[m, k]`) is shared
/// by the items and whose right one is its own, its `n` columns at
/// `offset` of the `cols` that JAX folds the items' into (the forward's
/// [`Virtual::Cols`]). JAX's batched transpose computes every item's at
/// once as the rows of one plain product, `g'[cols, m] @ a[m, k]` (the
/// stacked cotangents copied row-major: a `[b * n, m] @ [m, k]` dot, then
/// a transpose), so this item's is its rows `offset..offset + n` of it,
/// in that product's order, transposed.
fn shared_left_cotangent(
    a: ArrayViewD<'_, f32>,
    g: ArrayViewD<'_, f32>,
    cols: usize,
    offset: usize,
) -> ArrayD<f32> {
    let gt = g.t().as_standard_layout().into_owned();
    let rows = Some(Virtual::Rows { rows: cols, offset });
    let r = with_layout(rows, || matmul_raw(gt.view(), a)).expect("shapes checked");
    r.t().as_standard_layout().into_owned()
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
    let (pm, pn, _) = planned_shape(m, n, (1, 1));
    // Matrix-vector products have routes of their own (see `DotRoute`).
    let row_gemv_t = m == 1 && n >= 2 && b.strides()[0] == 1 && b.strides()[1] != 1;
    let vector = (n == 1 || row_gemv_t) && (pm, pn) == (m, n);
    if !vector
        && pm * pn * k <= SMALL
        && ynn_route(
            pm,
            k,
            pn,
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

/// A 2-D view's elements in memory order and its (row, column) strides,
/// when it is contiguous with non-negative strides (as [`as_strided`]
/// takes it without copying).
fn contiguous<'a>(v: &ArrayViewD<'a, f32>) -> Option<(&'a [f32], (usize, usize))> {
    let (d, s) = (v.shape(), v.strides());
    if s[0] < 0 || s[1] < 0 {
        return None;
    }
    let (r, c, s0, s1) = (d[0], d[1], s[0] as usize, s[1] as usize);
    // Row-major or column-major (an axis of length 1 may have any stride),
    // checked on the two axes directly: ndarray's check of any memory
    // order for a dynamic shape cost more than a tiny product.
    let row_major = (c <= 1 || s1 == 1) && (r <= 1 || s0 == c);
    let col_major = (r <= 1 || s0 == 1) && (c <= 1 || s1 == r);
    let len = r * c;
    if !(row_major || col_major) || len == 0 {
        let x = v.to_slice_memory_order()?;
        return Some((x, (s0, s1)));
    }
    // SAFETY: the view's element (i, j) lies at `as_ptr() + i * s0 + j *
    // s1` (strides non-negative, so (0, 0) is its lowest address). Row-major
    // (`s1 == 1`, `s0 == c`, or the axis has length 1) or column-major
    // (`s0 == 1`, `s1 == r`), those offsets are exactly `0..r * c`, so
    // the `len` elements from `as_ptr()` are the view's own elements: in
    // one allocation, initialized, borrowed immutably for `'a` (a shared
    // view grants no mutable access), and `len > 0` so the pointer is a
    // real, aligned element address. This is the slice that
    // `to_slice_memory_order` would return, without its general check.
    let x = unsafe { std::slice::from_raw_parts(v.as_ptr(), len) };
    Some((x, (s0, s1)))
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
        let mut o = zeros_vec(m * n);
        // Operands in memory order with non-negative strides (the usual
        // case) take their shape's kept route, without 2-D views.
        let cached = match (contiguous(&a), contiguous(&b)) {
            (Some((x, sa)), Some((y, sb))) => routes::run_cached(x, sa, y, sb, (m, k, n), &mut o),
            _ => false,
        };
        if !cached {
            let (a2, b2) = (
                a.view().into_dimensionality::<Ix2>().expect("2-D"),
                b.view().into_dimensionality::<Ix2>().expect("2-D"),
            );
            matmul2d_into(&a2, &b2, &mut o);
        }
        return Ok(Array2::from_shape_vec((m, n), o)
            .expect("m * n elements")
            .into_dyn());
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

/// Whether `a @ b` is a matrix stored transposed times one column
/// (`x.T @ g` with `x: [k, m]` row-major, `g: [k, 1]`, `m, k >= 2`).
fn is_transposed_column(a: &ArrayViewD<'_, f32>, b: &ArrayViewD<'_, f32>) -> bool {
    let (m, k) = (a.shape()[0], a.shape()[1]);
    let s = a.strides();
    b.shape()[1] == 1 && m >= 2 && k >= 2 && s[0] == 1 && s[1] != 1
}

/// `a @ b` for a product [`is_transposed_column`] accepts, written out by
/// the user (`x.t().matmul(g)`), as JAX computes it; a weight gradient
/// `x^T @ g`, which the backward pass computes (JAX's `dot_general`
/// contracting the batch), keeps its own route ([`DotRoute::Transposed`]).
///
/// Eagerly JAX runs the transpose as an operation of its own, a row-major
/// copy, and the product on the copy: XLA's row-major GEMV. Jitted
/// (inside [`as_jitted`](crate::tensor::as_jitted)), XLA fuses the
/// transpose into the dot's loop while the vector is under 16 KiB
/// ([`fused_dot`]), and copies it as eagerly from 4,096 terms.
fn transposed_column(a: ArrayViewD<'_, f32>, b: ArrayViewD<'_, f32>) -> ArrayD<f32> {
    let (m, k) = (a.shape()[0], a.shape()[1]);
    let (Some((x, sa)), Some((y, sb))) = (contiguous(&a), contiguous(&b)) else {
        let copy = a.as_standard_layout();
        return matmul_raw(copy.view(), b).expect("shapes checked");
    };
    if in_compiled_region() && k <= fused_dot::FUSION_MAX_TERMS {
        let mut o = zeros_vec(m);
        fused_dot::fused_column_dot(x, (sa.1, sa.0), y, sb.0, (k, m), &mut o);
        return Array2::from_shape_vec((m, 1), o)
            .expect("m elements")
            .into_dyn();
    }
    let copy = a.as_standard_layout();
    matmul_raw(copy.view(), b).expect("shapes checked")
}

/// `g` in `shape` (same size); as it is when it already has that shape
/// (a 2-D operand's cotangent: reshaping costs more than the tiny product).
fn reshaped(g: ArrayD<f32>, shape: &IxDyn) -> ArrayD<f32> {
    if same_shape(g.shape(), shape.slice()) {
        return g;
    }
    g.into_shape_with_order(shape.clone()).expect("same size")
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
        // Broadcast batch axes and 1-D operands against batched ones make
        // a `dot_general` that XLA rewrites (see `dot_general`). Without
        // batch axes (both operands 1-D or 2-D) the dot is canonical: not
        // worked out per call (it allocates; measured 7% of the eager
        // 2-3-2 step).
        if self.ndim() > 2 || other.ndim() > 2 {
            if let Some((la, lb, dims, perm)) = jnp_matmul_dims(self.shape(), other.shape()) {
                if !is_canonical(la.len(), lb.len(), &dims) {
                    return self.dot_general_as(other, (&la, &lb), &dims, &perm);
                }
            }
        }
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
        let out = match layout {
            None if two_d && is_transposed_column(&ad.view(), &bd.view()) => {
                transposed_column(ad.view(), bd.view())
            }
            _ => with_layout(layout, || matmul_raw(ad.view(), bd.view()))?,
        };
        // Without the unit axes of vector operands ([..., 1, n] and
        // [..., m, 1]).
        let full = out.raw_dim();
        let vectors = lhs_vec || rhs_vec;
        let out = if vectors {
            let mut squeezed = full.slice().to_vec();
            let r = squeezed.len();
            if rhs_vec {
                squeezed.remove(r - 1);
            }
            if lhs_vec {
                squeezed.remove(r - 2);
            }
            out.into_shape_with_order(IxDyn(&squeezed))
                .expect("only unit axes removed")
        } else {
            out
        };
        if !self.is_traced() && !other.is_traced() {
            // Nothing to record (and no backward closures to build).
            return Ok(Tensor::constant(out.into_shared()));
        }
        let fused = Tensor::fused_outer(&ad, &bd);
        // In JAX's batched program, `g @ B^T` keeps the forward's folded
        // rows and `A^T @ g` its folded columns.
        let rows = layout.filter(|l| matches!(l, Virtual::Rows { .. } | Virtual::Batched { .. }));
        let cols = layout.filter(|l| matches!(l, Virtual::Cols { .. } | Virtual::Batched { .. }));
        // Compiled steps replay 2-D products, fused accumulations included
        // (see `Step::fused_outer`).
        let kind = if self.ndim() == 2 && other.ndim() == 2 {
            OpKind::Matmul
        } else {
            OpKind::Other
        };
        // The output's cotangent with the unit axes back (a copy only for
        // vector operands).
        let widen = move |full: &IxDyn, g: ArrayD<f32>| -> ArrayD<f32> {
            if !vectors {
                return g;
            }
            g.to_shape(full.clone())
                .expect("only unit axes added")
                .into_owned()
        };
        // Shapes kept as `IxDyn`, inline up to 4 axes: no allocation per
        // recorded product.
        let (sa, sb) = (self.data.raw_dim(), other.data.raw_dim());
        // Only a tape with items' views (a `vmap`) needs the cotangents as
        // unevaluated products.
        let on_views = |t: &Tensor| t.tracer.as_ref().is_some_and(|tr| tr.tape.has_views());
        let keep_dot = two_d && (on_views(self) || on_views(other));
        let dot: Option<DotFactors> = keep_dot.then(|| -> DotFactors {
            let (sa, sb) = (sa.slice().to_vec(), sb.slice().to_vec());
            let (a2, b2, full_dot) = (ad.clone(), bd.clone(), full.clone());
            Box::new(move |g, input| {
                let g = widen(&full_dot, g.clone());
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
                let g = widen(&full, g);
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
                    reshaped(ga, &sa)
                });
                let gb = needs[1].then(|| {
                    if let Some(Virtual::Cols { cols, offset }) = cols {
                        return shared_left_cotangent(ad.view(), g.view(), cols, offset);
                    }
                    let mut at = ad.view();
                    let r = at.ndim();
                    at.swap_axes(r - 2, r - 1);
                    let gb = sum_to(
                        with_layout(cols, || matmul_raw(at, g.view())).expect("shapes checked"),
                        bd.shape(),
                    );
                    reshaped(gb, &sb)
                });
                smallvec![ga, gb]
            },
            fused,
            dot,
        )
        .with_tangent(|| bilinear(self.detached(), other.detached(), |a, b| Ok(a.matmul(b)?))))
    }
}
