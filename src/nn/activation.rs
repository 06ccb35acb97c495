//! Activation functions, as `flax.linen` re-exports them from `jax.nn`.
//! Each is differentiable; `softmax` and `log_softmax` work over the last
//! axis.

use crate::core::Result;
use crate::tensor::Tensor;

/// `max(x, 0)` (`nn.relu`).
pub fn relu(x: &Tensor) -> Tensor {
    x.relu()
}

/// The GELU, tanh approximation as `jax.nn.gelu`'s default (`nn.gelu`).
pub fn gelu(x: &Tensor) -> Tensor {
    x.gelu()
}

/// `1 / (1 + exp(-x))` (`nn.sigmoid`).
pub fn sigmoid(x: &Tensor) -> Tensor {
    x.sigmoid()
}

/// `tanh(x)` (`nn.tanh`).
pub fn tanh(x: &Tensor) -> Tensor {
    x.tanh()
}

/// Softmax over the last axis (`nn.softmax`).
pub fn softmax(x: &Tensor) -> Result<Tensor> {
    Ok(x.softmax(-1)?)
}

/// Log-softmax over the last axis (`nn.log_softmax`).
pub fn log_softmax(x: &Tensor) -> Result<Tensor> {
    Ok(x.log_softmax(-1)?)
}

/// `jax.nn.silu` (`nn.silu`, also `nn.swish`): `x * sigmoid(x)`.
pub fn silu(x: &Tensor) -> Tensor {
    x.silu()
}

/// `jax.nn.leaky_relu` with JAX's default slope 0.01.
pub fn leaky_relu(x: &Tensor) -> Tensor {
    x.leaky_relu(0.01)
}
