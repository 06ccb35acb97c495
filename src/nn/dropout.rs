//! `Dropout` (`flax.linen.Dropout`).

use crate::core::{Result, Scope};
use crate::random::Key;
use crate::tensor::Tensor;

use super::module::{config_error, Module};

/// Zeroes each element with probability `rate` and scales the kept ones by
/// `1 / (1 - rate)` (Flax's `nn.Dropout`).
///
/// As in Flax: with `rate == 0` or `deterministic` the input passes through
/// untouched and no key is drawn; with `rate == 1` the output is zeros; else
/// the keep mask is `bernoulli(make_rng(rng_collection), 1 - rate, shape)`,
/// with the axes in `broadcast_dims` of size 1 (one draw shared along them).
///
/// ```
/// use flaxen::nn::{Dropout, Module};
/// use flaxen::{core::Rngs, random, tensor::Tensor};
///
/// let x = Tensor::ones(&[2, 4]);
/// let drop = Dropout::new(0.5);
/// let y = drop.apply(&Default::default(), x.clone(), Rngs::none().with("dropout", random::key(0)))?;
/// assert!(y.to_vec().iter().all(|&v| v == 0.0 || v == 2.0));
/// // Deterministic: identity, no key needed.
/// let y = drop.deterministic(true).apply(&Default::default(), x.clone(), ())?;
/// assert_eq!(y.to_vec(), x.to_vec());
/// # Ok::<(), flaxen::core::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Dropout {
    /// Probability of dropping an element, in `[0, 1]`.
    pub rate: f64,
    /// When true, the layer is the identity (evaluation mode).
    pub deterministic: bool,
    /// Axes along which the mask is shared.
    pub broadcast_dims: Vec<usize>,
    /// The RNG stream of the mask (default `dropout`).
    pub rng_collection: String,
    /// A key to draw the mask from instead of `make_rng` (Flax's `rng=`
    /// argument of `__call__`).
    pub rng: Option<Key>,
}

impl Dropout {
    /// Dropout with `rate`, in training mode, drawing from `dropout`.
    pub fn new(rate: f64) -> Dropout {
        Dropout {
            rate,
            deterministic: false,
            broadcast_dims: Vec::new(),
            rng_collection: "dropout".to_string(),
            rng: None,
        }
    }

    /// Sets `deterministic` (Flax's `deterministic=not train`).
    pub fn deterministic(mut self, deterministic: bool) -> Dropout {
        self.deterministic = deterministic;
        self
    }

    /// Sets the axes along which one mask value is shared.
    pub fn broadcast_dims(mut self, dims: &[usize]) -> Dropout {
        self.broadcast_dims = dims.to_vec();
        self
    }

    /// Sets the RNG stream of the mask.
    pub fn rng_collection(mut self, name: &str) -> Dropout {
        self.rng_collection = name.to_string();
        self
    }

    /// Draws the mask from `key` instead of the `dropout` stream (Flax's
    /// `Dropout(rate)(x, rng=key)`); no `make_rng` count is used.
    ///
    /// Like `deterministic`, this is set where the module is called: in
    /// compact style the module is made at its call, so
    /// `s.call(Dropout::new(0.5).deterministic(!train).rng(key), x)` is
    /// Flax's `nn.Dropout(0.5)(x, deterministic=not train, rng=key)`.
    pub fn rng(mut self, key: Key) -> Dropout {
        self.rng = Some(key);
        self
    }
}

impl Module for Dropout {
    type Input = Tensor;
    type Output = Tensor;

    fn tabulate_input(&self, x: &Tensor) -> String {
        super::Shapes::shapes(x)
    }

    fn tabulate_output(&self, y: &Tensor) -> String {
        super::Shapes::shapes(y)
    }

    fn call(&self, s: &Scope<'_>, x: Tensor) -> Result<Tensor> {
        if !(0.0..=1.0).contains(&self.rate) {
            return Err(config_error(
                s,
                format!("Dropout rate must be in [0, 1], got {}", self.rate),
            ));
        }
        if let Some(&d) = self.broadcast_dims.iter().find(|&&d| d >= x.ndim()) {
            return Err(config_error(
                s,
                format!(
                    "Dropout broadcast_dims has axis {d}, out of range for input shape {:?}",
                    x.shape()
                ),
            ));
        }
        if self.rate == 0.0 || self.deterministic {
            return Ok(x);
        }
        if self.rate == 1.0 {
            return Ok(Tensor::zeros(x.shape()));
        }
        // As Flax: `1.0 - rate` in double precision, used as an f32.
        let keep_prob = (1.0 - self.rate) as f32;
        // An explicit key is used as it is, consuming no count (Flax's
        // `rng=` argument).
        let rng = match &self.rng {
            Some(key) => key.clone(),
            None => s.make_rng(&self.rng_collection)?,
        };
        let mut mask_shape = x.shape().to_vec();
        for &d in &self.broadcast_dims {
            mask_shape[d] = 1;
        }
        // Drawn as `Tensor::sampled` draws, so that a compiled step with
        // keys draws the mask again on every call (as bytes, being marked
        // a keep mask).
        let mask = Tensor::sampled_keep_mask(&rng, keep_prob, &mask_shape)?;
        // Flax writes `x / keep_prob`. Run eagerly, XLA sees a constant
        // divisor and multiplies by its f32 reciprocal instead; under
        // `jax.grad`, the divisor reaches the kernel as an argument and the
        // division is a true one. Reproduce both, so that values match JAX's
        // inside and outside `grad`.
        // Inside a jitted computation the divisor is a constant again, and
        // XLA multiplies by its reciprocal.
        let scaled = if x.is_traced() && !crate::tensor::in_compiled_region() {
            x.div(&Tensor::scalar(keep_prob))?
        } else {
            x.mul(&Tensor::scalar(1.0 / keep_prob))?
        };
        Ok(Tensor::select(&mask, &scaled, &Tensor::zeros(&[]))?)
    }
}
