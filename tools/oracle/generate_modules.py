"""Conformance fixtures for the module API (flaxen::core, flaxen::nn).

Pinned: jax==0.10.2, jaxlib==0.10.2, flax==0.12.8 (CPU); see
generate_random.py for the venv. Run from the repository root:

    .venv-oracle/bin/python tools/oracle/generate_modules.py

Writes tests/fixtures/modules.json. Floats are u32 bit patterns.
"""

import json
import os
import sys

import numpy as np

import jax
import jax.numpy as jnp
import flax
import flax.linen as nn

sys.path.insert(0, os.path.dirname(__file__))
from generate_random import check_versions, f32_bits, key_words  # noqa: E402

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures")


def tree_bits(tree):
    """{path: {shape, bits}} of a nested dict of arrays, in insertion order."""
    out = {}

    def walk(t, prefix):
        for k, v in t.items():
            p = f"{prefix}/{k}" if prefix else k
            if isinstance(v, dict) or hasattr(v, "items"):
                walk(v, p)
            else:
                out[p] = dict(shape=list(np.shape(v)), bits=f32_bits(v))

    walk(tree, "")
    return out


def guide_training():
    """The randomness guide's training loop, step by step."""

    class SubModule(nn.Module):
        @nn.compact
        def __call__(self, x, train):
            kernel = self.param("submodule_kernel", jax.random.normal, x.shape)
            x = x + kernel
            x = nn.Dropout(0.2)(x, deterministic=not train)
            x = nn.Dense(3)(x)
            return x

    class Model(nn.Module):
        @nn.compact
        def __call__(self, x, train):
            kernel = self.variable(
                "other_collection",
                "module_kernel",
                lambda: jax.random.normal(self.make_rng("other"), x.shape),
            )
            x = x + kernel.value
            x = SubModule()(x, train)
            x = nn.Dropout(0.2)(x, deterministic=not train)
            x = nn.Dense(2)(x)
            return x

    params_rng, other_rng, train_rng = jax.random.split(jax.random.key(0), 3)
    init_rngs = {"params": params_rng, "other": other_rng}
    x = jnp.ones((1, 3))
    y = jnp.ones((1, 2))
    module = Model()
    variables = module.init(init_rngs, x, train=False)
    steps = []
    init = tree_bits(variables)
    for _ in range(10):
        dropout_rng, next_rng = jax.random.split(train_rng)

        def loss(params):
            out = module.apply(
                {"params": params, "other_collection": variables["other_collection"]},
                x,
                train=True,
                rngs={"dropout": dropout_rng},
            )
            return jnp.mean((y - out) ** 2)

        train_out = module.apply(
            variables, x, train=True, rngs={"dropout": dropout_rng}
        )
        l, grads = jax.value_and_grad(loss)(variables["params"])
        params = jax.tree_util.tree_map(lambda p, g: p - 1e-3 * g, variables["params"], grads)
        variables = {"params": params, "other_collection": variables["other_collection"]}
        train_rng = next_rng
        out = module.apply(variables, x, train=False)
        steps.append(
            dict(
                train_out=f32_bits(train_out),
                train_loss=f32_bits(l),
                grads=tree_bits(grads),
                params=tree_bits(params),
                eval_out=f32_bits(out),
                eval_loss=f32_bits(jnp.mean((y - out) ** 2)),
            )
        )
    return dict(init=init, steps=steps)


if __name__ == "__main__":
    check_versions()
    data = dict(guide_training=guide_training())
    path = os.path.join(OUT, "modules.json")
    with open(path, "w") as f:
        json.dump(data, f, separators=(",", ":"))
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")
