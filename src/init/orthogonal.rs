//! The orthogonal initializer: the Q factor of a QR decomposition of a
//! normal matrix, as `jax.nn.initializers.orthogonal`.

use ndarray::{Array2, ArrayD, IxDyn};

use super::Initializer;
use crate::random::{self, RandomError};

/// `jax.nn.initializers.orthogonal(scale)`: a (semi-)orthogonal matrix over
/// the last axis and all others flattened, times `scale`.
///
/// ```
/// use flaxen::{init, random};
/// let q = init::orthogonal(1.0).init(random::key(0), &[4, 4]).unwrap();
/// let q = q.into_dimensionality::<ndarray::Ix2>().unwrap();
/// let eye = q.t().dot(&q);
/// assert!((eye[[0, 0]] - 1.0).abs() < 1e-5 && eye[[0, 1]].abs() < 1e-5);
/// ```
pub fn orthogonal(scale: f32) -> Initializer {
    orthogonal_with_axis(scale, -1)
}

/// [`orthogonal`] with the columns on `column_axis` (negative counts from
/// the end).
pub fn orthogonal_with_axis(scale: f32, column_axis: isize) -> Initializer {
    Initializer::from_fn("orthogonal", move |key, shape| {
        let rank = shape.len();
        if rank < 2 {
            return Err(RandomError::Shape {
                function: "orthogonal",
                message: format!("needs a shape of rank 2 or more, got {shape:?}"),
            });
        }
        let n = rank as isize;
        let col = if column_axis < 0 {
            column_axis + n
        } else {
            column_axis
        };
        if !(0..n).contains(&col) {
            return Err(RandomError::Shape {
                function: "orthogonal",
                message: format!("column_axis {column_axis} is out of range for shape {shape:?}"),
            });
        }
        let col = col as usize;
        if shape.contains(&0) {
            return Ok(ArrayD::zeros(IxDyn(shape)));
        }
        let n_cols = shape[col];
        let n_rows = shape.iter().product::<usize>() / n_cols;
        let (tall, wide) = (n_rows.max(n_cols), n_rows.min(n_cols));
        let z = random::normal(key, &[tall, wide])?
            .into_dimensionality::<ndarray::Ix2>()
            .expect("2-D");
        let (mut q, r_diag) = householder_qr(z);
        for (j, d) in r_diag.iter().enumerate() {
            let sign = if *d > 0.0 {
                1.0
            } else if *d < 0.0 {
                -1.0
            } else {
                0.0
            };
            q.column_mut(j).mapv_inplace(|v| v * sign);
        }
        let q = if n_rows < n_cols {
            q.reversed_axes()
        } else {
            q
        };
        // (rows, cols) -> shape without the column axis, then the column axis
        // moved back into place.
        let mut flat_shape: Vec<usize> = shape.to_vec();
        flat_shape.remove(col);
        flat_shape.push(n_cols);
        let q = q
            .as_standard_layout()
            .into_owned()
            .into_shape_with_order(IxDyn(&flat_shape))
            .expect("same element count");
        let mut order: Vec<usize> = (0..rank - 1).collect();
        order.insert(col, rank - 1);
        let q = q.permuted_axes(IxDyn(&order));
        Ok(q.as_standard_layout().mapv(|v| scale * v))
    })
}

/// Reduced QR of a tall `m x n` matrix by Householder reflections, in the
/// order of LAPACK's `sgeqr2` and `sorg2r`. Returns `Q` (`m x n`) and the
/// diagonal of `R`.
fn householder_qr(mut a: Array2<f32>) -> (Array2<f32>, Vec<f32>) {
    let (m, n) = a.dim();
    let mut tau = vec![0.0f32; n];
    for j in 0..n {
        // slarfg: the reflector that zeroes a[j+1.., j].
        let alpha = a[[j, j]];
        let xnorm = norm(a.column(j).iter().skip(j + 1).copied());
        if xnorm != 0.0 {
            let beta = -lapy2(alpha, xnorm).copysign(alpha);
            tau[j] = (beta - alpha) / beta;
            let s = 1.0 / (alpha - beta);
            for i in j + 1..m {
                a[[i, j]] *= s;
            }
            a[[j, j]] = beta;
            // Apply H = I - tau v v^T to the trailing columns.
            let saved = a[[j, j]];
            a[[j, j]] = 1.0;
            apply_reflector(&mut a, j, j + 1, tau[j]);
            a[[j, j]] = saved;
        }
    }
    let r_diag: Vec<f32> = (0..n).map(|j| a[[j, j]]).collect();
    // sorg2r: accumulate Q from the reflectors, last first.
    for i in (0..n).rev() {
        if i + 1 < n {
            a[[i, i]] = 1.0;
            apply_reflector(&mut a, i, i + 1, tau[i]);
        }
        for r in i + 1..m {
            a[[r, i]] *= -tau[i];
        }
        a[[i, i]] = 1.0 - tau[i];
        for r in 0..i {
            a[[r, i]] = 0.0;
        }
    }
    (a, r_diag)
}

/// `slarf` from the left: the reflector `v = a[j.., j]` (with `v[0]` = 1
/// already stored) applied to columns `from..` of rows `j..`.
fn apply_reflector(a: &mut Array2<f32>, j: usize, from: usize, tau: f32) {
    if tau == 0.0 {
        return;
    }
    let (m, n) = a.dim();
    for c in from..n {
        let mut w = 0.0f32;
        for r in j..m {
            w += a[[r, c]] * a[[r, j]];
        }
        let tw = tau * w;
        for r in j..m {
            let v = a[[r, j]];
            a[[r, c]] -= v * tw;
        }
    }
}

/// Euclidean norm, accumulated in double precision as optimized BLAS does.
fn norm(values: impl Iterator<Item = f32>) -> f32 {
    values
        .map(|v| f64::from(v) * f64::from(v))
        .sum::<f64>()
        .sqrt() as f32
}

/// `sqrt(x^2 + y^2)` without undue overflow (LAPACK's `slapy2`).
fn lapy2(x: f32, y: f32) -> f32 {
    let (xa, ya) = (x.abs(), y.abs());
    let w = xa.max(ya);
    let z = xa.min(ya);
    if z == 0.0 {
        w
    } else {
        w * (1.0 + (z / w) * (z / w)).sqrt()
    }
}
