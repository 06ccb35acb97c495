//! `lax.dot_general` as XLA:CPU (jaxlib 0.10.2) computes it, for products
//! whose batch axes are not simply "both operands batched alike":
//! `jnp.matmul` with a broadcast operand (`[b, m, k] @ [k, n]`,
//! `[m, k] @ [b, k, n]`, batch axes of length 1, 1-D operands) and
//! `jnp.einsum` contractions (attention's `...qhd,...khd->...hqk`).
//!
//! # What XLA does (measured with `--xla_dump_to`)
//!
//! XLA's `DotDecomposer` rewrites a dot that is not canonical (more than
//! one contracting axis, more than one free axis on a side, or batch axes
//! not leading) into `[batch.., M, K] @ [batch.., K, N]`: each operand is
//! transposed to `[batch, free.., contracting..]` (the left one) or
//! `[batch, contracting.., free..]` (the right one) and reshaped, the free
//! axes of a side flattened into one (`M` or `N`, left out when 1) and the
//! contracting ones into `K`, in the order the dimension numbers list
//! them. The canonical dot then takes the same routes as a 2-D product
//! (YNNPACK or XLA's own emitter, see [`crate::xla::dot`]) per batch.
//!
//! How an operand reaches the canonical dot decides its route:
//! * a transpose that only moves axes of length 1 is a bitcast: row-major;
//! * a transpose of the last two axes with nothing reshaped after it (one
//!   contracting and one free axis, batch axes in place, none of them of
//!   length one) is folded into the dot's dimension numbers: the operand is
//!   read transposed (`g @ B^T`, or a left operand contracting its first axis);
//! * any other is materialized by a copy: row-major.
//!
//! JAX's VJP of `dot_general` is two more `dot_general`s (the cotangent
//! times the other operand, contracting the free axes of the other side,
//! then a transpose), each canonicalized the same way; so the sum over a
//! broadcast axis is part of the product's contraction (`K = b * m` for
//! the right operand's cotangent of `[b, m, k] @ [k, n]`), not a sum of
//! per-batch products.

use ndarray::{ArcArray, ArrayD, ArrayViewD, CowArray, IxDyn};
use smallvec::smallvec;

use crate::tensor::error::{Result, TensorError};
use crate::tensor::forward::bilinear;
use crate::tensor::Tensor;

use super::matmul::dot_into;

/// `lax.dot_general`'s dimension numbers: contracting and batch axes of
/// the left and right operands (batch axes paired in order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DotDims {
    /// Contracting axes of the left operand.
    pub(crate) lhs_contract: Vec<usize>,
    /// Contracting axes of the right operand, paired with `lhs_contract`.
    pub(crate) rhs_contract: Vec<usize>,
    /// Batch axes of the left operand.
    pub(crate) lhs_batch: Vec<usize>,
    /// Batch axes of the right operand, paired with `lhs_batch`.
    pub(crate) rhs_batch: Vec<usize>,
}

/// The axes of a rank-`rank` operand that are neither contracting nor
/// batch, in order.
fn free_axes(rank: usize, contract: &[usize], batch: &[usize]) -> Vec<usize> {
    (0..rank)
        .filter(|d| !contract.contains(d) && !batch.contains(d))
        .collect()
}

/// XLA's `DotDecomposer` test for one operand: canonical when it has one
/// contracting axis, at most one free axis and leading batch axes.
fn operand_canonical(rank: usize, contract: &[usize], batch: &[usize]) -> bool {
    contract.len() == 1
        && batch.len() + 2 >= rank
        && !(batch.is_empty() && contract.is_empty())
        && batch.iter().enumerate().all(|(i, &b)| i == b)
}

/// Whether XLA computes the dot with these dimension numbers as it is (no
/// `DotDecomposer` rewrite).
pub(crate) fn is_canonical(lhs_rank: usize, rhs_rank: usize, d: &DotDims) -> bool {
    operand_canonical(lhs_rank, &d.lhs_contract, &d.lhs_batch)
        && operand_canonical(rhs_rank, &d.rhs_contract, &d.rhs_batch)
}

/// One operand as the canonical dot reads it (`[B, M, K]` on the left,
/// `[B, K, N]` on the right, see the module's documentation): its values
/// row-major as `[B, r, c]`, and `true` if that is the canonical
/// matrices transposed (each stored `[c, r]`, read through strides).
fn canonical_operand<'a>(
    op: &ArrayViewD<'a, f32>,
    contract: &[usize],
    batch: &[usize],
    left: bool,
    decompose: bool,
) -> (CowArray<'a, f32, IxDyn>, bool) {
    let shape = op.shape();
    let free = free_axes(shape.len(), contract, batch);
    let mut perm: Vec<usize> = batch.to_vec();
    if left {
        perm.extend(&free);
        perm.extend(contract);
    } else {
        perm.extend(contract);
        perm.extend(&free);
    }
    let nb: usize = batch.iter().map(|&d| shape[d]).product();
    let fsize: usize = free.iter().map(|&d| shape[d]).product();
    let ksize: usize = contract.iter().map(|&d| shape[d]).product();
    let (rows, cols) = if left { (fsize, ksize) } else { (ksize, fsize) };
    let identity = perm.iter().enumerate().all(|(i, &p)| i == p);
    // Folded into the dimension numbers: a canonical operand (no rewrite),
    // or a transpose the rewrite does not reshape after.
    let unit_batch = batch.iter().any(|&d| shape[d] == 1);
    let folds = !decompose
        || (contract.len() == 1
            && free.len() == 1
            && fsize != 1
            && !unit_batch
            && batch.iter().enumerate().all(|(i, &b)| i == b));
    if folds && !identity {
        // Batch axes in place, the last two swapped: read transposed.
        let v = standard(op.clone())
            .into_shape_with_order(IxDyn(&[nb, cols, rows]))
            .expect("row-major");
        return (v, true);
    }
    // A bitcast or a copy: row-major either way.
    let v = standard(op.clone().permuted_axes(IxDyn(&perm)))
        .into_shape_with_order(IxDyn(&[nb, rows, cols]))
        .expect("row-major");
    (v, false)
}

/// `v` row-major: itself if it is, else a row-major copy.
fn standard(v: ArrayViewD<'_, f32>) -> CowArray<'_, f32, IxDyn> {
    if v.is_standard_layout() {
        CowArray::from(v)
    } else {
        CowArray::from(v.as_standard_layout().into_owned())
    }
}

/// An owned array row-major (no copy if it already is).
fn owned_standard(v: ArrayD<f32>) -> ArrayD<f32> {
    if v.is_standard_layout() {
        v
    } else {
        v.as_standard_layout().into_owned()
    }
}

/// The `(r, c)` of a [`canonical_operand`]'s matrices as the dot reads
/// them.
fn extent(v: &(CowArray<'_, f32, IxDyn>, bool)) -> (usize, usize) {
    let s = v.0.shape();
    if v.1 {
        (s[2], s[1])
    } else {
        (s[1], s[2])
    }
}

/// Batch `i`'s matrix of a [`canonical_operand`] (`r x c` as the dot
/// reads it): its storage and (row, column) strides.
fn matrix<'v>(v: &'v (CowArray<'_, f32, IxDyn>, bool), i: usize) -> (&'v [f32], (usize, usize)) {
    let (s0, s1) = (v.0.shape()[1], v.0.shape()[2]);
    let all = v.0.as_slice().expect("row-major");
    let x = &all[i * s0 * s1..(i + 1) * s0 * s1];
    // Stored `[c, r]` when transposed: element (i, j) at `j * r + i`.
    if v.1 {
        (x, (1, s1))
    } else {
        (x, (s1, 1))
    }
}

/// `lax.dot_general(lhs, rhs, dims)` in XLA:CPU's order, both operands
/// taken as row-major arrays (as JAX's eager operations hold them): the
/// result is `[batch.., lhs free.., rhs free..]`, row-major.
pub(crate) fn dot_general_raw(
    lhs: ArrayViewD<'_, f32>,
    rhs: ArrayViewD<'_, f32>,
    d: &DotDims,
) -> ArrayD<f32> {
    let (lhs, rhs) = (lhs.as_standard_layout(), rhs.as_standard_layout());
    let decompose = !is_canonical(lhs.ndim(), rhs.ndim(), d);
    let a = canonical_operand(&lhs.view(), &d.lhs_contract, &d.lhs_batch, true, decompose);
    let b = canonical_operand(&rhs.view(), &d.rhs_contract, &d.rhs_batch, false, decompose);
    let nb = a.0.shape()[0];
    let ((m, k), (_, n)) = (extent(&a), extent(&b));
    let mut shape: Vec<usize> = d.lhs_batch.iter().map(|&x| lhs.shape()[x]).collect();
    shape.extend(
        free_axes(lhs.ndim(), &d.lhs_contract, &d.lhs_batch)
            .iter()
            .map(|&x| lhs.shape()[x]),
    );
    shape.extend(
        free_axes(rhs.ndim(), &d.rhs_contract, &d.rhs_batch)
            .iter()
            .map(|&x| rhs.shape()[x]),
    );
    let mut out = ArrayD::<f32>::zeros(IxDyn(&shape));
    if m == 0 || n == 0 || nb == 0 || k == 0 {
        return out;
    }
    let o = out.as_slice_mut().expect("row-major");
    for (i, this) in o.chunks_exact_mut(m * n).enumerate() {
        let (x, sa) = matrix(&a, i);
        let (y, sb) = matrix(&b, i);
        dot_into(x, sa, y, sb, (m, k, n), (nb, nb), this);
    }
    out
}

/// JAX's `_dot_general_transpose_lhs`: the cotangent of the left operand
/// `x` of `dot_general(x, y, dims)` for the output cotangent `g`
/// (`swap`: `x` is really the right operand, see [`transpose_rhs`]).
fn transpose_lhs(
    g: ArrayViewD<'_, f32>,
    x_rank: usize,
    y: ArrayViewD<'_, f32>,
    d: &DotDims,
    swap: bool,
) -> ArrayD<f32> {
    let (x_contract, y_contract) = (&d.lhs_contract, &d.rhs_contract);
    let (x_batch, y_batch) = (&d.lhs_batch, &d.rhs_batch);
    let x_kept = free_axes(x_rank, x_contract, x_batch);
    let y_kept = free_axes(y.ndim(), y_contract, y_batch);
    let nb = x_batch.len();
    // Where y's free axes sit in the output (after the batch axes and,
    // unless swapped, x's free axes).
    let ans_y: Vec<usize> = if swap {
        (nb..nb + y_kept.len()).collect()
    } else {
        (nb + x_kept.len()..nb + x_kept.len() + y_kept.len()).collect()
    };
    let dims = DotDims {
        lhs_contract: ans_y,
        rhs_contract: y_kept,
        lhs_batch: (0..nb).collect(),
        rhs_batch: y_batch.clone(),
    };
    // x's contracting axes in the order of y's.
    let mut order: Vec<usize> = (0..y_contract.len()).collect();
    order.sort_by_key(|&i| y_contract[i]);
    let mut unsorted: Vec<usize> = x_batch.clone();
    unsorted.extend(&x_kept);
    unsorted.extend(order.iter().map(|&i| x_contract[i]));
    let mut out_axes = vec![0; unsorted.len()];
    for (i, &a) in unsorted.iter().enumerate() {
        out_axes[a] = i;
    }
    let out = dot_general_raw(g, y, &dims);
    // The transpose, materialized as JAX's eager `transpose` is.
    owned_standard(out.permuted_axes(IxDyn(&out_axes)))
}

/// JAX's `_dot_general_transpose_rhs`: the cotangent of the right operand.
fn transpose_rhs(
    g: ArrayViewD<'_, f32>,
    x: ArrayViewD<'_, f32>,
    y_rank: usize,
    d: &DotDims,
) -> ArrayD<f32> {
    let swapped = DotDims {
        lhs_contract: d.rhs_contract.clone(),
        rhs_contract: d.lhs_contract.clone(),
        lhs_batch: d.rhs_batch.clone(),
        rhs_batch: d.lhs_batch.clone(),
    };
    transpose_lhs(g, y_rank, x, &swapped, true)
}

/// A tensor's values row-major in `shape` (same size), shared without a
/// copy when they already are row-major.
fn shared_standard(data: &ArcArray<f32, IxDyn>, shape: &[usize]) -> ArcArray<f32, IxDyn> {
    let data = if data.is_standard_layout() {
        data.clone()
    } else {
        data.as_standard_layout().into_owned().into_shared()
    };
    data.into_shape_with_order(IxDyn(shape))
        .expect("row-major, same size")
}

impl Tensor {
    /// `transpose(dot_general(self', other', dims), out_perm)` where
    /// `self'` and `other'` are `self` and `other` reshaped to
    /// `lhs_shape` and `rhs_shape` (unit axes removed or added, as
    /// `jnp.matmul` squeezes), in XLA:CPU's order; one recorded operation
    /// whose cotangents are JAX's (see the module's documentation).
    pub(crate) fn dot_general_as(
        &self,
        other: &Tensor,
        (lhs_shape, rhs_shape): (&[usize], &[usize]),
        dims: &DotDims,
        out_perm: &[usize],
    ) -> Result<Tensor> {
        // Row-major, as JAX's eager operations hold their operands.
        let a = shared_standard(&self.data, lhs_shape);
        let b = shared_standard(&other.data, rhs_shape);
        let raw = dot_general_raw(a.view(), b.view(), dims);
        let out = owned_standard(raw.permuted_axes(IxDyn(out_perm)));
        if !self.is_traced() && !other.is_traced() {
            return Ok(Tensor::constant(out.into_shared()));
        }
        let mut inverse = vec![0; out_perm.len()];
        for (i, &p) in out_perm.iter().enumerate() {
            inverse[p] = i;
        }
        let (sa, sb) = (self.shape().to_vec(), other.shape().to_vec());
        let d = dims.clone();
        let backward = move |g: ArrayD<f32>, needs: &[bool]| {
            // The cotangent of `dot_general`'s own output, materialized as
            // JAX's eager transpose is.
            let g = owned_standard(g.permuted_axes(IxDyn(&inverse)));
            let ga = needs[0].then(|| {
                transpose_lhs(g.view(), a.ndim(), b.view(), &d, false)
                    .into_shape_with_order(IxDyn(&sa))
                    .expect("same size")
            });
            let gb = needs[1].then(|| {
                transpose_rhs(g.view(), a.view(), b.ndim(), &d)
                    .into_shape_with_order(IxDyn(&sb))
                    .expect("same size")
            });
            smallvec![ga, gb]
        };
        let (ls, rs, pd, pp) = (
            lhs_shape.to_vec(),
            rhs_shape.to_vec(),
            dims.clone(),
            out_perm.to_vec(),
        );
        Ok(
            Tensor::record(out.into_shared(), &[self, other], backward).with_tangent(|| {
                bilinear(self.detached(), other.detached(), move |x, y| {
                    Ok(x.dot_general_as(y, (&ls, &rs), &pd, &pp)?)
                })
            }),
        )
    }
}

/// `jnp.matmul`'s product as a `dot_general`: the operands' shapes with
/// the unit axes it squeezes removed, the dimension numbers, and the
/// permutation of the dot's output into `jnp.matmul`'s.
pub(crate) type MatmulDot = (Vec<usize>, Vec<usize>, DotDims, Vec<usize>);

/// `jnp.matmul`'s `dot_general` for operands of these shapes (jax
/// 0.10.2's `jnp.matmul`): a batch axis both operands have (but of length
/// 1 on one side) is a batch axis of the dot; one only one operand has,
/// or of length 1 on the other side (that one squeezed), is a free axis of
/// that operand. Returns the squeezed shapes, the dimension numbers and
/// the permutation of the dot's output into `jnp.matmul`'s; `None` if the
/// shapes do not multiply.
pub(crate) fn jnp_matmul_dims(a: &[usize], b: &[usize]) -> Option<MatmulDot> {
    let (a_mat, b_mat) = (a.len() > 1, b.len() > 1);
    if a.is_empty() || b.is_empty() {
        return None;
    }
    let ka = a[a.len() - 1];
    let kb = if b_mat { b[b.len() - 2] } else { b[0] };
    if ka != kb {
        return None;
    }
    let a_batch = if a_mat { &a[..a.len() - 2] } else { &[][..] };
    let b_batch = if b_mat { &b[..b.len() - 2] } else { &[][..] };
    let nbd = a_batch.len().max(b_batch.len());
    let pad = |s: &[usize]| -> Vec<Option<usize>> {
        let mut v = vec![None; nbd - s.len()];
        v.extend(s.iter().map(|&d| Some(d)));
        v
    };
    let (pa, pb) = (pad(a_batch), pad(b_batch));
    let (mut a_sq, mut b_sq) = (Vec::new(), Vec::new());
    let (mut lb, mut rb) = (Vec::new(), Vec::new());
    let (mut idx_batch, mut idx_a, mut idx_b) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..nbd {
        match (pa[i], pb[i]) {
            (None, _) => idx_b.push(i),
            (_, None) => idx_a.push(i),
            (Some(1), _) => {
                idx_b.push(i);
                a_sq.push(idx_batch.len() + idx_a.len() + a_sq.len());
            }
            (_, Some(1)) => {
                idx_a.push(i);
                b_sq.push(idx_batch.len() + idx_b.len() + b_sq.len());
            }
            (Some(x), Some(y)) if x == y => {
                lb.push(idx_batch.len() + idx_a.len());
                rb.push(idx_batch.len() + idx_b.len());
                idx_batch.push(i);
            }
            _ => return None,
        }
    }
    if a_mat {
        idx_a.push(nbd);
    }
    if b_mat {
        idx_b.push(nbd + a_mat as usize);
    }
    let order: Vec<usize> = idx_batch
        .iter()
        .chain(&idx_a)
        .chain(&idx_b)
        .copied()
        .collect();
    let mut perm: Vec<usize> = (0..order.len()).collect();
    perm.sort_by_key(|&i| order[i]);
    let squeeze = |s: &[usize], drop: &[usize]| -> Vec<usize> {
        s.iter()
            .enumerate()
            .filter(|(i, _)| !drop.contains(i))
            .map(|(_, &d)| d)
            .collect()
    };
    let (sa, sb) = (squeeze(a, &a_sq), squeeze(b, &b_sq));
    let dims = DotDims {
        lhs_contract: vec![sa.len() - 1],
        rhs_contract: vec![sb.len() - 1 - b_mat as usize],
        lhs_batch: lb,
        rhs_batch: rb,
    };
    Some((sa, sb, dims, perm))
}

impl Tensor {
    /// `lax.dot_general(self, other, ((lhs_contract, rhs_contract),
    /// (lhs_batch, rhs_batch)))`: the sum of products over the paired
    /// contracting axes, for each pair of batch axes; the result is
    /// `[batch.., self's other axes.., other's other axes..]`. Summed in
    /// XLA:CPU's order, with JAX's cotangents (attention's einsums are
    /// `dot_general`s: `...qhd,...khd->...hqk` is `q.dot_general(&k, (&[3],
    /// &[3]), (&[0, 2], &[0, 2]))`).
    ///
    /// Fails with [`TensorError::Argument`] naming the shapes and axes when
    /// an axis is out of range or repeated, the paired lists differ in
    /// length, or paired axes differ in length.
    ///
    /// ```
    /// use flaxen::tensor::Tensor;
    /// let a = Tensor::from_vec((0..6).map(|i| i as f32).collect(), &[2, 3]).unwrap();
    /// let b = Tensor::ones(&[3, 2]);
    /// // a @ b, contracting a's axis 1 with b's axis 0.
    /// let c = a.dot_general(&b, (&[1], &[0]), (&[], &[])).unwrap();
    /// assert_eq!(c.to_vec(), [3.0, 3.0, 12.0, 12.0]);
    /// assert!(a.dot_general(&b, (&[0], &[0]), (&[], &[])).is_err());
    /// ```
    pub fn dot_general(
        &self,
        other: &Tensor,
        (lhs_contract, rhs_contract): (&[usize], &[usize]),
        (lhs_batch, rhs_batch): (&[usize], &[usize]),
    ) -> Result<Tensor> {
        let (sa, sb) = (self.shape(), other.shape());
        let bad = |why: &str| TensorError::Argument {
            op: "dot_general",
            message: format!(
                "shapes {sa:?} and {sb:?} with contracting axes {lhs_contract:?}, \
                 {rhs_contract:?} and batch axes {lhs_batch:?}, {rhs_batch:?}: {why}"
            ),
        };
        let valid = |axes: &[&[usize]], rank: usize| {
            let all: Vec<usize> = axes.iter().flat_map(|a| a.iter().copied()).collect();
            all.iter().all(|&x| x < rank)
                && all.iter().enumerate().all(|(i, x)| !all[..i].contains(x))
        };
        if !valid(&[lhs_contract, lhs_batch], sa.len())
            || !valid(&[rhs_contract, rhs_batch], sb.len())
        {
            return Err(bad("an axis is out of range or repeated"));
        }
        if lhs_contract.len() != rhs_contract.len() || lhs_batch.len() != rhs_batch.len() {
            return Err(bad("the paired axis lists differ in length"));
        }
        let pairs = lhs_contract
            .iter()
            .zip(rhs_contract)
            .chain(lhs_batch.iter().zip(rhs_batch));
        if pairs.clone().any(|(&l, &r)| sa[l] != sb[r]) {
            return Err(bad("paired axes differ in length"));
        }
        let dims = DotDims {
            lhs_contract: lhs_contract.to_vec(),
            rhs_contract: rhs_contract.to_vec(),
            lhs_batch: lhs_batch.to_vec(),
            rhs_batch: rhs_batch.to_vec(),
        };
        let rank = sa.len() + sb.len() - 2 * lhs_contract.len() - lhs_batch.len();
        let perm: Vec<usize> = (0..rank).collect();
        self.dot_general_as(other, (sa, sb), &dims, &perm)
    }
}
