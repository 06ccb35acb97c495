//! Operations that real data needs beyond arithmetic: `one_hot`, `min`,
//! `split`, and the activation `leaky_relu`,
//! each composed from exact kernels in JAX's operation order.

use std::sync::Arc;

use ndarray::ArrayD;

use crate::tensor::error::{Result, TensorError};
use crate::tensor::shape::normalize_axis;
use crate::tensor::Tensor;

/// `jax.nn.one_hot(labels, num_classes)`: a float32 tensor of shape
/// `labels.shape + [num_classes]`, 1 where the class is the label. As in
/// JAX, a label outside `[0, num_classes)` gives a row of zeros.
///
/// ```
/// use flaxen::tensor::one_hot;
/// use ndarray::arr1;
/// let t = one_hot(&arr1(&[2, 0, 5]).into_dyn(), 3);
/// assert_eq!(t.to_vec(), [0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
/// ```
pub fn one_hot(labels: &ArrayD<i32>, num_classes: usize) -> Tensor {
    let mut shape = labels.shape().to_vec();
    shape.push(num_classes);
    let mut out = vec![0.0f32; labels.len() * num_classes];
    for (row, &l) in out.chunks_mut(num_classes.max(1)).zip(labels.iter()) {
        if l >= 0 && (l as usize) < num_classes {
            row[l as usize] = 1.0;
        }
    }
    Tensor::from_array(ArrayD::from_shape_vec(shape, out).expect("one row per label"))
}

impl Tensor {
    /// The minimum over `axes` (`jnp.min`): `-max(-x)`, so NaNs propagate
    /// and tied minima share the gradient equally, as in JAX.
    pub fn min(&self, axes: &[isize], keepdims: bool) -> Result<Tensor> {
        Ok(self.neg().max(axes, keepdims)?.neg())
    }

    /// `jnp.split(x, sections, axis)`: `sections` equal parts along `axis`.
    ///
    /// Fails with [`TensorError::Argument`] when the axis length is not a
    /// multiple of `sections` (JAX raises too) or `sections` is 0.
    pub fn split(&self, sections: usize, axis: isize) -> Result<Vec<Tensor>> {
        let a = normalize_axis("split", axis, self.ndim())?;
        let len = self.shape()[a];
        if sections == 0 || !len.is_multiple_of(sections) {
            return Err(TensorError::Argument {
                op: "split",
                message: format!(
                    "an axis of length {len} cannot be split into {sections} equal sections"
                ),
            });
        }
        let step = len / sections;
        (0..sections)
            .map(|i| self.slice(a as isize, i * step, (i + 1) * step))
            .collect()
    }

    /// `jnp.split(x, indices, axis)` with explicit split points: the parts
    /// `[0, i0)`, `[i0, i1)`, ..., `[ik, len)`.
    ///
    /// Fails with [`TensorError::Argument`] for indices out of order or past
    /// the end.
    pub fn split_at(&self, indices: &[usize], axis: isize) -> Result<Vec<Tensor>> {
        let a = normalize_axis("split", axis, self.ndim())?;
        let len = self.shape()[a];
        let mut bounds = vec![0];
        bounds.extend_from_slice(indices);
        bounds.push(len);
        if bounds.windows(2).any(|w| w[0] > w[1]) {
            return Err(TensorError::Argument {
                op: "split",
                message: format!("split points {indices:?} are not increasing within 0..={len}"),
            });
        }
        bounds
            .windows(2)
            .map(|w| self.slice(a as isize, w[0], w[1]))
            .collect()
    }

    /// `jax.nn.leaky_relu(x, negative_slope)`: `x` where `x >= 0`, else
    /// `negative_slope * x`.
    pub fn leaky_relu(&self, negative_slope: f32) -> Tensor {
        let mask = Tensor::from_array(self.data.mapv(|v| f32::from(v >= 0.0)));
        let scaled = self * negative_slope;
        Tensor::select(&mask, self, &scaled).expect("same shapes")
    }
}

/// `x`, with `+inf` replaced by 0 (JAX's `_replace_inf` in logaddexp's
/// derivative).
fn replace_inf(x: f32) -> f32 {
    if x == f32::INFINITY {
        0.0
    } else {
        x
    }
}

impl Tensor {
    /// `jnp.logaddexp(self, other)`: `log(e^a + e^b)` without overflow, as
    /// JAX computes it (`max + log1p(exp(-|a - b|))`, `a + b` where the
    /// difference is NaN), with JAX's custom derivative `g * exp(a - out)`.
    ///
    /// Fails with [`TensorError::Incompatible`] when the shapes do not
    /// broadcast.
    pub fn logaddexp(&self, other: &Tensor) -> Result<Tensor> {
        use crate::tensor::shape::{broadcast_shapes_for, sum_to};
        use crate::xla::math as xla_math;
        use ndarray::{IxDyn, Zip};
        let shape = broadcast_shapes_for("logaddexp", self.shape(), other.shape())?;
        let dim = IxDyn(&shape);
        let a = self.data.broadcast(dim.clone()).expect("broadcast checked");
        let b = other.data.broadcast(dim).expect("broadcast checked");
        let out = Zip::from(&a).and(&b).map_collect(|&x, &y| {
            let delta = x - y;
            if delta.is_nan() {
                x + y
            } else {
                x.max(y) + xla_math::log1p(xla_math::exp(-delta.abs()))
            }
        });
        let (ad, bd, od) = (a.to_owned(), b.to_owned(), out.clone());
        let (sa, sb) = (self.shape().to_vec(), other.shape().to_vec());
        let (ad, bd, od) = (Arc::new(ad), Arc::new(bd), Arc::new(od));
        let (at, bt, ot) = (ad.clone(), bd.clone(), od.clone());
        let (sa2, sb2) = (sa.clone(), sb.clone());
        let tangent = move || -> crate::tensor::tape::TangentRule {
            // JAX's custom rule, zero tangents instantiated:
            // `t1 * exp(x1 - out) + t2 * exp(x2 - out)` (infinities as 0),
            // the sum fused into the first product under `jvp`.
            let factor = |x: &ArrayD<f32>| {
                let f = Zip::from(x)
                    .and(&*ot)
                    .map_collect(|&x, &o| xla_math::exp(replace_inf(x) - replace_inf(o)));
                Tensor::from_array(f)
            };
            let (fa, fb) = (factor(&at), factor(&bt));
            Box::new(move |t: &[Option<Tensor>]| {
                let ta = t[0].clone().unwrap_or_else(|| Tensor::zeros(&sa2));
                let tb = t[1].clone().unwrap_or_else(|| Tensor::zeros(&sb2));
                if !crate::tensor::forward::fused() {
                    return Ok(Some(ta.mul(&fa)?.add(&tb.mul(&fb)?)?));
                }
                // The sum fused into the first product.
                let second = tb.mul(&fb)?.broadcast_to(fa.shape())?;
                let ta = ta.broadcast_to(fa.shape())?;
                let v = Zip::from(&ta.data)
                    .and(&fa.data)
                    .and(&second.data)
                    .map_collect(|&t, &f, &s| t.mul_add(f, s));
                Ok(Some(Tensor::from_array(v)))
            })
        };
        Ok(
            Tensor::record(out.into_shared(), &[self, other], move |g, _| {
                let d = |x: &ArrayD<f32>| {
                    Zip::from(&g).and(x).and(&*od).map_collect(|&g, &x, &o| {
                        g * xla_math::exp(replace_inf(x) - replace_inf(o))
                    })
                };
                smallvec::smallvec![Some(sum_to(d(&ad), &sa)), Some(sum_to(d(&bd), &sb))]
            })
            .with_tangent(tangent),
        )
    }

    /// `jnp.logaddexp(self, -self)` as it runs inside one jitted
    /// computation (`optax.log_cosh` under `jax.jit`): the value of
    /// [`logaddexp`](Tensor::logaddexp), but the two terms of the
    /// derivative, `g * exp(x - out)` and `-(g * exp(-x - out))`, are one
    /// XLA fusion, where LLVM contracts the first product into the sum
    /// (read off the compiled kernel, checked on the values).
    pub(crate) fn logaddexp_negated_fused(&self) -> Result<Tensor> {
        use crate::xla::math as xla_math;
        use ndarray::Zip;
        let x = self.detached();
        let out = x.logaddexp(&x.neg())?;
        let factors = |x: &ArrayD<f32>, o: &ArrayD<f32>| {
            let f = |x: f32, o: f32| xla_math::exp(replace_inf(x) - replace_inf(o));
            let a = Zip::from(x).and(o).map_collect(|&x, &o| f(x, o));
            let b = Zip::from(x).and(o).map_collect(|&x, &o| f(-x, o));
            (a, b)
        };
        let (fa, fb) = factors(&x.data.to_owned(), &out.data.to_owned());
        let (fa, fb) = (Arc::new(fa), Arc::new(fb));
        let (ta, tb) = (fa.clone(), fb.clone());
        let tangent = move || -> crate::tensor::tape::TangentRule {
            // logaddexp's tangent with the second input's tangent `-t`, as
            // the composition `logaddexp(x, -x)` pushes it.
            let (fa, fb) = (
                Tensor::from_array((*ta).clone()),
                Tensor::from_array((*tb).clone()),
            );
            Box::new(move |t: &[Option<Tensor>]| {
                let Some(t) = &t[0] else { return Ok(None) };
                let second = t.neg().mul(&fb)?;
                if !crate::tensor::forward::fused() {
                    return Ok(Some(t.mul(&fa)?.add(&second)?));
                }
                let v = Zip::from(&t.data)
                    .and(&fa.data)
                    .and(&second.data)
                    .map_collect(|&t, &f, &s| t.mul_add(f, s));
                Ok(Some(Tensor::from_array(v)))
            })
        };
        Ok(Tensor::record(out.data.clone(), &[self], move |g, _| {
            let d = Zip::from(&g)
                .and(&*fa)
                .and(&*fb)
                .map_collect(|&g, &a, &b| a.mul_add(g, -(b * g)));
            smallvec::smallvec![Some(d)]
        })
        .with_tangent(tangent))
    }

    /// `jax.nn.softplus(x)`: `logaddexp(x, 0)`.
    pub fn softplus(&self) -> Tensor {
        self.logaddexp(&Tensor::scalar(0.0))
            .expect("a scalar broadcasts")
    }

    /// `jax.nn.log_sigmoid(x)`: `-softplus(-x)`.
    pub fn log_sigmoid(&self) -> Tensor {
        self.neg().softplus().neg()
    }

    /// `jax.nn.elu(x, alpha)`: `x` where `x > 0`, else `alpha * expm1(x)`.
    pub fn elu(&self, alpha: f32) -> Tensor {
        let positive = Tensor::from_array(self.data.mapv(|v| f32::from(v > 0.0)));
        let safe = Tensor::select(&positive, &Tensor::zeros(&[]), self).expect("same shapes");
        let negative = &safe.expm1() * alpha;
        Tensor::select(&positive, self, &negative).expect("same shapes")
    }
}
