"""Conformance fixtures for `flaxen::optim::losses`: optax 0.2.8's losses,
their values and the jitted gradient of `sum(loss * c)` with respect to
the predictions (or logits).

Pinned: jax==0.10.2, jaxlib==0.10.2, optax==0.2.8 (CPU). From the
repository root:

    .venv-oracle/bin/python tools/oracle/generate_losses.py

Writes tests/fixtures/losses.json (f32 values as exact decimals).
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
OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "losses.json")


def case(loss, x, other):
    value = jax.jit(loss)(x, other)
    c = jnp.cos(jnp.arange(value.size, dtype=jnp.float32)).reshape(value.shape) + 1.5
    grad = jax.jit(jax.grad(lambda x: (loss(x, other) * c).sum()))(x)
    return {"x": enc(x), "other": enc(other), "c": enc(c), "value": enc(value), "grad": enc(grad)}


def main():
    k = jax.random.key(7)
    pred = jax.random.normal(jax.random.fold_in(k, 1), (4, 5)) * 2.0
    target = jax.random.normal(jax.random.fold_in(k, 2), (4, 5))
    logits = jax.random.normal(jax.random.fold_in(k, 3), (6, 10)) * 3.0
    probs = jax.nn.softmax(jax.random.normal(jax.random.fold_in(k, 4), (6, 10)))
    onehot = jax.nn.one_hot(jnp.array([0, 3, 9, 2, 2, 7]), 10)
    targets_with_zeros = onehot * 0.7 + jnp.where(onehot == 0, 0.0, 0.0)
    targets_with_zeros = targets_with_zeros.at[:, 1].set(0.3)
    cases = {
        "squared_error": case(optax.squared_error, pred, target),
        "l2_loss": case(optax.l2_loss, pred, target),
        "huber_loss": case(lambda p, t: optax.huber_loss(p, t, delta=1.0), pred, target),
        "huber_loss_delta_0.5": case(lambda p, t: optax.huber_loss(p, t, delta=0.5), pred, target),
        "softmax_cross_entropy_onehot": case(optax.softmax_cross_entropy, logits, onehot),
        "softmax_cross_entropy_soft": case(optax.softmax_cross_entropy, logits, probs),
        "sigmoid_binary_cross_entropy": case(
            optax.sigmoid_binary_cross_entropy, pred, (target > 0).astype(jnp.float32)
        ),
        "log_cosh": case(optax.log_cosh, pred, target),
        "kl_divergence": case(
            lambda lp, t: optax.kl_divergence(lp, t), jax.nn.log_softmax(logits), targets_with_zeros
        ),
    }
    with open(OUT, "w") as f:
        json.dump({"versions": EXPECTED, "cases": cases}, f, indent=0)
        f.write("\n")


if __name__ == "__main__":
    main()
