//! Parameter initializers, as `jax.nn.initializers`.
