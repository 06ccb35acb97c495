//! `Dense`: a fully connected layer (`flax.linen.Dense`).

use crate::core::{Result, Scope};
use crate::init::{self, Initializer};
use crate::tensor::Tensor;

use super::module::{config_error, Module};

/// `y = x @ kernel + bias` over the last axis of `x` (Flax's `nn.Dense`).
/// Creates `kernel` (shape `(in, features)`, default `lecun_normal`) and
/// then `bias` (shape `(features,)`, default zeros), in that order, so the
/// kernel takes `make_rng("params")` count 1 and the bias count 2.
///
/// ```
/// use flaxen::nn::{Dense, Module};
/// use flaxen::{init, random, tensor::Tensor};
///
/// let layer = Dense::new(3).kernel_init(init::ones()).use_bias(false);
/// let v = layer.init(random::key(0), Tensor::ones(&[1, 2]))?;
/// assert_eq!(v.tensor("params/kernel").unwrap().shape(), &[2, 3]);
/// assert!(v.tensor("params/bias").is_none());
/// # Ok::<(), flaxen::core::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Dense {
    /// Output features.
    pub features: usize,
    /// Whether to add a bias (default true).
    pub use_bias: bool,
    /// Kernel initializer (default `lecun_normal`).
    pub kernel_init: Initializer,
    /// Bias initializer (default zeros).
    pub bias_init: Initializer,
}

impl Dense {
    /// A dense layer with `features` outputs and Flax's defaults.
    pub fn new(features: usize) -> Dense {
        Dense {
            features,
            use_bias: true,
            kernel_init: init::lecun_normal(),
            bias_init: init::zeros(),
        }
    }

    /// Sets `use_bias`.
    pub fn use_bias(mut self, use_bias: bool) -> Dense {
        self.use_bias = use_bias;
        self
    }

    /// Sets the kernel initializer (an [`Initializer`], or a sampler such
    /// as `random::normal` through [`Initializer::from_fn`]).
    pub fn kernel_init(mut self, init: Initializer) -> Dense {
        self.kernel_init = init;
        self
    }

    /// Sets the bias initializer.
    pub fn bias_init(mut self, init: Initializer) -> Dense {
        self.bias_init = init;
        self
    }
}

impl Module for Dense {
    type Input = Tensor;
    type Output = Tensor;

    fn tabulate_input(&self, x: &Tensor) -> String {
        super::Shapes::shapes(x)
    }

    fn tabulate_output(&self, y: &Tensor) -> String {
        super::Shapes::shapes(y)
    }

    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        let Some(&in_features) = x.shape().last() else {
            return Err(config_error(
                s,
                "Dense needs an input with at least one axis, got a scalar".to_string(),
            ));
        };
        let kernel = s.param("kernel", &self.kernel_init, &[in_features, self.features])?;
        // Contract the last axis of x with the first of the kernel (one
        // recorded product for a vector or a matrix).
        if x.ndim() <= 2 {
            let y = x.matmul(&kernel)?;
            return self.add_bias(s, y);
        }
        let lead: Vec<usize> = x.shape()[..x.ndim() - 1].to_vec();
        let rows: usize = lead.iter().product();
        let y = x
            .reshape(&[rows as isize, in_features as isize])?
            .matmul(&kernel)?;
        let mut out_shape: Vec<isize> = lead.iter().map(|&d| d as isize).collect();
        out_shape.push(self.features as isize);
        let y = y.reshape(&out_shape)?;
        self.add_bias(s, y)
    }
}

impl Dense {
    /// `y + bias` when `use_bias`.
    fn add_bias(&self, s: &Scope<'_>, y: Tensor) -> Result<Tensor> {
        if self.use_bias {
            let bias = s.param("bias", &self.bias_init, &[self.features])?;
            Ok(y.add(&bias)?)
        } else {
            Ok(y)
        }
    }
}
