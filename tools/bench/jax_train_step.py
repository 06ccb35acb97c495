"""The work of benches/autodiff.rs (`train_step` group), timed in JAX (jit,
CPU), for a side-by-side ratio. Run on the same machine in the same session
as `cargo bench --bench autodiff`:

    .venv-oracle/bin/python tools/bench/jax_train_step.py

Each step is `jax.jit(jax.value_and_grad(mse))(params, x, y)` for a ReLU MLP
with an MSE loss, results blocked on. Calls are timed in batches of about
10 ms after compilation (like criterion's samples); the script prints the
median and the best batch's time per call. On a shared machine the best is
the steadier figure; `tools/bench/criterion_best.py` prints the same two
figures for the Rust side. Pinned like the oracle: jax==0.10.2,
jaxlib==0.10.2, flax==0.12.8.
"""

import glob
import time

import numpy as np

import jax
import jax.numpy as jnp

CASES = [
    ("mlp_784_512_512_10_b128", [784, 512, 512, 10], 128),
    ("mlp_2_3_2_b8", [2, 3, 2], 8),
]


def mlp_params(sizes, rng):
    params = {}
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        scale = 1.0 / np.sqrt(fan_in)
        params[f"Dense_{i}"] = {
            "kernel": jnp.asarray(rng.uniform(-scale, scale, (fan_in, fan_out)), jnp.float32),
            "bias": jnp.asarray(rng.uniform(-0.1, 0.1, (fan_out,)), jnp.float32),
        }
    return params


def mse(params, x, y):
    h = x
    n = len(params)
    for i in range(n):
        h = h @ params[f"Dense_{i}"]["kernel"] + params[f"Dense_{i}"]["bias"]
        if i + 1 < n:
            h = jax.nn.relu(h)
    return jnp.mean((h - y) ** 2)


def batch_times(f, min_seconds=3.0, batch_seconds=0.01):
    """Per-call times, each the mean of a batch of calls lasting about
    `batch_seconds` (like a criterion sample), for at least `min_seconds`."""
    jax.block_until_ready(f())  # compile and warm up
    t = time.perf_counter()
    calls = 0
    while time.perf_counter() - t < batch_seconds:
        jax.block_until_ready(f())
        calls += 1
    times = []
    start = time.perf_counter()
    while time.perf_counter() - start < min_seconds or len(times) < 20:
        t = time.perf_counter()
        for _ in range(calls):
            jax.block_until_ready(f())
        times.append((time.perf_counter() - t) / calls)
    return times


def cpu_seconds():
    """The CPU time of all the process's threads so far, in seconds (Linux:
    the on-CPU nanoseconds of /proc/self/task/*/schedstat; 0 elsewhere), as
    benches/common/mod.rs's `cpu_seconds` reads it."""
    total = 0
    for path in glob.glob("/proc/self/task/*/schedstat"):
        try:
            with open(path) as f:
                total += int(f.read().split()[0])
        except OSError:
            pass  # a thread that ended meanwhile
    return total * 1e-9


def fmt(t):
    return f"{t * 1e6:.2f} µs" if t < 1e-3 else f"{t * 1e3:.3f} ms"


def main():
    print(f"jax {jax.__version__} on {jax.devices()}")
    rng = np.random.default_rng(0)
    step = jax.jit(jax.value_and_grad(mse))
    for name, sizes, batch in CASES:
        params = mlp_params(sizes, rng)
        x = jnp.asarray(rng.uniform(-1, 1, (batch, sizes[0])), jnp.float32)
        y = jnp.asarray(rng.uniform(-1, 1, (batch, sizes[-1])), jnp.float32)
        times = batch_times(lambda: step(params, x, y))
        print(f"train_step/{name}: median {fmt(float(np.median(times)))}, best {fmt(min(times))}")


if __name__ == "__main__":
    main()
