//! `DenseGeneral` (`flax.linen.DenseGeneral`).

use crate::core::{Result, Scope};
use crate::init::{self, Initializer};
use crate::tensor::Tensor;

use super::module::{config_error, Module};

/// A dense layer over several input axes and to several output axes
/// (Flax's `nn.DenseGeneral`): `kernel` of shape `[input axes…,
/// features…]`, `bias` of shape `[features…]`. The initializers see the
/// flattened shapes `(∏ input axes, ∏ features)` and `(∏ features,)`, as
/// in Flax, so fans are those of the equivalent `Dense`.
///
/// ```
/// use flaxen::nn::{DenseGeneral, Module};
/// use flaxen::{random, tensor::Tensor};
///
/// // Project [batch, len, 16] to 4 heads of 8.
/// let proj = DenseGeneral::new(&[4, 8]);
/// let x = Tensor::ones(&[2, 5, 16]);
/// let v = proj.init(random::key(0), x.clone())?;
/// assert_eq!(v.tensor("params/kernel").unwrap().shape(), &[16, 4, 8]);
/// assert_eq!(proj.apply(&v, x, ())?.shape(), &[2, 5, 4, 8]);
/// # Ok::<(), flaxen::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct DenseGeneral {
    /// Output feature shape.
    pub features: Vec<usize>,
    /// Input axes contracted (default `[-1]`).
    pub axis: Vec<isize>,
    /// Whether to add a bias (default true).
    pub use_bias: bool,
    /// Kernel initializer (default `lecun_normal`).
    pub kernel_init: Initializer,
    /// Bias initializer (default zeros).
    pub bias_init: Initializer,
}

impl DenseGeneral {
    /// Output features `features` over the last input axis.
    pub fn new(features: &[usize]) -> DenseGeneral {
        DenseGeneral {
            features: features.to_vec(),
            axis: vec![-1],
            use_bias: true,
            kernel_init: init::lecun_normal(),
            bias_init: init::zeros(),
        }
    }

    /// Sets the contracted input axes.
    pub fn axis(mut self, axis: &[isize]) -> DenseGeneral {
        self.axis = axis.to_vec();
        self
    }

    /// Sets `use_bias`.
    pub fn use_bias(mut self, on: bool) -> DenseGeneral {
        self.use_bias = on;
        self
    }

    /// Sets the kernel initializer.
    pub fn kernel_init(mut self, init: Initializer) -> DenseGeneral {
        self.kernel_init = init;
        self
    }

    /// Sets the bias initializer.
    pub fn bias_init(mut self, init: Initializer) -> DenseGeneral {
        self.bias_init = init;
        self
    }
}

impl Module for DenseGeneral {
    type Input = Tensor;
    type Output = Tensor;

    fn tabulate_input(&self, x: &Tensor) -> String {
        super::Shapes::shapes(x)
    }

    fn tabulate_output(&self, y: &Tensor) -> String {
        super::Shapes::shapes(y)
    }

    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let nd = x.ndim();
        let mut axes = Vec::with_capacity(self.axis.len());
        for &a in &self.axis {
            let n = nd as isize;
            if !(-n..n).contains(&a) {
                return Err(config_error(
                    s,
                    format!(
                        "DenseGeneral axis {a} is out of range for an input of shape {:?}",
                        x.shape()
                    ),
                ));
            }
            let a = a.rem_euclid(n) as usize;
            if axes.contains(&a) {
                return Err(config_error(
                    s,
                    format!("DenseGeneral axis {:?} repeats an axis", self.axis),
                ));
            }
            axes.push(a);
        }
        let contracted: Vec<usize> = axes.iter().map(|&a| x.shape()[a]).collect();
        let k: usize = contracted.iter().product();
        let f: usize = self.features.iter().product();
        let mut kernel_shape = contracted.clone();
        kernel_shape.extend(&self.features);
        let flat_init = self.kernel_init.clone();
        let kernel_init = Initializer::from_fn("dense_general_kernel", move |key, shape| {
            let flat = flat_init.init(key, &[k, f])?;
            Ok(flat
                .into_shape_with_order(ndarray::IxDyn(shape))
                .expect("same element count"))
        });
        let kernel = s.param("kernel", &kernel_init, &kernel_shape)?;
        let bias = if self.use_bias {
            let flat_init = self.bias_init.clone();
            let bias_init = Initializer::from_fn("dense_general_bias", move |key, shape| {
                let flat = flat_init.init(key, &[f])?;
                Ok(flat
                    .into_shape_with_order(ndarray::IxDyn(shape))
                    .expect("same element count"))
            });
            Some(s.param("bias", &bias_init, &self.features)?)
        } else {
            None
        };
        // The batch axes in order, then the contracted ones in `axis`'s order.
        let batch: Vec<usize> = (0..nd).filter(|a| !axes.contains(a)).collect();
        let perm: Vec<usize> = batch.iter().chain(&axes).copied().collect();
        let moved = if perm.iter().enumerate().all(|(i, &p)| i == p) {
            x
        } else {
            x.permute(&perm)?
        };
        let batch_shape: Vec<usize> = moved.shape()[..batch.len()].to_vec();
        let mut flat_in: Vec<isize> = batch_shape.iter().map(|&d| d as isize).collect();
        flat_in.push(k as isize);
        let y = moved
            .reshape(&flat_in)?
            .matmul(&kernel.reshape(&[k as isize, f as isize])?)?;
        let mut out: Vec<isize> = batch_shape.iter().map(|&d| d as isize).collect();
        out.extend(self.features.iter().map(|&d| d as isize));
        let y = y.reshape(&out)?;
        match bias {
            Some(b) => Ok(y.add(&b)?),
            None => Ok(y),
        }
    }
}
