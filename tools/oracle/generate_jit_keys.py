"""Conformance fixture for a jitted training step that draws dropout masks
from a key argument: `jax.jit(jax.value_and_grad(loss))(params, batch, key)`
of a Flax MLP (Dense(32) -> relu -> Dropout(0.3) -> Dense(2), squared
error on a batch of 12), for the keys `fold_in(key(7), t)`, t = 0..4, at
fixed parameters. The loss is a sum of squares: under jit XLA rewrites a
mean's backward together with the square's as one division, which flaxen's
`as_jitted` does not emulate yet. flaxen's `jit_value_and_grad_with_keys`
(traced once under `as_jitted`, replayed for the later keys) must give the
same loss and gradients, bit for bit.

Pinned: jax==0.10.2, jaxlib==0.10.2, flax==0.12.8 (CPU). From the
repository root:

    .venv-oracle/bin/python tools/oracle/generate_jit_keys.py

Writes tests/fixtures/jit_keys.json (floats as u32 bit patterns).
"""

import json
import os
import sys

import numpy as np

import jax
import jax.numpy as jnp
import flax.linen as nn

sys.path.insert(0, os.path.dirname(__file__))
from generate_random import check_versions, f32_bits  # noqa: E402
from generate_modules import tree_bits  # noqa: E402

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "jit_keys.json")


class Mlp(nn.Module):
    @nn.compact
    def __call__(self, x):
        h = nn.relu(nn.Dense(32)(x))
        h = nn.Dropout(0.3, deterministic=False)(h)
        return nn.Dense(2)(h)


def main():
    check_versions()
    rs = np.random.RandomState(5)
    x = jnp.asarray(rs.randn(12, 8).astype(np.float32))
    y = jnp.asarray(rs.randn(12, 2).astype(np.float32))
    params = Mlp().init(jax.random.key(1), x)["params"]

    def loss(params, x, y, key):
        out = Mlp().apply({"params": params}, x, rngs={"dropout": key})
        return jnp.sum((out - y) ** 2)

    step = jax.jit(jax.value_and_grad(loss))
    steps = []
    for t in range(5):
        key = jax.random.fold_in(jax.random.key(7), t)
        value, grads = step(params, x, y, key)
        steps.append({"loss": f32_bits(value), "grads": tree_bits(grads)})
    data = {
        "jax": jax.__version__,
        "x": f32_bits(x),
        "y": f32_bits(y),
        "params": tree_bits(params),
        "steps": steps,
    }
    path = os.path.abspath(OUT)
    with open(path, "w") as f:
        json.dump(data, f, separators=(",", ":"))
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main()
