//! Operations that move elements without computing: reshape, transpose,
//! broadcast, slicing, stacking.

use ndarray::{ArcArray, ArrayD, ArrayViewD, Axis, IxDyn, Slice};
use smallvec::{smallvec, SmallVec};

use crate::tensor::error::{Result, TensorError};
use crate::tensor::forward::{linear, linear_all};
use crate::tensor::shape::{broadcast_shapes_for, normalize_axis, sum_to};
use crate::tensor::tape::{Dims, InputGrads, OpKind};
use crate::tensor::Tensor;

/// `x` with `shape`, copying only when its memory order is not row-major.
fn reshape_owned(x: ArrayD<f32>, shape: &[usize]) -> ArrayD<f32> {
    let x = if x.is_standard_layout() {
        x
    } else {
        x.as_standard_layout().into_owned()
    };
    x.into_shape_with_order(IxDyn(shape))
        .expect("same element count")
}

/// Resolves a NumPy target shape with at most one `-1`.
fn resolve_shape(from: &[usize], to: &[isize]) -> Result<Vec<usize>> {
    let err = || TensorError::Reshape {
        op: "reshape",
        from: from.to_vec(),
        to: to.to_vec(),
    };
    let n: usize = from.iter().product();
    let unknown = to.iter().filter(|&&d| d == -1).count();
    if unknown > 1 || to.iter().any(|&d| d < -1) {
        return Err(err());
    }
    // Checked: a product that wraps must not pass for the element count.
    let known = to
        .iter()
        .filter(|&&d| d >= 0)
        .try_fold(1usize, |acc, &d| acc.checked_mul(d as usize))
        .ok_or_else(err)?;
    let shape: Vec<usize> = to
        .iter()
        .map(|&d| {
            if d == -1 {
                n.checked_div(known).unwrap_or(0)
            } else {
                d as usize
            }
        })
        .collect();
    let count = shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
    // As ndarray requires: even with a zero length, the other lengths'
    // product must fit in isize.
    let nonzero = shape
        .iter()
        .filter(|&&d| d != 0)
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .filter(|&p| p <= isize::MAX as usize);
    if count != Some(n) || nonzero.is_none() {
        return Err(err());
    }
    Ok(shape)
}

impl Tensor {
    /// The same elements in row-major order with a new shape; one length may
    /// be `-1` (inferred). O(1) for contiguous tensors.
    ///
    /// ```
    /// use flaxen::tensor::Tensor;
    /// let x = Tensor::zeros(&[2, 3, 4]);
    /// assert_eq!(x.reshape(&[6, -1]).unwrap().shape(), &[6, 4]);
    /// assert!(x.reshape(&[5, -1]).is_err());
    /// ```
    pub fn reshape(&self, shape: &[isize]) -> Result<Tensor> {
        // Recorded with its shape, which a compiled module can replay.
        let kind =
            Dims::new(&resolve_shape(self.shape(), shape)?).map_or(OpKind::Other, OpKind::Reshape);
        self.reshape_as(shape, kind)
    }

    /// [`reshape`](Tensor::reshape), recorded as `kind`.
    fn reshape_as(&self, shape: &[isize], kind: OpKind) -> Result<Tensor> {
        let shape = resolve_shape(self.shape(), shape)?;
        if shape == self.shape() {
            // The same tensor (and, when traced, the same node).
            return Ok(self.clone());
        }
        let out = match self.data.clone().into_shape_with_order(IxDyn(&shape)) {
            Ok(v) => v,
            Err(_) => reshape_owned(self.data.to_owned(), &shape).into_shared(),
        };
        let in_shape = self.shape().to_vec();
        Ok(Tensor::record_kind(out, &[self], kind, move |g, _| {
            smallvec![Some(reshape_owned(g, &in_shape))]
        })
        .with_tangent(|| {
            let to: Vec<isize> = shape.iter().map(|&d| d as isize).collect();
            linear(move |t| Ok(t.reshape(&to)?))
        }))
    }

    /// Inserts an axis of length 1 at `axis` (`jnp.expand_dims`).
    pub fn expand_dims(&self, axis: isize) -> Result<Tensor> {
        let a = normalize_axis("expand_dims", axis, self.ndim() + 1)?;
        let mut shape: Vec<isize> = self.shape().iter().map(|&d| d as isize).collect();
        shape.insert(a, 1);
        self.reshape(&shape)
    }

    /// Removes the length-1 axis `axis` (`jnp.squeeze`).
    pub fn squeeze(&self, axis: isize) -> Result<Tensor> {
        let a = normalize_axis("squeeze", axis, self.ndim())?;
        if self.shape()[a] != 1 {
            return Err(TensorError::Argument {
                op: "squeeze",
                message: format!("axis {axis} of shape {:?} is not of length 1", self.shape()),
            });
        }
        let mut shape: Vec<isize> = self.shape().iter().map(|&d| d as isize).collect();
        shape.remove(a);
        // Recorded as a squeeze, which a compiled step can replay.
        self.reshape_as(&shape, OpKind::Squeeze(a))
    }

    /// Reverses the axes (`x.T`). O(1).
    pub fn transpose(&self) -> Tensor {
        let perm: Vec<usize> = (0..self.ndim()).rev().collect();
        self.permute(&perm).expect("a reversal is a permutation")
    }

    /// Reorders the axes: axis `i` of the result is axis `perm[i]` of `self`
    /// (`jnp.transpose(x, perm)`). O(1).
    pub fn permute(&self, perm: &[usize]) -> Result<Tensor> {
        let n = self.ndim();
        let mut seen = vec![false; n];
        if perm.len() != n
            || perm
                .iter()
                .any(|&p| p >= n || std::mem::replace(&mut seen[p], true))
        {
            return Err(TensorError::Argument {
                op: "permute",
                message: format!("{perm:?} is not a permutation of {n} axes"),
            });
        }
        let mut inverse = vec![0; n];
        for (i, &p) in perm.iter().enumerate() {
            inverse[p] = i;
        }
        let out = self.data.clone().permuted_axes(IxDyn(perm));
        Ok(Tensor::record(out, &[self], move |g, _| {
            smallvec![Some(g.permuted_axes(IxDyn(&inverse)))]
        })
        .with_tangent(|| {
            let perm = perm.to_vec();
            linear(move |t| Ok(t.permute(&perm)?))
        }))
    }

    /// Swaps two axes (`jnp.swapaxes`). O(1).
    pub fn swap_axes(&self, a: isize, b: isize) -> Result<Tensor> {
        let a = normalize_axis("swap_axes", a, self.ndim())?;
        let b = normalize_axis("swap_axes", b, self.ndim())?;
        let mut perm: Vec<usize> = (0..self.ndim()).collect();
        perm.swap(a, b);
        self.permute(&perm)
    }

    /// Broadcasts to `shape` by NumPy rules (`jnp.broadcast_to`).
    ///
    /// Fails with [`TensorError::Reshape`] when `self` does not broadcast to
    /// `shape`.
    pub fn broadcast_to(&self, shape: &[usize]) -> Result<Tensor> {
        let err = || TensorError::Reshape {
            op: "broadcast_to",
            from: self.shape().to_vec(),
            to: shape.iter().map(|&d| d as isize).collect(),
        };
        match broadcast_shapes_for("broadcast_to", self.shape(), shape) {
            Ok(s) if s == shape => {}
            _ => return Err(err()),
        }
        let view = self.data.broadcast(IxDyn(shape)).ok_or_else(err)?;
        let mut values = crate::tensor::shape::try_alloc("broadcast_to", shape)?;
        values.extend(view.iter().copied());
        let out = ArrayD::from_shape_vec(IxDyn(shape), values)
            .expect("length of the shape")
            .into_shared();
        let in_shape = self.shape().to_vec();
        Ok(Tensor::record(out, &[self], move |g, _| {
            smallvec![Some(sum_to(g, &in_shape))]
        })
        .with_tangent(|| {
            let to = shape.to_vec();
            linear(move |t| Ok(t.broadcast_to(&to)?))
        }))
    }

    /// Elements `start..end` along `axis` (`x[..., start:end, ...]`). O(1).
    ///
    /// ```
    /// use flaxen::tensor::Tensor;
    /// let x = Tensor::from_vec((0..6).map(|v| v as f32).collect(), &[2, 3]).unwrap();
    /// assert_eq!(x.slice(1, 1, 3).unwrap().to_vec(), [1.0, 2.0, 4.0, 5.0]);
    /// ```
    pub fn slice(&self, axis: isize, start: usize, end: usize) -> Result<Tensor> {
        let a = normalize_axis("slice", axis, self.ndim())?;
        let len = self.shape()[a];
        if start > end || end > len {
            return Err(TensorError::Argument {
                op: "slice",
                message: format!("range {start}..{end} is not within axis {axis} of length {len}"),
            });
        }
        let mut out = self.data.clone();
        out.slice_axis_inplace(Axis(a), Slice::from(start..end));
        let in_shape = IxDyn(self.shape());
        Ok(Tensor::record(out, &[self], move |g, _| {
            let mut full = ArrayD::zeros(in_shape.clone());
            full.slice_axis_mut(Axis(a), Slice::from(start..end))
                .assign(&g);
            smallvec![Some(full)]
        })
        .with_tangent(|| linear(move |t| Ok(t.slice(a as isize, start, end)?))))
    }

    /// The sub-tensor at `index` along `axis`, which is removed (`x[i]` for
    /// axis 0). O(1).
    pub fn index_axis(&self, axis: isize, index: usize) -> Result<Tensor> {
        let a = normalize_axis("index_axis", axis, self.ndim())?;
        let len = self.shape()[a];
        if index >= len {
            return Err(TensorError::Argument {
                op: "index_axis",
                message: format!("index {index} is out of bounds for axis {axis} of length {len}"),
            });
        }
        let out = self.data.clone().index_axis_move(Axis(a), index);
        let in_shape = IxDyn(self.shape());
        Ok(Tensor::record(out, &[self], move |g, _| {
            let mut full = ArrayD::zeros(in_shape.clone());
            full.index_axis_mut(Axis(a), index).assign(&g);
            smallvec![Some(full)]
        })
        .with_tangent(|| linear(move |t| Ok(t.index_axis(a as isize, index)?))))
    }

    /// Stacks equally shaped tensors along a new axis (`jnp.stack`).
    ///
    /// ```
    /// use flaxen::tensor::Tensor;
    /// let s = Tensor::stack(&[Tensor::zeros(&[3]), Tensor::ones(&[3])], 0).unwrap();
    /// assert_eq!(s.shape(), &[2, 3]);
    /// ```
    pub fn stack(tensors: &[Tensor], axis: isize) -> Result<Tensor> {
        let first = tensors.first().ok_or_else(|| TensorError::Argument {
            op: "stack",
            message: "needs at least one tensor".into(),
        })?;
        let a = normalize_axis("stack", axis, first.ndim() + 1)?;
        for t in tensors {
            if t.shape() != first.shape() {
                return Err(TensorError::Incompatible {
                    op: "stack",
                    lhs: first.shape().to_vec(),
                    rhs: t.shape().to_vec(),
                });
            }
        }
        let out = stack_data(tensors, a);
        let inputs: Vec<&Tensor> = tensors.iter().collect();
        Ok(Tensor::record(out, &inputs, move |g, needs| {
            needs
                .iter()
                .enumerate()
                .map(|(i, &n)| n.then(|| g.index_axis(Axis(a), i).to_owned()))
                .collect::<InputGrads>()
        })
        .with_tangent(|| {
            let shapes = tensors.iter().map(|t| t.shape().to_vec()).collect();
            linear_all(shapes, move |t| Ok(Tensor::stack(t, a as isize)?))
        }))
    }

    /// Joins tensors along an existing axis (`jnp.concatenate`); all other
    /// lengths must agree.
    pub fn concatenate(tensors: &[Tensor], axis: isize) -> Result<Tensor> {
        let first = tensors.first().ok_or_else(|| TensorError::Argument {
            op: "concatenate",
            message: "needs at least one tensor".into(),
        })?;
        let a = normalize_axis("concatenate", axis, first.ndim())?;
        for t in tensors {
            let same_rest = t.ndim() == first.ndim()
                && (0..t.ndim()).all(|i| i == a || t.shape()[i] == first.shape()[i]);
            if !same_rest {
                return Err(TensorError::Incompatible {
                    op: "concatenate",
                    lhs: first.shape().to_vec(),
                    rhs: t.shape().to_vec(),
                });
            }
        }
        let views: Vec<ArrayViewD<'_, f32>> = tensors.iter().map(|t| t.data.view()).collect();
        let out = row_major(ndarray::concatenate(Axis(a), &views).expect("shapes checked"));
        let bounds: SmallVec<[(usize, usize); 4]> = tensors
            .iter()
            .scan(0, |start, t| {
                let s = *start;
                *start += t.shape()[a];
                Some((s, *start))
            })
            .collect();
        let inputs: Vec<&Tensor> = tensors.iter().collect();
        Ok(Tensor::record(out.into_shared(), &inputs, move |g, needs| {
            needs
                .iter()
                .zip(&bounds)
                .map(|(&n, &(s, e))| n.then(|| g.slice_axis(Axis(a), Slice::from(s..e)).to_owned()))
                .collect::<InputGrads>()
        })
        .with_tangent(|| {
            let shapes = tensors.iter().map(|t| t.shape().to_vec()).collect();
            linear_all(shapes, move |t| Ok(Tensor::concatenate(t, a as isize)?))
        }))
    }

    /// Pads each axis `i` with `pad_width[i] = (before, after)` elements
    /// wrapped around from the other end (`jnp.pad(x, pad_width,
    /// mode="wrap")`), built as JAX builds it: axis by axis, the
    /// concatenation of the last `before % n` elements, the whole axis
    /// repeated, and the first `after % n`. The gradient therefore sums
    /// the pieces as JAX's does: per axis from the last, the repeats in
    /// order, then the piece after, then the piece before.
    ///
    /// ```
    /// use flaxen::tensor::Tensor;
    /// let x = Tensor::from_vec(vec![1.0, 2.0, 3.0], &[3]).unwrap();
    /// let y = x.pad_wrap(&[(2, 1)]).unwrap();
    /// assert_eq!(y.to_vec(), [2.0, 3.0, 1.0, 2.0, 3.0, 1.0]);
    /// assert!(Tensor::zeros(&[0]).pad_wrap(&[(1, 0)]).is_err());
    /// ```
    pub fn pad_wrap(&self, pad_width: &[(usize, usize)]) -> Result<Tensor> {
        if pad_width.len() != self.ndim() {
            return Err(TensorError::Argument {
                op: "pad_wrap",
                message: format!(
                    "{} (before, after) pairs for a tensor of shape {:?}",
                    pad_width.len(),
                    self.shape()
                ),
            });
        }
        let mut x = self.clone();
        for (axis, &(before, after)) in pad_width.iter().enumerate() {
            let n = x.shape()[axis];
            if before == 0 && after == 0 {
                continue;
            }
            if n == 0 {
                return Err(TensorError::Argument {
                    op: "pad_wrap",
                    message: format!(
                        "cannot wrap ({before}, {after}) elements around axis {axis} of length 0"
                    ),
                });
            }
            let repeats = before / n + after / n + 1;
            let a = axis as isize;
            let mut parts = Vec::with_capacity(repeats + 2);
            if before % n > 0 {
                parts.push(x.slice(a, n - before % n, n)?);
            }
            parts.extend(std::iter::repeat_n(x.clone(), repeats));
            if after % n > 0 {
                parts.push(x.slice(a, 0, after % n)?);
            }
            x = Tensor::concatenate(&parts, a)?;
        }
        Ok(x)
    }
}

/// `x` in row-major memory order. `ndarray` joins along the last axis into
/// column-major memory, which a product would read as a transposed
/// operand and sum in that operand's XLA order; XLA's `concatenate` writes
/// a row-major array.
fn row_major(x: ArrayD<f32>) -> ArrayD<f32> {
    if x.is_standard_layout() {
        x
    } else {
        x.as_standard_layout().into_owned()
    }
}

/// The stacked values of equally shaped `tensors` along new axis `a`: for
/// row-major inputs, each input's block below the axis is copied in turn
/// (vmap stacks every output this way); otherwise ndarray's `stack`.
fn stack_data(tensors: &[Tensor], a: usize) -> ArcArray<f32, IxDyn> {
    let shape = tensors[0].shape();
    let mut out_shape = shape.to_vec();
    out_shape.insert(a, tensors.len());
    let slices: Option<Vec<&[f32]>> = tensors.iter().map(|t| t.data.as_slice()).collect();
    let Some(slices) = slices else {
        let views: Vec<ArrayViewD<'_, f32>> = tensors.iter().map(|t| t.data.view()).collect();
        return row_major(ndarray::stack(Axis(a), &views).expect("shapes checked")).into_shared();
    };
    let block: usize = shape[a..].iter().product();
    let outer: usize = shape[..a].iter().product();
    let mut data = Vec::with_capacity(block * outer * tensors.len());
    for o in 0..outer {
        for s in &slices {
            data.extend_from_slice(&s[o * block..(o + 1) * block]);
        }
    }
    ArrayD::from_shape_vec(IxDyn(&out_shape), data)
        .expect("length matches the shape")
        .into_shared()
}
