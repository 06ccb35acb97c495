//! Indexing by integer arrays: `jnp.take_along_axis` (with its
//! scatter-add backward) and `jnp.argmax`/`jnp.argmin`.

use ndarray::{ArrayD, Axis, IxDyn};
use smallvec::smallvec;

use crate::tensor::error::{Result, TensorError};
use crate::tensor::shape::normalize_axis;
use crate::tensor::tape::TangentRule;
use crate::tensor::Tensor;

/// Where index `i` points along an axis of length `len`: negative indices
/// count from the end, as in JAX; `None` out of range.
fn source_index(i: i32, len: usize) -> Option<usize> {
    let i = if i < 0 {
        i64::from(i) + len as i64
    } else {
        i64::from(i)
    };
    (0..len as i64).contains(&i).then_some(i as usize)
}

impl Tensor {
    /// `jnp.take_along_axis(self, indices, axis)`: `out[..., i, ...] =
    /// self[..., indices[..., i, ...], ...]` along `axis`. `indices` has
    /// the tensor's shape except along `axis`. As in JAX, negative indices
    /// count from the end, and indices out of range give NaN (JAX's default
    /// `mode="fill"`); their gradient is dropped.
    ///
    /// ```
    /// use flaxen::tensor::Tensor;
    /// use ndarray::{arr2, ArrayD};
    ///
    /// let x = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).unwrap();
    /// let idx: ArrayD<i32> = arr2(&[[2], [0]]).into_dyn();
    /// assert_eq!(x.take_along_axis(&idx, -1).unwrap().to_vec(), [3.0, 4.0]);
    /// ```
    ///
    /// Fails with [`TensorError::Axis`] for a bad axis and
    /// [`TensorError::Incompatible`] when `indices` does not fit.
    pub fn take_along_axis(&self, indices: &ArrayD<i32>, axis: isize) -> Result<Tensor> {
        let a = normalize_axis("take_along_axis", axis, self.ndim())?;
        let fits = indices.ndim() == self.ndim()
            && (0..self.ndim()).all(|d| d == a || indices.shape()[d] == self.shape()[d]);
        if !fits {
            return Err(TensorError::Incompatible {
                op: "take_along_axis",
                lhs: self.shape().to_vec(),
                rhs: indices.shape().to_vec(),
            });
        }
        let len = self.shape()[a];
        // Each output element's source position along `axis`, or None.
        let source = move |i: i32| source_index(i, len);
        let mut out = ArrayD::<f32>::zeros(IxDyn(indices.shape()));
        for (mut o, (x, idx)) in out.lanes_mut(Axis(a)).into_iter().zip(
            self.data
                .lanes(Axis(a))
                .into_iter()
                .zip(indices.lanes(Axis(a))),
        ) {
            for (o, &i) in o.iter_mut().zip(idx.iter()) {
                *o = source(i).map_or(f32::NAN, |s| x[s]);
            }
        }
        let tangent = || {
            let indices = indices.clone();
            let gather = move |t: &Tensor| t.take_along_axis(&indices, axis);
            filled_with_zeros(self.shape().to_vec(), gather)
        };
        let indices = indices.clone();
        let in_shape = self.shape().to_vec();
        Ok(Tensor::record(out.into_shared(), &[self], move |g, _| {
            // Scatter-add the cotangent back to where each value came from.
            let mut dx = ArrayD::<f32>::zeros(IxDyn(&in_shape));
            for (mut d, (g, idx)) in dx
                .lanes_mut(Axis(a))
                .into_iter()
                .zip(g.lanes(Axis(a)).into_iter().zip(indices.lanes(Axis(a))))
            {
                for (&g, &i) in g.iter().zip(idx.iter()) {
                    if let Some(s) = source(i) {
                        d[s] += g;
                    }
                }
            }
            smallvec![Some(dx)]
        })
        .with_tangent(tangent))
    }

    /// `jnp.take(self, indices, axis)`: the slices of `self` at `indices`
    /// along `axis`; the result's shape is `self`'s with that axis replaced
    /// by `indices`' shape. Negative indices count from the end; indices out
    /// of range give NaN (JAX's default `mode="fill"`), and their gradient
    /// is dropped.
    ///
    /// ```
    /// use flaxen::tensor::Tensor;
    /// use ndarray::arr1;
    /// let x = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2]).unwrap();
    /// let rows = x.take(&arr1(&[2, 0, -1]).into_dyn(), 0).unwrap();
    /// assert_eq!(rows.to_vec(), [5.0, 6.0, 1.0, 2.0, 5.0, 6.0]);
    /// ```
    pub fn take(&self, indices: &ArrayD<i32>, axis: isize) -> Result<Tensor> {
        let a = normalize_axis("take", axis, self.ndim())?;
        let len = self.shape()[a];
        let source = move |i: i32| source_index(i, len);
        let idx: Vec<Option<usize>> = indices.iter().map(|&i| source(i)).collect();
        let outer: usize = self.shape()[..a].iter().product();
        let inner: usize = self.shape()[a + 1..].iter().product();
        // Read in place when row-major (a copy otherwise).
        let x = self.data.as_standard_layout();
        let x = x.as_slice().expect("standard layout");
        let mut out = Vec::with_capacity(outer * idx.len() * inner);
        for o in 0..outer {
            for s in &idx {
                match s {
                    Some(s) => {
                        let start = (o * len + s) * inner;
                        out.extend_from_slice(&x[start..start + inner]);
                    }
                    None => out.extend(std::iter::repeat_n(f32::NAN, inner)),
                }
            }
        }
        let mut shape = self.shape()[..a].to_vec();
        shape.extend_from_slice(indices.shape());
        shape.extend_from_slice(&self.shape()[a + 1..]);
        let value = ArrayD::from_shape_vec(IxDyn(&shape), out).expect("shape counted");
        let in_shape = self.shape().to_vec();
        let tangent = || {
            let indices = indices.clone();
            filled_with_zeros(self.shape().to_vec(), move |t| t.take(&indices, axis))
        };
        Ok(Tensor::record(value.into_shared(), &[self], move |g, _| {
            let g = g.as_standard_layout();
            let g = g.as_slice().expect("standard layout");
            let mut dx = vec![0.0f32; in_shape.iter().product()];
            let mut k = 0;
            for o in 0..outer {
                for s in &idx {
                    if let Some(s) = s {
                        let start = (o * len + s) * inner;
                        for (d, &v) in dx[start..start + inner].iter_mut().zip(&g[k..k + inner]) {
                            *d += v;
                        }
                    }
                    k += inner;
                }
            }
            smallvec![Some(
                ArrayD::from_shape_vec(IxDyn(&in_shape), dx).expect("input shape")
            )]
        })
        .with_tangent(tangent))
    }

    /// `jnp.argmax(self, axis)`: the index of the largest value along
    /// `axis` (the first one on ties; a NaN counts as the largest, as in
    /// JAX). Not differentiable.
    ///
    /// ```
    /// use flaxen::tensor::Tensor;
    /// let x = Tensor::from_vec(vec![1.0, 5.0, 5.0, 0.0, -1.0, 2.0], &[2, 3]).unwrap();
    /// assert_eq!(x.argmax(-1).unwrap().into_raw_vec_and_offset().0, [1, 2]);
    /// ```
    ///
    /// Fails with [`TensorError::Axis`] for a bad axis, and
    /// [`TensorError::Argument`] for an empty axis (JAX raises too).
    pub fn argmax(&self, axis: isize) -> Result<ArrayD<i32>> {
        self.arg_best("argmax", axis, |v, best| v > best)
    }

    /// `jnp.argmin(self, axis)`: as [`Tensor::argmax`] for the smallest.
    pub fn argmin(&self, axis: isize) -> Result<ArrayD<i32>> {
        self.arg_best("argmin", axis, |v, best| v < best)
    }

    fn arg_best(
        &self,
        op: &'static str,
        axis: isize,
        better: impl Fn(f32, f32) -> bool,
    ) -> Result<ArrayD<i32>> {
        // Indices computed from the values, not recorded (see `compare`).
        self.note_read();
        let a = normalize_axis(op, axis, self.ndim())?;
        if self.shape()[a] == 0 {
            return Err(TensorError::Argument {
                op,
                message: format!(
                    "attempt to get {op} of an empty axis (shape {:?})",
                    self.shape()
                ),
            });
        }
        Ok(self.data.map_axis(Axis(a), |lane| {
            let mut best = 0;
            for (i, &v) in lane.iter().enumerate() {
                let b = lane[best];
                if b.is_nan() {
                    break;
                }
                if v.is_nan() || better(v, b) {
                    best = i;
                }
            }
            best as i32
        }))
    }
}

/// The tangent rule of a gather `gather` from an input of shape `shape`:
/// the same gather of the tangent, with zeros where an index is out of
/// range (JAX's rule gathers tangents with a fill value of 0, where the
/// values get NaN).
fn filled_with_zeros(
    shape: Vec<usize>,
    gather: impl Fn(&Tensor) -> Result<Tensor> + Send + Sync + 'static,
) -> TangentRule {
    Box::new(move |t: &[Option<Tensor>]| {
        let Some(t) = &t[0] else { return Ok(None) };
        let taken = gather(t)?;
        // Out-of-range positions are the NaNs of a gather of ones.
        let valid = gather(&Tensor::ones(&shape))?;
        let mask = Tensor::from_array(valid.data.mapv(|v| f32::from(!v.is_nan())));
        Ok(Some(Tensor::select(&mask, &taken, &Tensor::zeros(&[]))?))
    })
}
