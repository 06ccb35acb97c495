"""The work of benches/random.rs, timed in JAX (jit, CPU), for a side-by-side
ratio. Run on the same machine in the same session as `cargo bench --bench random`:

    .venv-oracle/bin/python tools/bench/jax_random.py

For one core, pin both sides to it: `taskset -c 0` here, and
`RAYON_NUM_THREADS=1 taskset -c 0 cargo bench --bench random`.

Prints the best and the median of the timed calls; criterion reports a mean,
which sits between the two when the machine is quiet.

Pinned like the oracle: jax==0.10.2, jaxlib==0.10.2, flax==0.12.8.
"""

import hashlib
import statistics
import time

import jax
import jax.numpy as jnp
from jax import random

N = 1 << 24


def timings(f, repeats=20):
    f()  # compile and warm up
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return min(times), statistics.median(times)


def best_of(f, repeats=10):
    return timings(f, repeats)[0]


def main():
    print(f"jax {jax.__version__} on {jax.devices()}")
    key = random.key(0)
    cases = {
        "bits": jax.jit(lambda k: random.bits(k, (N,), jnp.uint32)),
        "normal": jax.jit(lambda k: random.normal(k, (N,))),
        "truncated_normal": jax.jit(lambda k: random.truncated_normal(k, -2.0, 2.0, (N,))),
        "uniform": jax.jit(lambda k: random.uniform(k, (N,))),
    }
    for name, f in cases.items():
        best, median = timings(lambda: f(key).block_until_ready())
        print(
            f"{name:18s} best {best * 1e3:8.2f} ms {N / best / 1e6:7.1f} M/s"
            f"   median {median * 1e3:8.2f} ms {N / median / 1e6:7.1f} M/s"
        )

    def derive():
        m = hashlib.sha1()
        m.update(b"Dense_0")
        m.update((1).to_bytes(1, "big"))
        h = int.from_bytes(m.digest()[:4], "big")
        return random.fold_in(key, jnp.uint32(h)).block_until_ready()

    t = best_of(derive, repeats=200)
    print(f"{'hash + fold_in':18s} {t * 1e6:9.2f} us (eager)")
    fold = jax.jit(lambda k, d: random.fold_in(k, d))
    t = best_of(lambda: fold(key, jnp.uint32(7)).block_until_ready(), repeats=200)
    print(f"{'fold_in (jit)':18s} {t * 1e6:9.2f} us")


if __name__ == "__main__":
    main()
