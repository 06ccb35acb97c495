"""The matrix products of the 784-512-512-10 training step (batch 128),
each jitted on its own in JAX (CPU), for benches/matmul_products.rs:

    .venv-oracle/bin/python tools/bench/jax_matmul_products.py

`a.T @ b` and `a @ b.T` take the transposed operand as stored by the step
(XLA folds the transpose into the dot, as in the step's backward pass).
Timed as tools/bench/jax_train_step.py times steps (median and best of
~10 ms batches).
"""

import numpy as np

import jax
import jax.numpy as jnp

from jax_train_step import batch_times, fmt

PRODUCTS = [
    ("fwd1 x@W1", (128, 784, 512), "plain"),
    ("fwd2 h1@W2", (128, 512, 512), "plain"),
    ("fwd3 h2@W3", (128, 512, 10), "plain"),
    ("bwd3 g3@W3^T", (128, 10, 512), "right_t"),
    ("bwd3 h2^T@g3", (512, 128, 10), "left_t"),
    ("bwd2 g2@W2^T", (128, 512, 512), "right_t"),
    ("bwd2 h1^T@g2", (512, 128, 512), "left_t"),
    ("bwd1 x^T@g1", (784, 128, 512), "left_t"),
]


def main():
    print(f"jax {jax.__version__} on {jax.devices()}")
    rng = np.random.default_rng(0)
    for name, (m, k, n), form in PRODUCTS:
        u = lambda *s: jnp.asarray(rng.uniform(-1, 1, s), jnp.float32)
        if form == "plain":
            a, b, f = u(m, k), u(k, n), jax.jit(lambda a, b: a @ b)
        elif form == "left_t":
            a, b, f = u(k, m), u(k, n), jax.jit(lambda a, b: a.T @ b)
        else:
            a, b, f = u(m, k), u(n, k), jax.jit(lambda a, b: a @ b.T)
        times = batch_times(lambda: f(a, b))
        print(
            f"product/{name} {m}x{k}x{n} jax: median {fmt(float(np.median(times)))}, "
            f"best {fmt(min(times))}"
        )


if __name__ == "__main__":
    main()
