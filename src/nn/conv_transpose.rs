//! `ConvTranspose` (`flax.linen.ConvTranspose`).

use crate::core::{Result, Scope};
use crate::init::{self, Initializer};
use crate::tensor::{ConvSpec, Tensor};

use super::conv::{flatten_batch, restore_batch, Padding};
use super::module::{config_error, Module};

/// A transposed convolution (Flax's `nn.ConvTranspose`, `lax.conv_transpose`
/// with `transpose_kernel=False`): the input dilated by the strides, then
/// a stride-1 convolution with kernel `[K₁…K_d, in, features]`, padded for
/// SAME (output `input · stride`) or VALID (output `(input - 1) · stride +
/// k`) as `lax`'s `_conv_transpose_padding`, or explicitly.
///
/// ```
/// use flaxen::nn::{ConvTranspose, Module};
/// use flaxen::{random, tensor::Tensor};
///
/// let up = ConvTranspose::new(4, &[3, 3]).strides(&[2]);
/// let x = Tensor::ones(&[1, 5, 5, 2]);
/// let v = up.init(random::key(0), x.clone())?;
/// assert_eq!(up.apply(&v, x, ())?.shape(), &[1, 10, 10, 4]);
/// # Ok::<(), flaxen::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct ConvTranspose {
    /// Output features.
    pub features: usize,
    /// Window size per spatial dimension.
    pub kernel_size: Vec<usize>,
    /// Strides, the input's dilation (one value or one each; default 1).
    pub strides: Vec<usize>,
    /// SAME (default), VALID or explicit.
    pub padding: Padding,
    /// Kernel dilation (default 1).
    pub kernel_dilation: Vec<usize>,
    /// Whether to add a bias (default true).
    pub use_bias: bool,
    /// Kernel initializer (default `lecun_normal`).
    pub kernel_init: Initializer,
    /// Bias initializer (default zeros).
    pub bias_init: Initializer,
}

impl ConvTranspose {
    /// A transposed convolution with `features` outputs and window
    /// `kernel_size`.
    pub fn new(features: usize, kernel_size: &[usize]) -> ConvTranspose {
        ConvTranspose {
            features,
            kernel_size: kernel_size.to_vec(),
            strides: vec![1],
            padding: Padding::Same,
            kernel_dilation: vec![1],
            use_bias: true,
            kernel_init: init::lecun_normal(),
            bias_init: init::zeros(),
        }
    }

    /// Sets the strides.
    pub fn strides(mut self, strides: &[usize]) -> Self {
        self.strides = strides.to_vec();
        self
    }

    /// Sets the padding (SAME, VALID or explicit).
    pub fn padding(mut self, padding: Padding) -> Self {
        self.padding = padding;
        self
    }

    /// Sets the kernel dilation.
    pub fn kernel_dilation(mut self, d: &[usize]) -> Self {
        self.kernel_dilation = d.to_vec();
        self
    }

    /// Sets `use_bias`.
    pub fn use_bias(mut self, on: bool) -> Self {
        self.use_bias = on;
        self
    }
}

fn per_dim(s: &Scope<'_>, what: &str, v: &[usize], d: usize) -> Result<Vec<usize>> {
    let out = match v.len() {
        1 => vec![v[0]; d],
        n if n == d => v.to_vec(),
        n => {
            return Err(config_error(
                s,
                format!("{what} {v:?} has {n} entries for {d} spatial dimensions"),
            ))
        }
    };
    if out.contains(&0) {
        return Err(config_error(s, format!("{what} {v:?} must be positive")));
    }
    Ok(out)
}

impl Module for ConvTranspose {
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
        let dil = per_dim(s, "kernel_dilation", &self.kernel_dilation, d)?;
        let (x, batch) = flatten_batch(s, &x, d)?;
        let c = x.shape()[d + 1];
        let mut kernel_shape = self.kernel_size.clone();
        kernel_shape.extend([c, self.features]);
        let kernel = s.param("kernel", &self.kernel_init, &kernel_shape)?;
        let bias = if self.use_bias {
            Some(s.param("bias", &self.bias_init, &[self.features])?)
        } else {
            None
        };
        // lax._conv_transpose_padding on the dilated kernel sizes.
        let pads: Vec<(usize, usize)> = match &self.padding {
            Padding::Same | Padding::Valid => self
                .kernel_size
                .iter()
                .zip(&dil)
                .zip(&strides)
                .map(|((&k, &r), &st)| {
                    let k = (k - 1) * r + 1;
                    if self.padding == Padding::Same {
                        let len = k + st - 2;
                        let a = if st > k - 1 { k - 1 } else { len.div_ceil(2) };
                        (a, len - a)
                    } else {
                        let len = k + st - 2 + k.saturating_sub(st);
                        (k - 1, len - (k - 1))
                    }
                })
                .collect(),
            Padding::Explicit(p) if p.len() == d => p.clone(),
            Padding::Explicit(p) if p.len() == 1 => vec![p[0]; d],
            other => {
                return Err(config_error(
                    s,
                    format!("ConvTranspose takes SAME, VALID or explicit padding, not {other:?}"),
                ))
            }
        };
        let spec = ConvSpec {
            strides: vec![1; d],
            padding: pads,
            lhs_dilation: strides,
            rhs_dilation: dil,
            feature_group_count: 1,
            circular: false,
        };
        let mut y = x.conv_general_dilated(&kernel, &spec)?;
        if let Some(b) = bias {
            y = y.add(&b)?;
        }
        restore_batch(y, &batch)
    }
}
