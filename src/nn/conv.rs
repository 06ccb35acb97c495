//! `Conv` (`flax.linen.Conv`) and the padding modes Flax's convolutions and
//! pools take.

use crate::core::{Result, Scope};
use crate::init::{self, Initializer};
use crate::tensor::{ConvSpec, Tensor};

use super::module::{config_error, Module};

/// How a convolution or pool pads each spatial dimension (Flax's
/// `padding=`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Padding {
    /// Output size `ceil(input / stride)`, zeros split evenly (the extra
    /// one after), as `lax.padtype_to_pads`.
    Same,
    /// No padding.
    Valid,
    /// The input wraps around (`jnp.pad(mode='wrap')`), by SAME's amounts.
    Circular,
    /// 1-D: `(k - 1) · dilation` zeros before, none after.
    Causal,
    /// `(low, high)` per spatial dimension.
    Explicit(Vec<(usize, usize)>),
}

/// `lax.padtype_to_pads` for SAME: per dimension, `(lo, hi)` with
/// `lo = total / 2`.
pub(crate) fn same_pads(
    input: &[usize],
    window: &[usize],
    strides: &[usize],
) -> Vec<(usize, usize)> {
    input
        .iter()
        .zip(window)
        .zip(strides)
        .map(|((&n, &k), &s)| {
            let out = n.div_ceil(s);
            let total = ((out.max(1) - 1) * s + k).saturating_sub(n);
            let total = if out == 0 { 0 } else { total };
            (total / 2, total - total / 2)
        })
        .collect()
}

/// A value per spatial dimension from a list of one (broadcast) or `d`.
fn per_dim(s: &Scope<'_>, what: &str, v: &[usize], d: usize) -> Result<Vec<usize>> {
    match v.len() {
        1 => Ok(vec![v[0]; d]),
        n if n == d => Ok(v.to_vec()),
        n => Err(config_error(
            s,
            format!("{what} {v:?} has {n} entries for {d} spatial dimensions"),
        )),
    }
}

/// A convolution (Flax's `nn.Conv`) over inputs `[batch…, S₁…S_d, C]`
/// with `d = kernel_size.len()` spatial dimensions: kernel `[K₁…K_d, C /
/// feature_group_count, features]` (default `lecun_normal`), then bias
/// `[features]` (zeros). Inputs without a batch dimension get one for the
/// call; several batch dimensions are flattened and restored.
///
/// ```
/// use flaxen::nn::{Conv, Module, Padding};
/// use flaxen::{random, tensor::Tensor};
///
/// let conv = Conv::new(8, &[3, 3]).strides(&[2]).padding(Padding::Same);
/// let x = Tensor::ones(&[2, 8, 8, 1]);
/// let v = conv.init(random::key(0), x.clone())?;
/// assert_eq!(v.tensor("params/kernel").unwrap().shape(), &[3, 3, 1, 8]);
/// assert_eq!(conv.apply(&v, x, ())?.shape(), &[2, 4, 4, 8]);
/// # Ok::<(), flaxen::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Conv {
    /// Output features.
    pub features: usize,
    /// Window size per spatial dimension.
    pub kernel_size: Vec<usize>,
    /// Strides (one value for all dimensions, or one each; default 1).
    pub strides: Vec<usize>,
    /// Padding (default SAME).
    pub padding: Padding,
    /// Input dilation (default 1).
    pub input_dilation: Vec<usize>,
    /// Kernel dilation (default 1).
    pub kernel_dilation: Vec<usize>,
    /// Feature groups (default 1).
    pub feature_group_count: usize,
    /// Whether to add a bias (default true).
    pub use_bias: bool,
    /// Kernel initializer (default `lecun_normal`).
    pub kernel_init: Initializer,
    /// Bias initializer (default zeros).
    pub bias_init: Initializer,
}

impl Conv {
    /// A convolution with `features` outputs and window `kernel_size`,
    /// Flax's defaults otherwise.
    pub fn new(features: usize, kernel_size: &[usize]) -> Conv {
        Conv {
            features,
            kernel_size: kernel_size.to_vec(),
            strides: vec![1],
            padding: Padding::Same,
            input_dilation: vec![1],
            kernel_dilation: vec![1],
            feature_group_count: 1,
            use_bias: true,
            kernel_init: init::lecun_normal(),
            bias_init: init::zeros(),
        }
    }

    /// Sets the strides (one value, or one per dimension).
    pub fn strides(mut self, strides: &[usize]) -> Conv {
        self.strides = strides.to_vec();
        self
    }

    /// Sets the padding.
    pub fn padding(mut self, padding: Padding) -> Conv {
        self.padding = padding;
        self
    }

    /// Sets the input dilation.
    pub fn input_dilation(mut self, d: &[usize]) -> Conv {
        self.input_dilation = d.to_vec();
        self
    }

    /// Sets the kernel dilation.
    pub fn kernel_dilation(mut self, d: &[usize]) -> Conv {
        self.kernel_dilation = d.to_vec();
        self
    }

    /// Sets the feature groups.
    pub fn feature_group_count(mut self, g: usize) -> Conv {
        self.feature_group_count = g;
        self
    }

    /// Sets `use_bias`.
    pub fn use_bias(mut self, on: bool) -> Conv {
        self.use_bias = on;
        self
    }

    /// Sets the kernel initializer.
    pub fn kernel_init(mut self, init: Initializer) -> Conv {
        self.kernel_init = init;
        self
    }
}

/// The `ConvSpec` of a padding mode for inputs of spatial shape `spatial`.
pub(crate) fn spec_for(
    s: &Scope<'_>,
    padding: &Padding,
    spatial: &[usize],
    window: &[usize],
    strides: Vec<usize>,
    lhs_dilation: Vec<usize>,
    rhs_dilation: Vec<usize>,
) -> Result<ConvSpec> {
    let d = spatial.len();
    let eff: Vec<usize> = window
        .iter()
        .zip(&rhs_dilation)
        .map(|(&k, &r)| if k == 0 { 0 } else { (k - 1) * r + 1 })
        .collect();
    let (pads, circular) = match padding {
        Padding::Valid => (vec![(0, 0); d], false),
        Padding::Same => (same_pads(spatial, &eff, &strides), false),
        Padding::Circular => {
            let pads = eff.iter().map(|&k| ((k.max(1) - 1) / 2, k / 2)).collect();
            (pads, true)
        }
        Padding::Causal => {
            if d != 1 {
                return Err(config_error(
                    s,
                    format!("causal padding is for one spatial dimension, not {d}"),
                ));
            }
            (vec![(eff[0].saturating_sub(1), 0)], false)
        }
        Padding::Explicit(p) => {
            let p = match p.len() {
                1 => vec![p[0]; d],
                n if n == d => p.clone(),
                n => {
                    return Err(config_error(
                        s,
                        format!("padding {p:?} has {n} pairs for {d} spatial dimensions"),
                    ))
                }
            };
            for (i, &(lo, hi)) in p.iter().enumerate() {
                let n = spatial[i];
                if lo > n.max(eff[i]) || hi > n.max(eff[i]) {
                    return Err(config_error(
                        s,
                        format!(
                            "padding ({lo}, {hi}) of spatial dimension {i} is larger than \
                             both the input ({n}) and the window ({})",
                            eff[i]
                        ),
                    ));
                }
            }
            (p, false)
        }
    };
    Ok(ConvSpec {
        strides,
        padding: pads,
        lhs_dilation,
        rhs_dilation,
        feature_group_count: 1,
        circular,
    })
}

/// Flattens the batch dimensions of `x` (`[batch…, S…, C]` with `d`
/// spatial dimensions) to one; returns the input's batch shape.
pub(crate) fn flatten_batch(s: &Scope<'_>, x: &Tensor, d: usize) -> Result<(Tensor, Vec<usize>)> {
    if x.ndim() < d + 1 {
        return Err(config_error(
            s,
            format!(
                "an input of shape {:?} has no room for {d} spatial dimensions and features",
                x.shape()
            ),
        ));
    }
    let batch = x.shape()[..x.ndim() - d - 1].to_vec();
    let mut flat: Vec<isize> = vec![batch.iter().product::<usize>() as isize];
    flat.extend(x.shape()[x.ndim() - d - 1..].iter().map(|&v| v as isize));
    Ok((x.reshape(&flat)?, batch))
}

/// Restores the batch dimensions flattened by [`flatten_batch`].
pub(crate) fn restore_batch(y: Tensor, batch: &[usize]) -> Result<Tensor> {
    let mut shape: Vec<isize> = batch.iter().map(|&b| b as isize).collect();
    shape.extend(y.shape()[1..].iter().map(|&v| v as isize));
    Ok(y.reshape(&shape)?)
}

impl Module for Conv {
    type Input = Tensor;
    type Output = Tensor;

    fn tabulate_input(&self, x: &Tensor) -> String {
        super::Shapes::shapes(x)
    }

    fn tabulate_output(&self, y: &Tensor) -> String {
        super::Shapes::shapes(y)
    }

    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let d = self.kernel_size.len();
        if d == 0 || self.kernel_size.contains(&0) {
            return Err(config_error(
                s,
                format!("kernel_size {:?} must be positive sizes", self.kernel_size),
            ));
        }
        let strides = per_dim(s, "strides", &self.strides, d)?;
        let lhs = per_dim(s, "input_dilation", &self.input_dilation, d)?;
        let rhs = per_dim(s, "kernel_dilation", &self.kernel_dilation, d)?;
        for (what, v) in [
            ("strides", &strides),
            ("input_dilation", &lhs),
            ("kernel_dilation", &rhs),
        ] {
            if v.contains(&0) {
                return Err(config_error(s, format!("{what} {v:?} must be positive")));
            }
        }
        let (x, batch) = flatten_batch(s, &x, d)?;
        let c = x.shape()[d + 1];
        let g = self.feature_group_count;
        if g == 0 || c % g != 0 || !self.features.is_multiple_of(g) {
            return Err(config_error(
                s,
                format!(
                    "feature_group_count {g} must divide the input features ({c}) and the \
                     output features ({})",
                    self.features
                ),
            ));
        }
        let mut kernel_shape = self.kernel_size.clone();
        kernel_shape.extend([c / g, self.features]);
        let kernel = s.param("kernel", &self.kernel_init, &kernel_shape)?;
        let bias = if self.use_bias {
            Some(s.param("bias", &self.bias_init, &[self.features])?)
        } else {
            None
        };
        let spatial = x.shape()[1..=d].to_vec();
        let mut spec = spec_for(
            s,
            &self.padding,
            &spatial,
            &self.kernel_size,
            strides,
            lhs,
            rhs,
        )?;
        spec.feature_group_count = g;
        let mut y = x.conv_general_dilated(&kernel, &spec)?;
        if let Some(b) = bias {
            y = y.add_consuming(&b)?;
        }
        restore_batch(y, &batch)
    }
}
