"""The work of benches/nn_jit.rs, timed in JAX (CPU), for a side-by-side
ratio. Run on the same machine in the same session as
`cargo bench --bench nn_jit`:

    .venv-oracle/bin/python tools/bench/jax_nn_jit.py

For each size: `Block.apply` (eager: every operation dispatched on its
own), `nn.jit(Block).apply` (the module compiled, the apply around it in
Python, as benches/nn_jit.rs calls flaxen's `Jit`), and
`jax.jit(nn.jit(Block).apply)` (everything compiled, for reference); a
fresh dropout key each call, results blocked on. Timed in batches of about
10 ms (median and best per call). Pinned like the oracle: jax==0.10.2,
jaxlib==0.10.2, flax==0.12.8.
"""

import itertools
import time

import jax
import flax.linen as nn

CASES = [
    ("mlp_64_64_64_10_b32", 32, 64, 64, 10, False),
    ("mlp_16_16_16_4_b8", 8, 16, 16, 4, False),
    ("mlp_bn_64_64_64_10_b32", 32, 64, 64, 10, True),
]


class Block(nn.Module):
    hidden: int
    out: int
    bn: bool = False

    @nn.compact
    def __call__(self, x):
        h = nn.relu(nn.Dense(self.hidden)(x))
        h = nn.Dropout(0.1, deterministic=False)(h)
        if self.bn:
            h = nn.BatchNorm(use_running_average=False, momentum=0.9)(h)
        h = nn.relu(nn.Dense(self.hidden)(h))
        return nn.Dense(self.out)(h)


def batch_times(f, min_seconds=3.0, batch_seconds=0.01):
    jax.block_until_ready(f())
    t = time.perf_counter()
    calls = 0
    while time.perf_counter() - t < batch_seconds:
        jax.block_until_ready(f())
        calls += 1
    calls = max(calls, 1)
    times = []
    start = time.perf_counter()
    while time.perf_counter() - start < min_seconds or len(times) < 20:
        t = time.perf_counter()
        for _ in range(calls):
            jax.block_until_ready(f())
        times.append((time.perf_counter() - t) / calls)
    times.sort()
    return times[len(times) // 2], times[0]


def fmt(t):
    return f"{t * 1e6:.2f} µs" if t < 1e-3 else f"{t * 1e3:.3f} ms"


def main():
    for name, batch, features, hidden, out, bn in CASES:
        x = jax.random.normal(jax.random.key(1), (batch, features))
        eager = Block(hidden, out, bn)
        jitted = nn.jit(Block)(hidden, out, bn)
        # With BatchNorm, the statistics are updated on every call.
        mutable = ("batch_stats",) if bn else False
        v = eager.init({"params": jax.random.key(0), "dropout": jax.random.key(1)}, x)
        # Keys made beforehand (cycled), so that a call costs no key op.
        keys = itertools.cycle(list(jax.random.split(jax.random.key(2), 4096)))
        whole = jax.jit(jitted.apply, static_argnames="mutable")
        best = {}
        for label, f in [
            ("eager", lambda: eager.apply(v, x, rngs={"dropout": next(keys)}, mutable=mutable)),
            ("nn_jit", lambda: jitted.apply(v, x, rngs={"dropout": next(keys)}, mutable=mutable)),
            ("jax_jit_apply", lambda: whole(v, x, rngs={"dropout": next(keys)}, mutable=mutable)),
        ]:
            median, b = batch_times(f)
            best[label] = b
            print(f"jax nn_jit/{name}/{label}: median {fmt(median)}, best {fmt(b)}")
        print(f"jax nn_jit/{name}/speed-up (eager / nn_jit, best): {best['eager'] / best['nn_jit']:.2f}")


if __name__ == "__main__":
    main()
