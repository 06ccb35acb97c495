"""Conformance fixtures for the API-completeness work: `nn.map_variables`
with `init=True` (Flax's test_map_variables_bit_weights and variants with
RNG streams and mutable collections).

Pinned: jax==0.10.2, jaxlib==0.10.2, flax==0.12.8 (CPU). From the
repository root:

    .venv-oracle/bin/python tools/oracle/generate_api.py

Writes tests/fixtures/api.json. Floats are f32 written as the decimal of
their exact value; shapes are listed separately, data is row-major.
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
from fixture_io import enc, flat  # noqa: E402

EXPECTED = {"jax": "0.10.2", "flax": "0.12.8"}
assert jax.__version__ == EXPECTED["jax"], jax.__version__
assert flax.__version__ == EXPECTED["flax"], flax.__version__
OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "api.json")


def sign(t):
    return jax.tree_util.tree_map(jnp.sign, t)


class BitWeights(nn.Module):
    @nn.compact
    def __call__(self, x):
        BitDense = nn.map_variables(nn.Dense, "params", sign, init=True)
        return BitDense(4)(x)


class DenseDropout(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.Dense(3)(x)
        return nn.Dropout(0.5, deterministic=False)(x)


class Doubled(nn.Module):
    """init=True with a stream besides params: the dropout mask of the
    second run, which init returns."""

    @nn.compact
    def __call__(self, x):
        double = lambda t: jax.tree_util.tree_map(lambda a: a * 2.0, t)
        M = nn.map_variables(DenseDropout, "params", double, init=True)
        return M()(x)


class Count(nn.Module):
    @nn.compact
    def __call__(self, x):
        c = self.variable("stats", "count", lambda: jnp.zeros((2,), jnp.float32))
        c.value = c.value + 1.0
        return x * c.value


class Shifted(nn.Module):
    """mutable=True: the view is count + 10, stored back minus 10."""

    @nn.compact
    def __call__(self, x):
        M = nn.map_variables(
            Count,
            "stats",
            lambda t: jax.tree_util.tree_map(lambda a: a + 10.0, t),
            lambda t: jax.tree_util.tree_map(lambda a: a - 10.0, t),
            mutable=True,
        )
        return M()(x)


class ExplicitRng(nn.Module):
    """Dropout with an explicit rng and a call-time deterministic, and
    make_rng() with the default stream."""

    @nn.compact
    def __call__(self, x, train):
        a = nn.Dropout(0.5)(x, deterministic=not train, rng=jax.random.key(5))
        b = nn.Dropout(0.5)(x, deterministic=not train)
        k = jax.random.key_data(self.make_rng())
        return a, b, k


def norm_case(module, x, mask=None, mutable=False, jit=True):
    """Init, output, updated statistics and the gradient of sum(y * c)
    with respect to the parameters and the input: jitted, or (jit=False)
    eagerly, each operation its own XLA program, as flaxen's
    value_and_grad computes it."""
    kw = {} if mask is None else {"mask": mask}
    v = module.init(jax.random.key(0), x, **kw)
    c = jnp.cos(jnp.arange(x.size, dtype=jnp.float32)).reshape(x.shape)

    def f(params, x):
        vs = dict(v, params=params)
        if mutable:
            y, upd = module.apply(vs, x, mutable=["batch_stats"], **kw)
        else:
            y, upd = module.apply(vs, x, **kw), {}
        return (y * c).sum(), (y, upd)

    vg = jax.value_and_grad(f, argnums=(0, 1), has_aux=True)
    if jit:
        vg = jax.jit(vg)
    (loss, (y, upd)), (gp, gx) = vg(v["params"], x)
    out = {
        "x": enc(x),
        "c": enc(c),
        "variables": flat(v),
        "y": enc(y),
        "updated": flat(upd),
        "grad_params": flat(gp),
        "grad_x": enc(gx),
    }
    if mask is not None:
        out["mask"] = {"shape": list(mask.shape), "data": [bool(b) for b in np.asarray(mask).reshape(-1)]}
    return out


def main():
    cases = {}
    x = jnp.ones((2, 4))
    y, v = BitWeights().init_with_output(jax.random.key(0), x)
    cases["bit_weights"] = {
        "x": enc(x),
        "init_y": enc(y),
        "variables": flat(v),
        "apply_y": enc(BitWeights().apply(v, x)),
    }

    x = jnp.arange(8, dtype=jnp.float32).reshape(2, 4) / 8.0
    rngs = {"params": jax.random.key(0), "dropout": jax.random.key(1)}
    y, v = Doubled().init_with_output(rngs, x)
    cases["doubled_dropout"] = {
        "x": enc(x),
        "init_y": enc(y),
        "variables": flat(v),
        "apply_y": enc(Doubled().apply(v, x, rngs={"dropout": jax.random.key(2)})),
    }

    x = jnp.ones((2,))
    y, v = Shifted().init_with_output(jax.random.key(0), x)
    y2, upd = Shifted().apply(v, x, mutable=["stats"])
    cases["shifted_counter"] = {
        "x": enc(x),
        "init_y": enc(y),
        "variables": flat(v),
        "apply_y": enc(y2),
        "updated": flat(upd),
    }

    x = jnp.arange(12, dtype=jnp.float32).reshape(3, 4) / 12.0
    rngs = {"params": jax.random.key(0), "dropout": jax.random.key(1)}
    (a, b, k), _ = ExplicitRng().init_with_output(rngs, x, True)
    (a2, b2, _), _ = ExplicitRng().init_with_output(rngs, x, False)
    explicit = {
        "x": enc(x),
        "explicit": enc(a),
        "stream": enc(b),
        "eval_explicit": enc(a2),
        "eval_stream": enc(b2),
        "default_key": [int(v) for v in np.asarray(k)],
    }

    x3 = jax.random.normal(jax.random.key(3), (2, 3, 4))
    x2 = jax.random.normal(jax.random.key(4), (5, 3))
    def norm_cases(jit):
        return {
            "layernorm_axes": norm_case(
                nn.LayerNorm(reduction_axes=(1, 2), feature_axes=-1), x3, jit=jit
            ),
            "layernorm_features_2d": norm_case(
                nn.LayerNorm(reduction_axes=(1, 2), feature_axes=(1, 2)), x3, jit=jit
            ),
            "layernorm_slow_variance": norm_case(
                nn.LayerNorm(use_fast_variance=False), x3, jit=jit
            ),
            "layernorm_mask": norm_case(
                nn.LayerNorm(), x3, mask=jnp.arange(4) % 3 != 1, jit=jit
            ),
            # A mask of the input's shape, counts differing by row: XLA
            # divides by the count truly.
            "layernorm_full_mask": norm_case(
                nn.LayerNorm(), x3, mask=jnp.arange(24).reshape(2, 3, 4) % 5 != 2, jit=jit
            ),
            "rmsnorm_mask": norm_case(
                nn.RMSNorm(), x3, mask=jnp.arange(4) % 3 != 1, jit=jit
            ),
            "rmsnorm_full_mask": norm_case(
                nn.RMSNorm(), x3, mask=jnp.arange(24).reshape(2, 3, 4) % 5 != 2, jit=jit
            ),
            "batchnorm_mask": norm_case(
                nn.BatchNorm(use_running_average=False),
                x2,
                mask=(jnp.arange(5) != 2)[:, None],
                mutable=True,
                jit=jit,
            ),
            "batchnorm_slow_variance": norm_case(
                nn.BatchNorm(use_running_average=False, use_fast_variance=False),
                x2,
                mutable=True,
                jit=jit,
            ),
        }

    # Jitted (XLA fuses the backward, contracting products into sums, and
    # folds the constant `c`'s sums) and eager (flaxen's value_and_grad).
    norms = norm_cases(jit=True)
    norms_eager = norm_cases(jit=False)

    with open(OUT, "w") as f:
        json.dump(
            {
                "versions": EXPECTED,
                "cases": cases,
                "explicit_rng": explicit,
                "norms": norms,
                "norms_eager": norms_eager,
            },
            f,
            indent=1,
        )
        f.write("\n")


if __name__ == "__main__":
    main()
