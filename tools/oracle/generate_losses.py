"""Conformance fixtures for `flaxen::optim::losses`: optax 0.2.8's losses,
their values and the jitted gradient of `sum(loss * c)` with respect to
the predictions (or logits). `softmax_cross_entropy_with_integer_labels`,
whose labels are int32, has its own map (`integer_label_cases`).

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


def case(loss, x, other, as_arguments=False):
    """`as_arguments`: `other` and `c` are arguments of the jitted gradient,
    as in a training step, instead of constants XLA may fold at compile
    time (its constant folder sums in f64)."""
    value = jax.jit(loss)(x, other)
    c = jnp.cos(jnp.arange(value.size, dtype=jnp.float32)).reshape(value.shape) + 1.5
    if as_arguments:
        grad = jax.jit(jax.grad(lambda x, o, c: (loss(x, o) * c).sum()))(x, other, c)
    else:
        grad = jax.jit(jax.grad(lambda x: (loss(x, other) * c).sum()))(x)
    return {"x": enc(x), "other": enc(other), "c": enc(c), "value": enc(value), "grad": enc(grad)}


def soft_label_cases(k):
    """Soft labels (random, and smoothed one-hot as with label smoothing)
    with the labels and weights as arguments, over shapes around XLA's
    fusion limits: rows of 1 to 33 labels. (From 4,096 elements XLA hands
    the fused loss to YNNPACK, not modelled: not recorded.)"""
    cases = {}
    shapes = [(1, 5), (3, 1), (2, 32), (5, 33), (64, 10), (2, 3, 7)]
    for i, shape in enumerate(shapes):
        kk = jax.random.fold_in(k, 100 + i)
        logits = jax.random.normal(jax.random.fold_in(kk, 0), shape) * 2.0
        probs = jax.nn.softmax(jax.random.normal(jax.random.fold_in(kk, 1), shape))
        name = "x".join(map(str, shape))
        cases[f"softmax_cross_entropy_soft_args_{name}"] = case(
            optax.softmax_cross_entropy, logits, probs, as_arguments=True
        )
        classes = jax.random.randint(jax.random.fold_in(kk, 2), shape[:-1], 0, shape[-1])
        smoothed = optax.smooth_labels(jax.nn.one_hot(classes, shape[-1]), 0.1)
        cases[f"softmax_cross_entropy_smoothed_args_{name}"] = case(
            optax.softmax_cross_entropy, logits, smoothed, as_arguments=True
        )
    return cases


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
        "softmax_cross_entropy_soft_args": case(
            optax.softmax_cross_entropy, logits, probs, as_arguments=True
        ),
        **soft_label_cases(k),
        "sigmoid_binary_cross_entropy": case(
            optax.sigmoid_binary_cross_entropy, pred, (target > 0).astype(jnp.float32)
        ),
        "log_cosh": case(optax.log_cosh, pred, target),
        "kl_divergence": case(
            lambda lp, t: optax.kl_divergence(lp, t), jax.nn.log_softmax(logits), targets_with_zeros
        ),
    }
    # softmax_cross_entropy_with_integer_labels: the one-hot case's logits
    # and labels; wide logits (exp underflows to 0 away from the maximum);
    # logits far from 0 (the stop-gradient maximum matters); ties at the
    # maximum, constant rows and signed zeros; a 3-D batch.
    sce_int = optax.softmax_cross_entropy_with_integer_labels
    labels = jnp.array([0, 3, 9, 2, 2, 7], dtype=jnp.int32)
    ties = jnp.array(
        [
            [2.0, 2.0, -1.0, 0.5, 2.0],
            [2.0, 2.0, -1.0, 0.5, 2.0],
            [0.0, -0.0, 0.0, -0.0, 0.0],
            [-3.0, -3.0, -3.0, -3.0, -3.0],
            [1e-30, -1e-30, 0.0, 1e-38, -0.0],
            [7.5, 7.5, 7.5, 7.5, -7.5],
        ],
        dtype=jnp.float32,
    )
    batch = jax.random.normal(jax.random.fold_in(k, 5), (2, 3, 5)) * 2.0
    integer_label_cases = {
        "softmax_cross_entropy_with_integer_labels": case(sce_int, logits, labels),
        "softmax_cross_entropy_with_integer_labels_wide": case(sce_int, logits * 30.0, labels),
        "softmax_cross_entropy_with_integer_labels_offset": case(
            sce_int, logits + jnp.array([1000.0, -1000.0, 1e4, -1e4, 50.0, 0.0])[:, None], labels
        ),
        "softmax_cross_entropy_with_integer_labels_ties": case(
            sce_int, ties, jnp.array([0, 2, 1, 4, 3, 4], dtype=jnp.int32)
        ),
        "softmax_cross_entropy_with_integer_labels_3d": case(
            sce_int, batch, jnp.array([[0, 4, 2], [1, 1, 3]], dtype=jnp.int32)
        ),
    }
    with open(OUT, "w") as f:
        json.dump(
            {"versions": EXPECTED, "cases": cases, "integer_label_cases": integer_label_cases},
            f,
            indent=0,
        )
        f.write("\n")


if __name__ == "__main__":
    main()
