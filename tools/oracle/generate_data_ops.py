"""Conformance fixtures for the data operations of `flaxen::tensor`:
one_hot, min, split, silu, leaky_relu, standardize, take_along_axis and
argmax — values and VJPs with a fixed cotangent, as JAX 0.10.2 computes
them eagerly (op by op). The comparisons (as f32 masks), jnp.where,
jnp.stack and jnp.concatenate are written as bit patterns
(`fixture_io.enc_bits`: their inputs hold infinities), their VJPs with
respect to every differentiated input (`vjp_n`).

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
from fixture_io import enc, enc_bits  # noqa: E402

EXPECTED = {"jax": "0.10.2"}
assert jax.__version__ == EXPECTED["jax"], jax.__version__
OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "data_ops.json")


def vjp_case(f, x):
    y, pull = jax.vjp(f, x)
    ct = jnp.cos(jnp.arange(y.size, dtype=jnp.float32)).reshape(y.shape) + 0.25
    (g,) = pull(ct)
    return {"x": enc(x), "y": enc(y), "ct": enc(ct), "grad": enc(g)}


def vjp_n_case(f, xs, ct=None):
    """`f(*xs)` and its VJP with respect to every input, with the fixed
    cotangent of `vjp_case` unless `ct` is given."""
    y, pull = jax.vjp(f, *xs)
    if ct is None:
        ct = jnp.cos(jnp.arange(y.size, dtype=jnp.float32)).reshape(y.shape) + 0.25
    ct = jnp.asarray(ct, dtype=jnp.float32)
    assert ct.shape == y.shape
    grads = pull(ct)
    return {
        "xs": [enc_bits(x) for x in xs],
        "y": enc_bits(y),
        "ct": enc_bits(ct),
        "grads": [enc_bits(g) for g in grads],
    }


F32_MAX = np.finfo(np.float32).max
F32_TINY = np.finfo(np.float32).tiny
# Every ordered pair of these is compared (a broadcast table): infinities,
# the largest finite values, +-1, the smallest normals, both zeros, NaN.
SPECIAL = np.array(
    [-np.inf, -F32_MAX, -1.0, -F32_TINY, -0.0, 0.0, F32_TINY, 1.0, F32_MAX, np.inf, np.nan],
    dtype=np.float32,
)
# Subnormals, kept apart: XLA's CPU compares them as zero (denormals are
# zero), so -1e-45 == 0 and 1e-45 > 0 is false; flaxen compares the IEEE
# values. The `*_subnormal*` cases record JAX's answers.
SUBNORMAL = np.array([-1.1754942e-38, -1e-45, 1e-45, 1.1754942e-38], dtype=np.float32)
assert all(0 < abs(v) < F32_TINY for v in SUBNORMAL)
COMPARISONS = {
    "greater": jnp.greater,
    "greater_equal": jnp.greater_equal,
    "less": jnp.less,
    "less_equal": jnp.less_equal,
    "equal": jnp.equal,
}


def compare_case(x, y):
    out = {"x": enc_bits(x), "y": enc_bits(y)}
    for name, op in COMPARISONS.items():
        out[name] = enc_bits(op(x, y).astype(jnp.float32))
    return out


def comparisons_and_selects(k):
    table_x = jnp.asarray(SPECIAL)[:, None]
    table_y = jnp.asarray(SPECIAL)[None, :]
    a = jax.random.normal(jax.random.fold_in(k, 1), (4, 6))
    b = jax.random.normal(jax.random.fold_in(k, 2), (4, 6))
    # b ties a in a checkerboard, and holds both zeros, infinities and NaN.
    tie = (jnp.arange(24).reshape(4, 6) % 3) == 0
    b = jnp.where(tie, a, b)
    b = b.at[0, 1].set(-0.0).at[1, 1].set(jnp.inf).at[2, 1].set(jnp.nan).at[3, 1].set(-jnp.inf)
    a = a.at[0, 1].set(0.0).at[1, 2].set(jnp.nan).at[2, 2].set(-0.0).at[3, 2].set(jnp.inf)
    compare = {
        "table": compare_case(table_x, table_y),
        "same_shape": compare_case(a, b),
        "scalar": compare_case(jnp.asarray(SPECIAL), jnp.float32(0.0)),
        "scalar_nan": compare_case(jnp.asarray(SPECIAL), jnp.float32(jnp.nan)),
        "table_subnormal": compare_case(
            jnp.concatenate([jnp.asarray(SPECIAL), jnp.asarray(SUBNORMAL)])[:, None],
            jnp.asarray(SUBNORMAL)[None, :],
        ),
    }
    # Masks as f32 (jnp.where tests `mask != 0`: NaN and infinities pick
    # on_true, both zeros on_false).
    mask = jnp.asarray(np.resize(SPECIAL, 24).reshape(4, 6))
    special_ct = jnp.asarray(
        np.resize(np.array([1.5, -0.0, 0.0, np.nan, np.inf, -2.0, 1e-45], np.float32), 24).reshape(4, 6)
    )
    vjp_n = {}
    for name, op in COMPARISONS.items():
        # The masks are not differentiated: zero cotangents for both sides.
        vjp_n[f"{name}_mask"] = vjp_n_case(lambda x, y, op=op: op(x, y).astype(jnp.float32), [a, b])
        # A comparison picking a side: ties, signed zeros, NaN, infinities.
        vjp_n[f"where_{name}"] = vjp_n_case(lambda x, y, op=op: jnp.where(op(x, y), x, y), [a, b])
        vjp_n[f"where_{name}_table"] = vjp_n_case(
            lambda x, y, op=op: jnp.where(op(x, y), x, y),
            [jnp.broadcast_to(table_x, (11, 11)), jnp.broadcast_to(table_y, (11, 11))],
        )
        # The same, broadcast: x's cotangent is summed along rows of 11,
        # which JAX adds left to right and flaxen in another order (a known
        # disagreement, listed in tests/data_ops_fixtures.rs).
        vjp_n[f"where_{name}_table_broadcast"] = vjp_n_case(
            lambda x, y, op=op: jnp.where(op(x, y), x, y), [table_x, table_y]
        )
    vjp_n.update(
        {
            # The mask is an input too: its cotangent is zero.
            "where": vjp_n_case(jnp.where, [mask, a, b]),
            "where_special_ct": vjp_n_case(jnp.where, [mask, a, b], special_ct),
            "where_broadcast_false": vjp_n_case(jnp.where, [mask, a, b[1]]),
            "where_broadcast_mask": vjp_n_case(jnp.where, [mask[:, :1], a, b]),
            "where_broadcast_all": vjp_n_case(jnp.where, [mask[:, 2:3], a[:1], b[:, :1]]),
            # on_false's cotangent summed along rows of 6 (short enough for
            # flaxen's order to be JAX's).
            "where_broadcast_rows": vjp_n_case(jnp.where, [mask[:, 4:5], a[:1], b[:, :1]]),
            "where_scalar_branch": vjp_n_case(jnp.where, [mask, a, jnp.float32(-0.0)]),
            "where_scalar_mask": vjp_n_case(jnp.where, [jnp.float32(jnp.nan), a, b]),
            "where_zero_mask": vjp_n_case(jnp.where, [jnp.float32(-0.0), a, b]),
            "where_subnormal_mask": vjp_n_case(
                jnp.where, [jnp.asarray(np.resize(SUBNORMAL, 24).reshape(4, 6)), a, b]
            ),
            "where_greater_subnormal_table": vjp_n_case(
                lambda x, y: jnp.where(x > y, x, y),
                [
                    jnp.concatenate([jnp.asarray(SPECIAL), jnp.asarray(SUBNORMAL)])[:, None],
                    jnp.asarray(SUBNORMAL)[None, :],
                ],
            ),
        }
    )
    c = a * 3.0
    vjp_n.update(
        {
            "stack_axis0": vjp_n_case(lambda *xs: jnp.stack(xs, axis=0), [a, b, c]),
            "stack_axis1": vjp_n_case(lambda *xs: jnp.stack(xs, axis=1), [a, b, c]),
            "stack_axis2": vjp_n_case(lambda *xs: jnp.stack(xs, axis=2), [a, b, c]),
            "stack_axis-2": vjp_n_case(lambda *xs: jnp.stack(xs, axis=-2), [a, b, c]),
            "stack_one": vjp_n_case(lambda x: jnp.stack([x], axis=-1), [b]),
            "stack_scalars": vjp_n_case(
                lambda *xs: jnp.stack(xs), [jnp.float32(-0.0), jnp.float32(jnp.inf), jnp.float32(jnp.nan)]
            ),
            "stack_special_ct": vjp_n_case(
                lambda *xs: jnp.stack(xs, axis=1), [a[:2], b[:2]], special_ct.reshape(2, 2, 6)
            ),
            "concatenate_axis0": vjp_n_case(
                lambda *xs: jnp.concatenate(xs, axis=0), [a[:2], b[:1], c[:3]]
            ),
            "concatenate_axis1": vjp_n_case(
                lambda *xs: jnp.concatenate(xs, axis=1), [a[:, :2], b[:, :5], c[:, :1]]
            ),
            "concatenate_axis-1_3d": vjp_n_case(
                lambda *xs: jnp.concatenate(xs, axis=-1),
                [a.reshape(2, 2, 6), b.reshape(2, 2, 6)[..., :3]],
            ),
            "concatenate_axis1_3d": vjp_n_case(
                lambda *xs: jnp.concatenate(xs, axis=1),
                [a.reshape(2, 3, 4), b.reshape(2, 3, 4)[:, :1], c.reshape(2, 3, 4)[:, :2]],
            ),
            "concatenate_one": vjp_n_case(lambda x: jnp.concatenate([x], axis=0), [b]),
            "concatenate_special_ct": vjp_n_case(
                lambda *xs: jnp.concatenate(xs, axis=0), [a[:1], b[:3]], special_ct
            ),
        }
    )
    return compare, vjp_n


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
    compare, vjp_n = comparisons_and_selects(jax.random.fold_in(k, 2))
    fixture = {
        "versions": EXPECTED,
        "vjp": cases,
        "compare": compare,
        "vjp_n": vjp_n,
        "one_hot": {"labels": enc(labels), "out": enc(jax.nn.one_hot(labels, 6))},
        "argmax": {"x": enc(ties), "out": enc(jnp.argmax(ties, axis=1)), "min": enc(jnp.argmin(ties, axis=1))},
        "split": {"x": enc(x), "parts": [enc(p) for p in jnp.split(x, 3, axis=1)]},
    }
    with open(OUT, "w") as f:
        json.dump(fixture, f, indent=0)
        f.write("\n")


if __name__ == "__main__":
    main()
