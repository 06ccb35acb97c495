"""Conformance fixtures for `flaxen::optim`: optax 0.2.8 transformations
stepped under jax.jit (as a training step runs them), and schedules.

Pinned: jax==0.10.2, jaxlib==0.10.2, optax==0.2.8 (CPU). From the
repository root:

    .venv-oracle/bin/python tools/oracle/generate_optim.py

Writes tests/fixtures/optim.json: for each optimizer, the parameters, the
gradients of each step (drawn from a fixed key), and after each step the
updates, the new parameters and the state's leaves. Schedules: their values
for counts 0..N, computed under jit (XLA folds constants and contracts
multiply-adds into FMAs there; eager values differ).
"""

import json
import os

import sys

import numpy as np

import jax
import jax.numpy as jnp
import optax

sys.path.insert(0, os.path.dirname(__file__))
from fixture_io import enc  # noqa: E402

EXPECTED = {"jax": "0.10.2", "optax": "0.2.8"}
assert jax.__version__ == EXPECTED["jax"], jax.__version__
assert optax.__version__ == EXPECTED["optax"], optax.__version__
OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "optim.json")
STEPS = 4


def leaves(tree):
    flat, _ = jax.tree_util.tree_flatten_with_path(tree)
    return [[jax.tree_util.keystr(p), enc(v)] for p, v in flat]


def run(tx):
    k = jax.random.key(42)
    params = {
        "b": jax.random.normal(jax.random.fold_in(k, 1), (5,)),
        "w": jax.random.normal(jax.random.fold_in(k, 2), (3, 5)),
        "s": jnp.float32(0.7),
    }
    state = tx.init(params)
    step = jax.jit(lambda g, s, p: tx.update(g, s, p))
    out = {"params": leaves(params), "steps": []}
    for i in range(STEPS):
        g = jax.tree.map(
            lambda x: jax.random.normal(jax.random.fold_in(k, 100 + i), x.shape) * 0.3, params
        )
        updates, state = step(g, state, params)
        params = jax.jit(optax.apply_updates)(params, updates)
        out["steps"].append(
            {"grads": leaves(g), "updates": leaves(updates), "params": leaves(params), "state": leaves(state)}
        )
    return out


def schedule_values(s, n):
    return [float(np.float32(jax.jit(s)(jnp.int32(t)))) for t in range(n)]


def main():
    sched = optax.warmup_cosine_decay_schedule(0.0, 3e-3, 50, 450, 1e-5)
    fixture = {
        "versions": EXPECTED,
        "optimizers": {
            "adam": run(optax.adam(1e-2)),
            "adamw": run(optax.adamw(1e-2, weight_decay=1e-2)),
            "adamw_schedule": run(optax.adamw(optax.warmup_cosine_decay_schedule(0.0, 3e-3, 2, 10, 1e-5), weight_decay=1e-4)),
            "sgd": run(optax.sgd(0.1)),
            "sgd_momentum": run(optax.sgd(0.1, momentum=0.9)),
            "sgd_nesterov": run(optax.sgd(0.1, momentum=0.9, nesterov=True)),
            "rmsprop": run(optax.rmsprop(1e-2)),
            "adagrad": run(optax.adagrad(1e-1)),
            "lion": run(optax.lion(1e-3)),
            "clip_adam": run(optax.chain(optax.clip_by_global_norm(0.5), optax.adam(1e-2))),
        },
        "schedules": {
            "warmup_cosine_decay(0,3e-3,50,450,1e-5)": schedule_values(sched, 452),
            "exponential_decay(0.1,7,0.9)": schedule_values(optax.exponential_decay(0.1, 7, 0.9), 100),
            "exponential_decay(0.1,7,0.9,begin=5,staircase)": schedule_values(
                optax.exponential_decay(0.1, 7, 0.9, transition_begin=5, staircase=True), 100
            ),
            "exponential_decay(0.1,3,0.5,end=0.01)": schedule_values(
                optax.exponential_decay(0.1, 3, 0.5, end_value=0.01), 60
            ),
            "piecewise_constant(0.1,{10:0.5,30:0.1})": schedule_values(
                optax.piecewise_constant_schedule(0.1, {10: 0.5, 30: 0.1}), 50
            ),
            "linear(1.0,0.1,20,begin=3)": schedule_values(optax.linear_schedule(1.0, 0.1, 20, 3), 40),
            "cosine_decay(0.5,37,0.1)": schedule_values(optax.cosine_decay_schedule(0.5, 37, 0.1), 50),
            "constant(0.3)": schedule_values(optax.constant_schedule(0.3), 3),
        },
    }
    with open(OUT, "w") as f:
        json.dump(fixture, f, indent=0)
        f.write("\n")


if __name__ == "__main__":
    main()
