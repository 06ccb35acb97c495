"""The work of benches/sharding.rs, timed in JAX (CPU) for a side-by-side
ratio: a 784-512-512-10 ReLU MLP (flax.linen Dense layers) applied to a
batch of 4,096 with `jax.jit(..., in_shardings=(None, data), out_shardings=
data)` on meshes of 1, 2 and 8 virtual CPU devices
(`--xla_force_host_platform_device_count=8`, as the Flax guide). Run on the
same machine in the same session as `cargo bench --bench sharding`:

    .venv-oracle/bin/python tools/bench/jax_sharded_apply.py

Calls are timed in batches of about 100 ms after compilation; the script
prints the median and the best batch's time per call. Pinned like the
oracle: jax==0.10.2, jaxlib==0.10.2, flax==0.12.8.
"""

import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"

import time  # noqa: E402

import numpy as np  # noqa: E402

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402


class Mlp(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Dense(512)(x))
        x = nn.relu(nn.Dense(512)(x))
        return nn.Dense(10)(x)


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
    x = jax.random.normal(jax.random.key(1), (4096, 784))
    model = Mlp()
    variables = model.init(jax.random.key(0), x)
    for n in [1, 2, 8]:
        mesh = Mesh(np.array(jax.devices()[:n]), ("data",))
        data = NamedSharding(mesh, PartitionSpec("data"))
        f = jax.jit(
            lambda v, x: model.apply(v, x),
            in_shardings=(None, data),
            out_shardings=data,
        )
        xs = jax.device_put(x, data)
        median, best = time_calls(f, variables, xs)
        print(f"{n}_devices: median {median * 1e3:.2f} ms, best {best * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
