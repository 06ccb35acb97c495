"""The work of benches/train.rs, timed in JAX (jit, CPU): one epoch of the
digits recipe (tools/oracle/train_digits.py's jitted step, 15 batches) and
an AdamW update (`tx.update` + `optax.apply_updates`, jitted) of a tree of
four 512x512 leaves. Run on the same machine in the same session as
`cargo bench --bench train`:

    .venv-oracle/bin/python tools/bench/jax_train_digits.py

Timed as tools/bench/jax_train_step.py times (batches of ~10 ms, median and
best), and the epoch also over 600 epochs in a row (wall and CPU time of all
threads per epoch). Pinned like the oracle: jax==0.10.2, jaxlib==0.10.2, flax==0.12.8,
optax==0.2.8.
"""

import os
import sys
import time

import numpy as np

import jax
import jax.numpy as jnp
import optax

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "oracle"))
sys.path.insert(0, os.path.dirname(__file__))
import train_digits as T  # noqa: E402
from jax_train_step import batch_times, cpu_seconds, fmt  # noqa: E402


def main():
    print(f"jax {jax.__version__} on {jax.devices()}")
    x, y = T.load()
    xt, yt = x[: T.TRAIN], y[: T.TRAIN]
    model = T.Mlp()
    pk, dk, sk = jax.random.split(jax.random.key(0), 3)
    params0 = model.init(pk, jnp.asarray(xt[:1]), train=False)["params"]
    tx = optax.adamw(optax.warmup_cosine_decay_schedule(0.0, 3e-3, 50, 450, 1e-5), weight_decay=1e-4)
    state0 = tx.init(params0)

    step = T.make_train_step(model, tx)

    def epoch():
        params, state = params0, state0
        perm = np.asarray(jax.random.permutation(sk, T.TRAIN))
        for t in range(T.TRAIN // T.BATCH):
            idx = perm[t * T.BATCH : (t + 1) * T.BATCH]
            params, state, _ = step(params, state, xt[idx], yt[idx], jax.random.fold_in(dk, t))
        return params

    times = batch_times(epoch)
    print(f"train/digits_epoch: median {fmt(float(np.median(times)))}, best {fmt(min(times))}")

    # 600 epochs in a row: wall and CPU time (all threads) per epoch, as
    # benches/train.rs's digits_epoch_sustained.
    n = 600
    for _ in range(20):
        jax.block_until_ready(epoch())
    cpu0, wall0 = cpu_seconds(), time.perf_counter()
    for _ in range(n):
        jax.block_until_ready(epoch())
    wall, cpu = (time.perf_counter() - wall0) / n, (cpu_seconds() - cpu0) / n
    print(f"train/digits_epoch_sustained: wall {fmt(wall)}, cpu {fmt(cpu)}")

    params = {f"w{i}": jnp.asarray((np.arange(512 * 512) * 7 + i) % 13 * 0.01, jnp.float32).reshape(512, 512) for i in range(4)}
    grads = jax.tree.map(lambda p: p * 0.5, params)
    atx = optax.adamw(1e-3, weight_decay=1e-4)
    astate = atx.init(params)

    @jax.jit
    def update(g, s, p):
        u, s = atx.update(g, s, p)
        return optax.apply_updates(p, u), s

    times = batch_times(lambda: update(grads, astate, params))
    print(f"train/adamw_update_1M: median {fmt(float(np.median(times)))}, best {fmt(min(times))}")


if __name__ == "__main__":
    main()
