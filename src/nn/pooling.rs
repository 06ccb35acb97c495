//! `max_pool` and `avg_pool` (`flax.linen.pooling`).

use crate::core::Result;
use crate::tensor::{Tensor, TensorError, WindowSum};

use super::conv::{same_pads, Padding};

/// A pool's input and windows: `x` as `[batch, S…, C]` (its batch axes
/// flattened into one, or one added), the batch axes, and each spatial
/// axis' stride and padding.
struct Pool {
    x: Tensor,
    batch: Vec<usize>,
    strides: Vec<usize>,
    pads: Vec<(usize, usize)>,
}

/// Checks a pool's arguments and resolves its padding (Flax's `pool`).
fn pool(
    op: &'static str,
    x: &Tensor,
    window: &[usize],
    strides: Option<&[usize]>,
    padding: &Padding,
) -> Result<Pool> {
    let d = window.len();
    let bad = |message: String| TensorError::Argument { op, message };
    if d == 0 || window.contains(&0) {
        return Err(bad(format!("window_shape {window:?} must be positive sizes")).into());
    }
    let strides = strides.map_or_else(|| vec![1; d], <[usize]>::to_vec);
    if strides.len() != d || strides.contains(&0) {
        return Err(bad(format!("strides {strides:?} must be {d} positive values")).into());
    }
    if x.ndim() < d + 1 {
        return Err(bad(format!(
            "an input of shape {:?} has no room for {d} spatial dimensions and features",
            x.shape()
        ))
        .into());
    }
    let batch = x.shape()[..x.ndim() - d - 1].to_vec();
    let mut flat: Vec<isize> = vec![batch.iter().product::<usize>() as isize];
    flat.extend(x.shape()[x.ndim() - d - 1..].iter().map(|&v| v as isize));
    let x = x.reshape(&flat)?;
    let spatial = &x.shape()[1..=d];
    let pads = match padding {
        Padding::Valid => vec![(0, 0); d],
        Padding::Same => same_pads(spatial, window, &strides),
        Padding::Explicit(p) if p.len() == d => p.clone(),
        other => {
            return Err(bad(format!(
                "padding {other:?}: pools take SAME, VALID or one (low, high) pair per spatial dimension"
            ))
            .into())
        }
    };
    Ok(Pool {
        x,
        batch,
        strides,
        pads,
    })
}

impl Pool {
    /// The pool's window on every axis of `[batch, S…, C]`, as
    /// `lax.reduce_window` takes it.
    fn spec(&self, window: &[usize]) -> WindowSum {
        WindowSum {
            window: [1].iter().chain(window).chain(&[1]).copied().collect(),
            strides: [1]
                .iter()
                .chain(&self.strides)
                .chain(&[1])
                .copied()
                .collect(),
            pads: [(0, 0)]
                .iter()
                .chain(&self.pads)
                .chain(&[(0, 0)])
                .copied()
                .collect(),
            // Flax adds a batch axis to an input without one.
            hlo_rank: self.batch.len().max(1) + window.len() + 1,
        }
    }
}

fn finish(y: Tensor, batch: &[usize], out_spatial: &[usize]) -> Result<Tensor> {
    let c = *y.shape().last().expect("channels");
    let mut shape: Vec<isize> = batch.iter().map(|&b| b as isize).collect();
    shape.extend(out_spatial.iter().map(|&s| s as isize));
    shape.push(c as isize);
    Ok(y.reshape(&shape)?)
}

/// `nn.max_pool(x, window_shape, strides, padding)`: the maximum of each
/// window (padding reads `-inf`).
///
/// As in JAX, the maxima are `lax.reduce_window` with `max`, NaN and
/// signed zeros treated as XLA:CPU's back end for the pool treats them
/// (see `crate::xla::window_max`). The cotangent is JAX's: each window's
/// goes to one element, the first of tied maxima in row-major window
/// order (not shared among them), overlapping windows adding theirs in
/// row-major order, and a window whose maximum is `-inf` may give its
/// cotangent to padding, where it is lost (see
/// `crate::xla::select_scatter`). A compiled step replays it with the
/// same numbers.
///
/// ```
/// use flaxen::nn::{max_pool, Padding};
/// use flaxen::tensor::Tensor;
/// let x = Tensor::from_vec(vec![1.0, 5.0, 2.0, 3.0], &[1, 4, 1])?;
/// let y = max_pool(&x, &[2], Some(&[2]), &Padding::Valid)?;
/// assert_eq!(y.to_vec(), [5.0, 3.0]);
/// # Ok::<(), flaxen::Error>(())
/// ```
pub fn max_pool(
    x: &Tensor,
    window_shape: &[usize],
    strides: Option<&[usize]>,
    padding: &Padding,
) -> Result<Tensor> {
    let p = pool("max_pool", x, window_shape, strides, padding)?;
    let y = p.x.window_max(&p.spec(window_shape))?;
    let out: Vec<usize> = y.shape()[1..=window_shape.len()].to_vec();
    finish(y, &p.batch, &out)
}

/// `nn.avg_pool(x, window_shape, strides, padding, count_include_pad)`:
/// the mean of each window; padding counts as zeros when
/// `count_include_pad` (Flax's default), otherwise each window is divided
/// by the number of input elements it covers.
///
/// As in JAX, each window is summed by `lax.reduce_window` in XLA:CPU's
/// order (YNNPACK's or XLA's loop, see `crate::xla::reduce_window`), then
/// multiplied by the `f32` reciprocal of its size; the cotangent runs
/// through the same multiply and the transposed window sum. Inside
/// [`as_jitted`](crate::tensor::as_jitted) the cotangent is that of a
/// jitted program.
///
/// ```
/// use flaxen::nn::{avg_pool, Padding};
/// use flaxen::tensor::Tensor;
/// let x = Tensor::from_vec(vec![1.0, 5.0, 2.0, 4.0], &[1, 4, 1])?;
/// let y = avg_pool(&x, &[2], Some(&[2]), &Padding::Valid, true)?;
/// assert_eq!(y.to_vec(), [3.0, 3.0]);
/// # Ok::<(), flaxen::Error>(())
/// ```
pub fn avg_pool(
    x: &Tensor,
    window_shape: &[usize],
    strides: Option<&[usize]>,
    padding: &Padding,
    count_include_pad: bool,
) -> Result<Tensor> {
    let p = pool("avg_pool", x, window_shape, strides, padding)?;
    let sums = p.x.window_sum(&p.spec(window_shape))?;
    let out: Vec<usize> = sums.shape()[1..=window_shape.len()].to_vec();
    let y = if count_include_pad {
        // XLA divides by a constant as a multiply by its f32 reciprocal
        // (measured).
        let size: usize = window_shape.iter().product();
        sums.mul(&Tensor::scalar(1.0 / size as f32))?
    } else {
        // Each window's count of real elements (exact in any order), as
        // `[1, S_out…, 1]`. XLA divides by a divisor broadcast over the
        // channels as a multiply by its reciprocal (measured; a general
        // fact of XLA's division by a broadcast operand).
        let per_axis: Vec<Vec<f32>> = (0..window_shape.len())
            .map(|a| {
                let n = p.x.shape()[a + 1] as isize;
                (0..out[a])
                    .map(|o| {
                        let start = (o * p.strides[a]) as isize - p.pads[a].0 as isize;
                        let end = (start + window_shape[a] as isize).min(n);
                        (end - start.max(0)).max(0) as f32
                    })
                    .collect()
            })
            .collect();
        let mut recip = Vec::with_capacity(out.iter().product());
        let mut index = vec![0usize; out.len()];
        for _ in 0..out.iter().product::<usize>() {
            let count: f32 = index.iter().zip(&per_axis).map(|(&i, c)| c[i]).product();
            recip.push(1.0 / count);
            for a in (0..index.len()).rev() {
                index[a] += 1;
                if index[a] < out[a] {
                    break;
                }
                index[a] = 0;
            }
        }
        let shape: Vec<usize> = [1].iter().chain(&out).chain(&[1]).copied().collect();
        sums.mul(&Tensor::from_vec(recip, &shape)?)?
    };
    finish(y, &p.batch, &out)
}
