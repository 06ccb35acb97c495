"""The products of benches/autodiff.rs (`matmul` group: the matrix products
of the 784-512-512-10 training step at batch 128), timed in JAX (jit,
CPU) for a side-by-side ratio. Run on the same machine in the same session
as `cargo bench --bench autodiff -- matmul`:

    .venv-oracle/bin/python tools/bench/jax_matmul.py

Each case is `jax.jit(jnp.matmul)(a, b)` on float32 operands, results
blocked on, timed as tools/bench/jax_train_step.py times (batches of
~10 ms, median and best). Pinned like the oracle: jax==0.10.2,
jaxlib==0.10.2.
"""

import numpy as np

import jax
import jax.numpy as jnp

from jax_train_step import batch_times, fmt

# (m, k, n), as benches/autodiff.rs lists them.
SHAPES = [(128, 784, 512), (128, 512, 512), (784, 128, 512), (128, 512, 784)]


def main():
    print(f"jax {jax.__version__} on {jax.devices()}")
    rng = np.random.default_rng(0)
    matmul = jax.jit(jnp.matmul)
    for m, k, n in SHAPES:
        a = jnp.asarray(rng.uniform(-1, 1, (m, k)), jnp.float32)
        b = jnp.asarray(rng.uniform(-1, 1, (k, n)), jnp.float32)
        times = batch_times(lambda: matmul(a, b))
        print(f"matmul/{m}x{k}x{n}: median {fmt(float(np.median(times)))}, best {fmt(min(times))}")


if __name__ == "__main__":
    main()
