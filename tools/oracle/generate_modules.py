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


def nesting():
    """Three levels, explicit and auto names, a child called twice, a
    stream that falls back to 'params', custom initializers, variables in
    several collections, and apply with a mutable collection."""
    I = nn.initializers

    class Inner(nn.Module):
        @nn.compact
        def __call__(self, x):
            k = self.make_rng("noise")
            x = nn.Dense(3, kernel_init=I.glorot_uniform(), bias_init=I.normal(0.5))(x)
            return x + jax.random.normal(k, x.shape)

    class Middle(nn.Module):
        @nn.compact
        def __call__(self, x):
            inner = Inner(name="inner")
            x = inner(x)
            x = inner(x)
            x = Inner()(x)
            return nn.Dense(3, name="out", kernel_init=I.he_normal())(x)

    class Top(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = Middle(name="mid")(x)
            x = Middle()(x)
            count = self.variable("counter", "n", lambda: jnp.zeros((), jnp.float32))
            stats = self.variable(
                "stats", "noise", lambda: jax.random.uniform(self.make_rng("stats"), (3,))
            )
            if self.is_mutable_collection("counter"):
                count.value = count.value + 1.0
            return x * stats.value

    x = jnp.asarray(np.random.RandomState(0).randn(4, 3).astype(np.float32))
    model = Top()
    out_init, variables = model.init_with_output(
        {"params": jax.random.key(0), "stats": jax.random.key(7)}, x
    )
    out_apply, mutated = model.apply(
        variables, x, rngs={"noise": jax.random.key(5)}, mutable=["counter"]
    )
    return dict(
        x=f32_bits(x),
        init_out=f32_bits(out_init),
        variables={c: tree_bits(t) for c, t in variables.items()},
        order=[p for c, t in variables.items() for p in tree_bits({c: t})],
        apply_out=f32_bits(out_apply),
        mutated={c: tree_bits(t) for c, t in mutated.items()},
    )


def dropout_masks():
    cases = []
    for rate, shape, dims, seed in [
        (0.5, (4, 5), (0,), 3),
        (0.3, (3, 4, 2), (1,), 4),
        (0.75, (6,), (), 5),
        (0.1, (2, 3, 4), (0, 2), 6),
    ]:
        x = jnp.asarray(np.random.RandomState(seed).randn(*shape).astype(np.float32))
        out = nn.Dropout(rate, broadcast_dims=dims).apply(
            {}, x, deterministic=False, rngs={"dropout": jax.random.key(seed)}
        )
        cases.append(
            dict(rate=rate, shape=list(shape), broadcast_dims=list(dims), seed=seed,
                 x=f32_bits(x), out=f32_bits(out))
        )
    return cases


def mlp_grads():
    """Gradients of a small MLP with dropout, through jax.value_and_grad."""

    class Mlp(nn.Module):
        @nn.compact
        def __call__(self, x, train):
            x = nn.relu(nn.Dense(4)(x))
            x = nn.Dropout(0.25)(x, deterministic=not train)
            return nn.Dense(1)(x)

    rs = np.random.RandomState(11)
    x = jnp.asarray(rs.randn(5, 3).astype(np.float32))
    y = jnp.asarray(rs.randn(5, 1).astype(np.float32))
    model = Mlp()
    variables = model.init(jax.random.key(1), x, train=False)

    def loss(params):
        out = model.apply({"params": params}, x, train=True, rngs={"dropout": jax.random.key(2)})
        return jnp.mean((y - out) ** 2)

    l, g = jax.value_and_grad(loss)(variables["params"])
    return dict(
        x=f32_bits(x), y=f32_bits(y), params=tree_bits(variables["params"]),
        loss=f32_bits(l), grads=tree_bits(g),
    )


if __name__ == "__main__":
    check_versions()
    data = dict(
        guide_training=guide_training(),
        nesting=nesting(),
        dropout_masks=dropout_masks(),
        mlp_grads=mlp_grads(),
    )
    path = os.path.join(OUT, "modules.json")
    with open(path, "w") as f:
        json.dump(data, f, separators=(",", ":"))
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")
