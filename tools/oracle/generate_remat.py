"""Conformance fixtures for `nn.remat` (lift.checkpoint): variables and
their names, outputs, the RNG keys the body draws (dropout masks), and the
gradients with respect to the parameters and the input, for

* `Outer`: `nn.remat(Block)` where Block = Dense(6) -> relu -> Dropout(0.5)
  -> Dense(3), called twice (CheckpointBlock_0, CheckpointBlock_1);
* `ScanRemat`: `nn.scan(nn.remat(Cell), variable_axes={"params": 0},
  split_rngs={"params": True, "dropout": True}, length=4)` over a residual
  Dense + Dropout cell (the usual pattern for deep models);
* `StaticArg`: `nn.remat(Foo, static_argnums=(2,))` whose `train` flag is a
  Python bool inside (Flax's test_remat_static_argnums).

Gradients are of `sum(output * w)` (w fixed), by eager `jax.grad`, as the
flaxen tests compute them.

Pinned: jax==0.10.2, jaxlib==0.10.2, flax==0.12.8 (CPU). From the
repository root:

    .venv-oracle/bin/python tools/oracle/generate_remat.py

Writes tests/fixtures/remat.json. Floats are u32 bit patterns.
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

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "remat.json")


def arr(shape, seed, scale=1.0):
    return jnp.asarray(np.random.RandomState(seed).randn(*shape).astype(np.float32) * scale)


class Block(nn.Module):
    @nn.compact
    def __call__(self, x):
        h = nn.relu(nn.Dense(6)(x))
        h = nn.Dropout(0.5, deterministic=False)(h)
        return nn.Dense(3)(h)


class Outer(nn.Module):
    @nn.compact
    def __call__(self, x):
        y = nn.remat(Block)()(x)
        return nn.remat(Block)()(y)


class Cell(nn.Module):
    @nn.compact
    def __call__(self, c, _):
        h = nn.Dropout(0.25, deterministic=False)(nn.tanh(nn.Dense(5)(c)))
        return c + h, None


class ScanRemat(nn.Module):
    @nn.compact
    def __call__(self, x):
        scan = nn.scan(
            nn.remat(Cell),
            variable_axes={"params": 0},
            split_rngs={"params": True, "dropout": True},
            length=4,
        )
        c, _ = scan()(x, None)
        return c


class Foo(nn.Module):
    @nn.compact
    def __call__(self, inputs, train: bool):
        assert isinstance(train, bool)
        y = nn.Dense(3, use_bias=False)(inputs)
        return y * 2.0 if train else y


class StaticArg(nn.Module):
    @nn.compact
    def __call__(self, x):
        remat_foo = nn.remat(Foo, static_argnums=(2,))
        return remat_foo()(x, True) + remat_foo()(x, False)


def case(name, module, x_shape, seed):
    x = arr(x_shape, seed)
    rngs = {"params": jax.random.key(0), "dropout": jax.random.key(1)}
    v = module.init(rngs, x)
    y = module.apply(v, x, rngs={"dropout": jax.random.key(2)})
    w = arr(y.shape, seed + 100)

    def loss(p, x):
        out = module.apply({"params": p}, x, rngs={"dropout": jax.random.key(2)})
        return jnp.sum(out * w)

    gp, gx = jax.grad(loss, argnums=(0, 1))(v["params"], x)
    return {
        "name": name, "x_shape": list(x_shape), "y_shape": list(y.shape),
        "x": f32_bits(x), "w": f32_bits(w), "params": tree_bits(v["params"]),
        "y": f32_bits(y), "grad_params": tree_bits(gp), "grad_x": f32_bits(gx),
    }


def main():
    check_versions()
    out = {
        "cases": [
            case("outer", Outer(), (4, 5), 1),
            case("scan", ScanRemat(), (3, 5), 2),
            case("static", StaticArg(), (2, 4), 3),
        ]
    }
    with open(OUT, "w") as f:
        json.dump(out, f)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
