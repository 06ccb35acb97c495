"""The work of benches/conv.rs, timed in JAX (CPU) for a side-by-side
ratio: flax.linen.Conv(32, (3, 3)) (SAME, 16 -> 32 features) on a batch of
32 images of 28x28, forward and value_and_grad of mean(y**2) with respect
to the parameters, both under jax.jit. Run on the same machine in the same
session as `cargo bench --bench conv`:

    .venv-oracle/bin/python tools/bench/jax_conv.py

Calls are timed in batches of about 100 ms after compilation; the script
prints the median and the best batch's time per call. Pinned like the
oracle: jax==0.10.2, jaxlib==0.10.2, flax==0.12.8.
"""

import time

import numpy as np

import flax.linen as nn
import jax
import jax.numpy as jnp


def time_calls(f, *args):
    jax.block_until_ready(f(*args))
    t = time.perf_counter()
    n = 0
    while time.perf_counter() - t < 0.1:
        jax.block_until_ready(f(*args))
        n += 1
    per_batch = max(1, n)
    times = []
    for _ in range(15):
        t = time.perf_counter()
        for _ in range(per_batch):
            jax.block_until_ready(f(*args))
        times.append((time.perf_counter() - t) / per_batch)
    return float(np.median(times)), min(times)


def main():
    x = jax.random.normal(jax.random.key(1), (32, 28, 28, 16))
    layer = nn.Conv(32, (3, 3))
    v = layer.init(jax.random.key(0), x)
    fwd = jax.jit(lambda v, x: layer.apply(v, x))
    grad = jax.jit(jax.value_and_grad(lambda p, x: jnp.mean(layer.apply({"params": p}, x) ** 2)))
    for name, f, args in [("forward", fwd, (v, x)), ("forward_backward", grad, (v["params"], x))]:
        med, best = time_calls(f, *args)
        print(f"{name}: median {med * 1e3:.3f} ms, best {best * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
