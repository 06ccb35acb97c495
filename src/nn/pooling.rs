//! `max_pool` and `avg_pool` (`flax.linen.pooling`).

use crate::core::Result;
use crate::tensor::{ConvSpec, Tensor, TensorError};

use super::conv::{same_pads, Padding};

/// A window reduction over the spatial dimensions of `[batch…, S…, C]`
/// (Flax's `pool`): the windows gathered, `pad` where they read padding.
fn windows(
    op: &'static str,
    x: &Tensor,
    window: &[usize],
    strides: Option<&[usize]>,
    padding: &Padding,
    pad: f32,
) -> Result<(Tensor, Vec<usize>, Vec<usize>)> {
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
    let mut spec = ConvSpec::new(d);
    spec.strides = strides;
    spec.padding = pads;
    let (w, out_spatial) = super::super::tensor::conv_windows(op, &x, window, &spec, pad)?;
    Ok((w, out_spatial, batch))
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
    let (w, out, batch) = windows(
        "max_pool",
        x,
        window_shape,
        strides,
        padding,
        f32::NEG_INFINITY,
    )?;
    finish(w.max(&[2], false)?, &batch, &out)
}

/// `nn.avg_pool(x, window_shape, strides, padding, count_include_pad)`:
/// the mean of each window; padding counts as zeros when
/// `count_include_pad` (Flax's default), otherwise each window is divided
/// by the number of input elements it covers.
pub fn avg_pool(
    x: &Tensor,
    window_shape: &[usize],
    strides: Option<&[usize]>,
    padding: &Padding,
    count_include_pad: bool,
) -> Result<Tensor> {
    let (w, out, batch) = windows("avg_pool", x, window_shape, strides, padding, 0.0)?;
    let sums = w.sum(&[2], false)?;
    let y = if count_include_pad {
        // XLA divides by a constant as a multiply by its f32 reciprocal
        // (measured).
        let size: usize = window_shape.iter().product();
        sums.mul(&Tensor::scalar(1.0 / size as f32))?
    } else {
        // The same windows over ones count the real elements.
        let ones = Tensor::ones(
            &x.shape()[..x.ndim() - 1]
                .iter()
                .copied()
                .chain([1])
                .collect::<Vec<_>>(),
        );
        let (cw, _, _) = windows("avg_pool", &ones, window_shape, strides, padding, 0.0)?;
        // XLA divides by a divisor broadcast over the channels as a
        // multiply by its reciprocal (measured; a general fact of XLA's
        // division by a broadcast operand).
        let counts = cw.sum(&[2], false)?;
        sums.mul(&Tensor::ones(counts.shape()).div(&counts)?)?
    };
    finish(y, &batch, &out)
}
