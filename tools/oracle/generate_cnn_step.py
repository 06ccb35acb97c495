"""One training step of examples/cnn_digits.rs's network in Flax: the
parameters at init, and the loss and gradients of the first batch (the
first 100 training images, unshuffled) under eager `jax.value_and_grad`,
as flaxen computes them (tests/cnn_step.rs). The convolutions take every
route XLA:CPU has: Eigen's contraction (1 -> 8 and 8 -> 16 features) and
YNNPACK (the kernels' cotangents, over a batch of 100 images).

Pinned: jax==0.10.2, jaxlib==0.10.2, flax==0.12.8, optax==0.2.8 (CPU).
From the repository root:

    .venv-oracle/bin/python tools/oracle/generate_cnn_step.py

Writes tests/fixtures/cnn_step.json.
"""

import json
import os
import sys

import jax
import jax.numpy as jnp
import flax.linen as nn
import optax

sys.path.insert(0, os.path.dirname(__file__))
from fixture_io import expected  # noqa: E402
from train_digits import load  # noqa: E402

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "cnn_step.json")


class CNN(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.Conv(features=8, kernel_size=(3, 3))(x)
        x = nn.relu(x)
        x = nn.avg_pool(x, window_shape=(2, 2), strides=(2, 2))
        x = nn.Conv(features=16, kernel_size=(3, 3))(x)
        x = nn.relu(x)
        x = nn.avg_pool(x, window_shape=(2, 2), strides=(2, 2))
        x = x.reshape((x.shape[0], -1))
        x = nn.Dense(features=64)(x)
        x = nn.relu(x)
        return nn.Dense(features=10)(x)


def leaves(tree):
    return {"/".join(k.key for k in path): expected(v)
            for path, v in jax.tree_util.tree_leaves_with_path(tree)}


def main():
    x, y = load()
    images = jnp.asarray(x[:100].reshape(100, 8, 8, 1))
    labels = jnp.asarray(y[:100])
    model = CNN()
    params_key, _ = jax.random.split(jax.random.key(0))
    params = model.init(params_key, images[:1])["params"]

    def loss_fn(p):
        logits = model.apply({"params": p}, images)
        return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

    loss, grads = jax.value_and_grad(loss_fn)(params)
    logits = model.apply({"params": params}, images)
    with open(OUT, "w") as f:
        json.dump({"init": leaves(params), "logits": expected(logits), "loss": expected(loss),
                   "grads": leaves(grads)}, f)
    print(f"wrote {OUT}: loss {float(loss)}")


if __name__ == "__main__":
    main()
