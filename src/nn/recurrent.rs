//! `LSTMCell` and `GRUCell` (`flax.linen.recurrent`).

use crate::core::{Result, Scope};
use crate::init::{self, Initializer};
use crate::random::{self, Key};
use crate::tensor::{in_compiled_region, Tensor};

use super::dense::Dense;
use super::module::{config_error, Module};

/// The carry's shape for inputs of `input_shape`: the batch dimensions and
/// `features`.
fn carry_shape(input_shape: &[usize], features: usize) -> Vec<usize> {
    let mut shape = input_shape[..input_shape.len().saturating_sub(1)].to_vec();
    shape.push(features);
    shape
}

fn check_carry(
    s: &Scope<'_>,
    what: &str,
    carry: &Tensor,
    x: &Tensor,
    features: usize,
) -> Result<()> {
    let want = carry_shape(x.shape(), features);
    if x.ndim() == 0 || carry.shape() != want.as_slice() {
        return Err(config_error(
            s,
            format!(
                "{what} of shape {:?} does not fit inputs of shape {:?} and {features} features \
                 (expected {want:?})",
                carry.shape(),
                x.shape()
            ),
        ));
    }
    Ok(())
}

/// A long short-term memory cell (Flax's `nn.LSTMCell`): the carry is
/// `(c, h)`, and
///
/// ```text
/// i = σ(x W_ii + h W_hi + b_hi)    f = σ(x W_if + h W_hf + b_hf)
/// g = tanh(x W_ig + h W_hg + b_hg) o = σ(x W_io + h W_ho + b_ho)
/// c' = f c + i g                   h' = o tanh(c')
/// ```
///
/// with the `Dense` submodules `ii, hi, if, hf, ig, hg, io, ho` (input
/// kernels `lecun_normal` without bias, recurrent kernels `orthogonal`
/// with bias), created in that order as in Flax.
///
/// ```
/// use flaxen::nn::{LSTMCell, Module};
/// use flaxen::{random, tensor::Tensor};
///
/// let cell = LSTMCell::new(4);
/// let x = Tensor::ones(&[2, 3]);
/// let carry = cell.initialize_carry(random::key(1), x.shape())?;
/// let v = cell.init(random::key(2), (carry.clone(), x.clone()))?;
/// let ((c, h), out) = cell.apply(&v, (carry, x), ())?;
/// assert_eq!((c.shape(), h.shape(), out.shape()), (&[2, 4][..], &[2, 4][..], &[2, 4][..]));
/// # Ok::<(), flaxen::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct LSTMCell {
    /// Hidden features.
    pub features: usize,
    /// Input kernels' initializer (default `lecun_normal`).
    pub kernel_init: Initializer,
    /// Recurrent kernels' initializer (default `orthogonal`).
    pub recurrent_kernel_init: Initializer,
    /// Biases' initializer (default zeros).
    pub bias_init: Initializer,
}

impl LSTMCell {
    /// A cell with `features` hidden features and Flax's defaults.
    pub fn new(features: usize) -> LSTMCell {
        LSTMCell {
            features,
            kernel_init: init::lecun_normal(),
            recurrent_kernel_init: init::orthogonal(1.0),
            bias_init: init::zeros(),
        }
    }

    /// `cell.initialize_carry(rng, input_shape)`: zeros `(c, h)` of shape
    /// `batch dims + (features,)` (the key is split as Flax splits it; the
    /// default carry initializer does not use it).
    pub fn initialize_carry(&self, key: Key, input_shape: &[usize]) -> Result<(Tensor, Tensor)> {
        random::split(key, 2)?;
        let shape = carry_shape(input_shape, self.features);
        Ok((Tensor::try_zeros(&shape)?, Tensor::try_zeros(&shape)?))
    }
}

impl Module for LSTMCell {
    type Input = ((Tensor, Tensor), Tensor);
    type Output = ((Tensor, Tensor), Tensor);

    fn call(&self, s: &Scope<'_>, ((c, h), x): Self::Input) -> Result<Self::Output> {
        check_carry(s, "LSTMCell carry c", &c, &x, self.features)?;
        check_carry(s, "LSTMCell carry h", &h, &x, self.features)?;
        let n = h.shape()[h.ndim() - 1];
        let dense_i = || {
            Dense::new(n)
                .use_bias(false)
                .kernel_init(self.kernel_init.clone())
        };
        let dense_h = || {
            Dense::new(n)
                .kernel_init(self.recurrent_kernel_init.clone())
                .bias_init(self.bias_init.clone())
        };
        let gate = |xi: &str, hi: &str| -> Result<Tensor> {
            let a = s.call_named(xi, dense_i(), x.clone())?;
            let b = s.call_named(hi, dense_h(), h.clone())?;
            Ok(a.add(&b)?)
        };
        let i = gate("ii", "hi")?.sigmoid();
        let f = gate("if", "hf")?.sigmoid();
        let g = gate("ig", "hg")?.tanh();
        let o = gate("io", "ho")?.sigmoid();
        if in_compiled_region() {
            // Inside `nn.RNN`'s scan body (or jitted), XLA contracts one of
            // the two products of `f * c + i * g` into the sum, and its
            // backward body adds the cotangents of the new state in an
            // order of its own: one operation (see `Tensor::lstm_step`).
            let rows = c.size() / n.max(1);
            let state = Tensor::lstm_step(&c, &i, &f, &g, &o, lstm_fc_fused(rows, n))?;
            let part = |k| state.index_axis(0, k);
            return Ok(((part(0)?, part(1)?), part(2)?));
        }
        let new_c = f.mul(&c)?.add(&i.mul(&g)?)?;
        let new_h = o.mul(&new_c.tanh())?;
        Ok(((new_c, new_h.clone()), new_h))
    }
}

/// How many elements (row-major) of `f * c + i * g` XLA computes as
/// `fma(f, c, fl(i * g))` in the compiled body of an LSTM step over `rows`
/// rows of `features`; the rest contract `i * g` instead. Measured with a
/// helper's probe (jaxlib 0.10.2, AVX-512): with at least two rows of at
/// least two features the loop over rows contracts `f * c` everywhere;
/// with one row or one feature, elements the compiled code vectorizes do
/// so and the scalar leftovers contract `i * g` instead (all `n` elements
/// below 16, the last `n % 4` below 32, the last `n % 8` from there). Not
/// modelled: loops XLA hoists into one kernel when their traffic is tiny
/// (one row of up to three features, two rows of one or two), where it
/// picks otherwise.
fn lstm_fc_fused(rows: usize, features: usize) -> usize {
    let n = rows * features;
    let scalar_tail = if rows >= 2 && features >= 2 {
        0
    } else if n < 16 {
        n
    } else if n < 32 {
        n % 4
    } else {
        n % 8
    };
    n - scalar_tail
}

/// A gated recurrent unit (Flax's `nn.GRUCell`): the carry is `h`, and
///
/// ```text
/// r = σ(x W_ir + b_ir + h W_hr)    z = σ(x W_iz + b_iz + h W_hz)
/// n = tanh(x W_in + b_in + r (h W_hn + b_hn))
/// h' = (1 - z) n + z h
/// ```
///
/// with the `Dense` submodules `ir, hr, iz, hz, in, hn` (input kernels
/// `lecun_normal` with bias, recurrent kernels `orthogonal` without, except
/// `hn`).
#[derive(Clone, Debug)]
pub struct GRUCell {
    /// Hidden features.
    pub features: usize,
    /// Input kernels' initializer (default `lecun_normal`).
    pub kernel_init: Initializer,
    /// Recurrent kernels' initializer (default `orthogonal`).
    pub recurrent_kernel_init: Initializer,
    /// Biases' initializer (default zeros).
    pub bias_init: Initializer,
}

impl GRUCell {
    /// A cell with `features` hidden features and Flax's defaults.
    pub fn new(features: usize) -> GRUCell {
        GRUCell {
            features,
            kernel_init: init::lecun_normal(),
            recurrent_kernel_init: init::orthogonal(1.0),
            bias_init: init::zeros(),
        }
    }

    /// `cell.initialize_carry(rng, input_shape)`: zeros of shape
    /// `batch dims + (features,)`.
    pub fn initialize_carry(&self, _key: Key, input_shape: &[usize]) -> Result<Tensor> {
        Ok(Tensor::try_zeros(&carry_shape(input_shape, self.features))?)
    }
}

impl Module for GRUCell {
    type Input = (Tensor, Tensor);
    type Output = (Tensor, Tensor);

    fn call(&self, s: &Scope<'_>, (h, x): Self::Input) -> Result<Self::Output> {
        check_carry(s, "GRUCell carry", &h, &x, self.features)?;
        let n = h.shape()[h.ndim() - 1];
        let dense_i = || {
            Dense::new(n)
                .kernel_init(self.kernel_init.clone())
                .bias_init(self.bias_init.clone())
        };
        let dense_h = |bias: bool| {
            Dense::new(n)
                .use_bias(bias)
                .kernel_init(self.recurrent_kernel_init.clone())
                .bias_init(self.bias_init.clone())
        };
        let r = s
            .call_named("ir", dense_i(), x.clone())?
            .add(&s.call_named("hr", dense_h(false), h.clone())?)?
            .sigmoid();
        let z = s
            .call_named("iz", dense_i(), x.clone())?
            .add(&s.call_named("hz", dense_h(false), h.clone())?)?
            .sigmoid();
        // `in` before `hn`, as Python evaluates `in(x) + r * hn(h)`.
        let xin = s.call_named("in", dense_i(), x)?;
        let hn = s.call_named("hn", dense_h(true), h.clone())?;
        if in_compiled_region() {
            // Inside `nn.RNN`'s scan body (or jitted), XLA contracts
            // `r * hn` into its sum with `xin` (times one: exact), and
            // `(1 - z) * n` into its sum with `z * h`; its backward body
            // adds the cotangents in an order of its own (see
            // `Tensor::gru_step`).
            let ones = Tensor::ones(xin.shape());
            let n_gate = Tensor::fused_products_sum(&r, &hn, &xin, &ones, |_| true)?.tanh();
            let state = Tensor::gru_step(&h, &z, &n_gate)?;
            return Ok((state.index_axis(0, 0)?, state.index_axis(0, 1)?));
        }
        let one_minus_z = Tensor::scalar(1.0).sub(&z)?;
        let n_gate = xin.add(&r.mul(&hn)?)?.tanh();
        let new_h = one_minus_z.mul(&n_gate)?.add(&z.mul(&h)?)?;
        Ok((new_h.clone(), new_h))
    }
}
