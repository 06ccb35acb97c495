//! `jax.nn.standardize`, whose value and both derivatives are those of one
//! jitted XLA computation (`jax.nn.standardize` is `@jax.jit`), eagerly
//! too.

use std::sync::Arc;

use ndarray::{ArrayD, ArrayViewD, Axis, Zip};

use crate::tensor::custom::{forward_of, record_custom};
use crate::tensor::error::Result;
use crate::tensor::shape::normalize_axis;
use crate::tensor::Tensor;
use crate::xla::reduce::{xla_row_sum, TREE_WINDOW};

impl Tensor {
    /// `jax.nn.standardize(x, axis)`: `(x - mean) * rsqrt(var + eps)` with
    /// `var = max(0, mean(x²) - mean²)`, over `axis`.
    ///
    /// `jax.nn.standardize` is jitted: XLA fuses the variance into its
    /// reduction, where LLVM contracts `Σx² · (1/n) - mean²` into one fused
    /// multiply-add (checked against JAX on an Intel Xeon), so that is the
    /// value computed here. The backward pass is the fused kernel of the
    /// same computation's pullback ([`standardize_backward`]); the tangent
    /// is the plain expression's. Compiled steps do not replay it: a step
    /// that calls it runs eagerly, with the same numbers.
    pub fn standardize(&self, axis: isize, epsilon: f32) -> Result<Tensor> {
        let a = normalize_axis("standardize", axis, self.ndim())?;
        let x = self.detached();
        let (y, mean, var) = standardize_parts(&x, axis, epsilon)?;
        let (xd, md, vd) = (x.data.clone(), mean.data.clone(), var.data.clone());
        let rule = Arc::new(move |cts: &[Tensor]| -> crate::Result<Vec<Tensor>> {
            let g = cts[0].data.view();
            let dx = standardize_backward(xd.view(), g, md.view(), vd.view(), a, epsilon);
            Ok(vec![Tensor::from_array(dx)])
        });
        let run = Arc::new(move |xs: Vec<Tensor>| -> crate::Result<Vec<Tensor>> {
            Ok(vec![standardize_parts(&xs[0], axis, epsilon)?.0])
        });
        let forward = forward_of(vec![x], run);
        let mut out = record_custom(
            "standardize",
            std::slice::from_ref(self),
            vec![y],
            rule,
            forward,
        );
        Ok(out.pop().expect("one output"))
    }
}

/// The standardized values, the mean and the fused variance (before the
/// clamp at 0), each a differentiable expression of `x` whose tangent is
/// the plain expression's.
fn standardize_parts(x: &Tensor, axis: isize, epsilon: f32) -> Result<(Tensor, Tensor, Tensor)> {
    let mean = x.mean(&[axis], true)?;
    let squares = x.square();
    let plain = squares.mean(&[axis], true)?.sub(&mean.square())?;
    // The fused value needs the sums of squares before the scaling.
    let sums = squares.detached().sum(&[axis], true)?;
    let n = x.shape()[normalize_axis("standardize", axis, x.ndim())?];
    let r = 1.0 / n as f32;
    let fused = Zip::from(&sums.data)
        .and(&mean.data)
        .map_collect(|&s, &m| s.mul_add(r, -(m * m)));
    let var = Tensor::record(fused.into_shared(), &[&plain], |g, _| {
        smallvec::smallvec![Some(g)]
    })
    .with_tangent(|| crate::tensor::forward::linear(|t| Ok(t.clone())));
    let clamped = Tensor::scalar(0.0).maximum(&var)?;
    let y = x
        .sub(&mean)?
        .mul(&clamped.add(&Tensor::scalar(epsilon))?.rsqrt())?;
    Ok((y, mean, var))
}

/// The cotangent of `x` for the output's cotangent `g`, given the mean and
/// the fused variance (`v`, before the clamp) of each lane along `axis`,
/// as XLA:CPU computes `jax.nn.standardize`'s pullback (its optimized HLO
/// and x86 kernels, jaxlib 0.10.2; checked bit for bit along the last axis
/// on 105 shapes, 1 to 16 rows of 2 to 100, where the value is exact):
///
/// - `r = 1/n`, `s = rsqrt(max(0, v) + eps)`, `c = (s / (max(0, v) + eps))
///   * -0.5` (rsqrt's derivative), `k` the maximum's derivative (1 where
///   `v >= 0`, halved at a tie with 0, else 0);
/// - `S0 = Σ g s` and `S1 = Σ (x - mean) g` in the order of [`Sums`];
/// - `d = (S1 * c) * k`, `a = fma(-d, 2 mean, -S0) * r`;
/// - `dx = a + fma(g, s, (d * r) * 2x)`.
fn standardize_backward(
    x: ArrayViewD<'_, f32>,
    g: ArrayViewD<'_, f32>,
    mean: ArrayViewD<'_, f32>,
    var: ArrayViewD<'_, f32>,
    axis: usize,
    epsilon: f32,
) -> ArrayD<f32> {
    let ax = Axis(axis);
    let n = x.shape()[axis];
    let r = 1.0 / n as f32;
    let sums = Sums::of(n, x.len() / n.max(1));
    let mut dx = ArrayD::<f32>::zeros(x.raw_dim());
    Zip::from(dx.lanes_mut(ax))
        .and(x.lanes(ax))
        .and(g.lanes(ax))
        .and(mean.lanes(ax))
        .and(var.lanes(ax))
        .for_each(|mut dx, x, g, m, v| {
            let (m, v) = (m[0], v[0]);
            // XLA's maximum propagates NaN.
            let clamped = if v.is_nan() { v } else { v.max(0.0) };
            let shifted = clamped + epsilon;
            let s = crate::xla::math::rsqrt(shifted);
            let c = (s / shifted) * -0.5;
            let k = f32::from(v == clamped) / if clamped == 0.0 { 2.0 } else { 1.0 };
            let (s0, s1) = match sums {
                Sums::Windows => {
                    let gs: Vec<f32> = g.iter().map(|&g| g * s).collect();
                    let cg: Vec<f32> = x.iter().zip(&g).map(|(&x, &g)| (x - m) * g).collect();
                    (xla_row_sum(&gs), xla_row_sum(&cg))
                }
                Sums::Chains { rounded } => {
                    let s0 = g.iter().fold(0.0f32, |acc, &g| g.mul_add(s, acc));
                    let s1 = x.iter().zip(&g).fold(0.0f32, |acc, (&x, &g)| {
                        if rounded {
                            acc + (x - m) * g
                        } else {
                            (x - m).mul_add(g, acc)
                        }
                    });
                    (s0, s1)
                }
            };
            let d = (s1 * c) * k;
            let a = (-d).mul_add(2.0 * m, -s0) * r;
            let dr = d * r;
            for ((o, &x), &g) in dx.iter_mut().zip(&x).zip(&g) {
                *o = a + g.mul_add(s, dr * (2.0 * x));
            }
        });
    dx
}

/// How XLA:CPU sums a lane's two reductions in the backward pass, which
/// depends on how LLVM compiles the reduction for the array's shape.
#[derive(Clone, Copy)]
enum Sums {
    /// Lanes of more than 32: the products rounded and stored, then
    /// summed in windows of 32 (`TreeReductionRewriter`, [`xla_row_sum`]).
    Windows,
    /// Up to 32, one loop per lane: `S0` a chain of fused multiply-adds;
    /// `S1` too, unless LLVM vectorizes the reduction across lanes
    /// (`rounded`), where the products are rounded before the sum.
    Chains {
        /// Whether `S1`'s products are rounded.
        rounded: bool,
    },
}

impl Sums {
    /// The sums for `lanes` lanes of `n` elements. LLVM vectorized `S1`
    /// across lanes for 4, 8 and 16 lanes of 5 to 8 elements (measured:
    /// those kernels multiply whole vectors, then add permuted columns);
    /// other shapes of the measured grid kept one fused chain per lane.
    fn of(n: usize, lanes: usize) -> Sums {
        if n > TREE_WINDOW {
            Sums::Windows
        } else {
            Sums::Chains {
                rounded: lanes.is_multiple_of(4) && (5..=8).contains(&n),
            }
        }
    }
}
