"""Conformance fixtures for the data operations of `flaxen::tensor`:
one_hot, min, split, silu, leaky_relu, standardize, take_along_axis and
argmax — values and VJPs with a fixed cotangent, as JAX 0.10.2 computes
them eagerly (op by op).

Pinned: jax==0.10.2, jaxlib==0.10.2 (CPU). From the repository root:

    .venv-oracle/bin/python tools/oracle/generate_data_ops.py

Writes tests/fixtures/data_ops.json.
"""

import json
import os

import sys

import numpy as np

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(__file__))
from fixture_io import enc  # noqa: E402

EXPECTED = {"jax": "0.10.2"}
assert jax.__version__ == EXPECTED["jax"], jax.__version__
OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "data_ops.json")


def vjp_case(f, x):
    y, pull = jax.vjp(f, x)
    ct = jnp.cos(jnp.arange(y.size, dtype=jnp.float32)).reshape(y.shape) + 0.25
    (g,) = pull(ct)
    return {"x": enc(x), "y": enc(y), "ct": enc(ct), "grad": enc(g)}


def main():
    k = jax.random.key(11)
    x = jax.random.normal(k, (4, 6)) * 2.0
    ties = jnp.array([[1.0, -2.0, -2.0, 0.5], [3.0, 3.0, 3.0, 3.0], [jnp.nan, 1.0, -1.0, 0.0]])
    labels = jnp.array([[3, 0], [5, 9], [-1, 2]])
    idx = jnp.array([[5], [0], [2], [3]])
    cases = {
        "silu": vjp_case(jax.nn.silu, x),
        "leaky_relu": vjp_case(jax.nn.leaky_relu, x),
        "leaky_relu_0.2": vjp_case(lambda v: jax.nn.leaky_relu(v, 0.2), x),
        "standardize": vjp_case(lambda v: jax.nn.standardize(v, axis=-1), x),
        "min_axis1": vjp_case(lambda v: jnp.min(v, axis=1), x),
        "min_ties": vjp_case(lambda v: jnp.min(v, axis=1), ties[:2]),
        "softplus": vjp_case(jax.nn.softplus, x),
        "log_sigmoid": vjp_case(jax.nn.log_sigmoid, x),
        "elu": vjp_case(jax.nn.elu, x),
        "log1p": vjp_case(jnp.log1p, jnp.abs(x)),
        "sin": vjp_case(jnp.sin, jnp.concatenate([x, x * 300.0])),
        "cos": vjp_case(jnp.cos, jnp.concatenate([x, x * 300.0])),
        "expm1": vjp_case(jnp.expm1, x),
        "logaddexp": vjp_case(lambda v: jnp.logaddexp(v, v[::-1] * 0.5), x),
        "take_rows": vjp_case(lambda v: jnp.take(v, jnp.array([[3, 0], [-1, 3]]), axis=0), x),
        "take_cols": vjp_case(lambda v: jnp.take(v, jnp.array([5, 5, 1, 7]), axis=1), x),
        "take_along_axis": vjp_case(lambda v: jnp.take_along_axis(v, idx, axis=1), x),
    }
    fixture = {
        "versions": EXPECTED,
        "vjp": cases,
        "one_hot": {"labels": enc(labels), "out": enc(jax.nn.one_hot(labels, 6))},
        "argmax": {"x": enc(ties), "out": enc(jnp.argmax(ties, axis=1)), "min": enc(jnp.argmin(ties, axis=1))},
        "split": {"x": enc(x), "parts": [enc(p) for p in jnp.split(x, 3, axis=1)]},
    }
    with open(OUT, "w") as f:
        json.dump(fixture, f, indent=0)
        f.write("\n")


if __name__ == "__main__":
    main()
