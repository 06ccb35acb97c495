"""`flax.linen.max_pool` and its cotangent, eager and jitted.

The forward pass is `lax.reduce_window` with `max` from `-inf`: YNNPACK's
for windows that do not overlap with at least 4,096 input or output
elements (its own order of `max`, which NaN and signed zeros expose),
else XLA's loop (`llvm.maximum`: NaN-propagating, `-0 < +0`). The
cotangent is `select_and_scatter_add` (`ge`), which XLA:CPU expands into
a `pad` with `-inf`, a variadic `reduce-window` choosing one element per
window, and a `scatter` adding each window's cotangent in row-major order
(src/xla/select_scatter.rs). Ties decide which element gets the
cotangent, so most inputs here are tie-rich:

* `uniform`: `inputs(shape, 1)` (tests/common's `uniform_inputs`, values
  in [-2, 2));
* `ties`: `max(floor(u), 0)` of those (ReLU of rounded values: zeros and
  ones);
* `equal`: every value 1;
* `neg_inf`: `-inf` where `u < 0`, else `max(floor(u), 0)` (windows of
  `-inf` only, whose cotangent goes to their first element, padding
  included);
* `special`: `[0, -0, nan, -inf, inf, 1, -1][floor((u + 2) * 7 / 4)]`
  (in f64 from the f32 `u`, the index at most 6).

For each case, with `f(x) = max_pool(x, window, strides, padding)` and
`c = inputs(y.shape, 2)`:

* `y`: eager `f(x)`; `dx`: eager `jax.grad(lambda x: jnp.sum(f(x) * c))`;
* `jit_y`: `jax.jit(f)(x)`; `jit_dx`: `jax.jit` of that gradient;
* `jvp`: the tangent of eager `jax.jvp(f, (x,), (t,))`, `t = inputs(shape,
  3)` (`select_and_gather_add`).

Pinned: jax==0.10.2, jaxlib==0.10.2 (CPU), flax==0.12.8; a machine with 2
CPUs (YNNPACK's tiles). From the repository root:

    .venv-oracle/bin/python tools/oracle/generate_max_pools.py

Writes tests/fixtures/max_pools.json.
"""

import json
import os
import sys

import jax
import jax.numpy as jnp
import flax.linen as nn
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from fixture_io import expected  # noqa: E402
from generate_gemv import inputs  # noqa: E402
from generate_random import check_versions  # noqa: E402

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "max_pools.json")

SPECIAL = np.array([0.0, -0.0, np.nan, -np.inf, np.inf, 1.0, -1.0], np.float32)

# (shape, window, strides, padding, values); padding "SAME", "VALID" or
# (low, high) pairs per spatial axis.
CASES = [
    # YNNPACK (no overlap, from 4,096 elements).
    ((8, 28, 28, 16), (2, 2), (2, 2), "VALID", "ties"),
    ((8, 28, 28, 16), (2, 2), (2, 2), "VALID", "uniform"),
    ((8, 28, 28, 16), (2, 2), (2, 2), "VALID", "special"),
    ((4, 16, 16, 32), (3, 3), (3, 3), "SAME", "special"),
    ((16, 12, 12, 3), (3, 3), (3, 3), "SAME", "special"),
    ((8, 27, 27, 16), (2, 2), (2, 2), "SAME", "neg_inf"),
    ((32, 8, 8, 16), (7, 7), (7, 7), "VALID", "special"),
    ((16, 7, 7, 16), (7, 7), (7, 7), "VALID", "special"),
    ((4, 12, 12, 32), (2, 3), (2, 3), "VALID", "special"),
    ((2, 20, 20, 16), (5, 5), (5, 5), "VALID", "special"),
    # YNNPACK: one channel (windows contiguous in memory), and a window
    # row too long for one tile.
    ((16, 16, 16, 1), (2, 2), (2, 2), "VALID", "special"),
    ((1, 6, 87, 128), (3, 3), (3, 3), "VALID", "special"),
    # XLA's loop: overlapping windows, small pools.
    ((4, 14, 14, 32), (3, 3), (2, 2), "SAME", "ties"),
    ((4, 14, 14, 32), (3, 3), (2, 2), "SAME", "uniform"),
    ((2, 9, 9, 4), (3, 3), (1, 1), "SAME", "ties"),
    ((2, 9, 9, 4), (3, 3), (1, 1), "SAME", "uniform"),
    ((2, 9, 9, 4), (3, 3), (2, 2), "VALID", "uniform"),
    ((2, 9, 9, 4), (3, 3), (2, 2), "SAME", "special"),
    ((2, 9, 9, 4), (3, 3), (2, 2), "SAME", "equal"),
    ((2, 9, 9, 4), (3, 3), (2, 2), "SAME", "neg_inf"),
    ((3, 9, 9, 4), (2, 2), (1, 1), "VALID", "ties"),
    ((3, 9, 9, 4), (2, 2), (1, 1), "SAME", "special"),
    ((2, 6, 6, 3), (2, 2), (2, 2), "VALID", "equal"),
    ((16, 28, 28, 8), (3, 3), (1, 1), "SAME", "ties"),
    # Explicit padding, windows of padding only.
    ((2, 9, 9, 4), (3, 3), (2, 2), ((1, 2), (0, 1)), "ties"),
    ((2, 5, 5, 2), (2, 2), (1, 1), ((2, 2), (2, 2)), "uniform"),
    ((2, 7, 7, 2), (3, 3), (1, 1), ((2, 2), (2, 2)), "neg_inf"),
    # 1-D and 3-D pools, no batch axis, two batch axes.
    ((4, 30, 3), (2,), (1,), "VALID", "ties"),
    ((4, 30, 3), (3,), (2,), "SAME", "ties"),
    ((4, 30, 3), (3,), (3,), "VALID", "uniform"),
    ((2, 6, 6, 6, 4), (2, 2, 2), (2, 2, 2), "VALID", "ties"),
    ((2, 6, 7, 5, 4), (3, 2, 2), (1, 1, 1), "VALID", "uniform"),
    ((8, 8, 3), (2, 2), (2, 2), "VALID", "ties"),
    ((2, 3, 8, 8, 4), (2, 2), (2, 2), "VALID", "ties"),
]


def values(shape, kind):
    """The case's input (the module's documentation)."""
    u = inputs(shape, 1)
    if kind == "uniform":
        return u
    ties = np.maximum(np.floor(u), np.float32(0)).astype(np.float32)
    if kind == "ties":
        return ties
    if kind == "equal":
        return np.ones(shape, np.float32)
    if kind == "neg_inf":
        return np.where(u < 0, np.float32(-np.inf), ties).astype(np.float32)
    if kind == "special":
        index = np.minimum(np.floor((u.astype(np.float64) + 2.0) * 7.0 / 4.0), 6).astype(int)
        return SPECIAL[index]
    raise ValueError(kind)


def main():
    check_versions()
    cases = []
    for shape, window, strides, padding, kind in CASES:
        pad = padding if isinstance(padding, str) else [list(p) for p in padding]

        def f(x, window=window, strides=strides, padding=padding):
            return nn.max_pool(x, window, strides, padding)

        def loss(x, c, f=f):
            return jnp.sum(f(x) * c)

        x = jnp.asarray(values(shape, kind))
        y = f(x)
        c = jnp.asarray(inputs(y.shape, 2))
        cases.append({
            "shape": list(shape),
            "window": list(window),
            "strides": list(strides),
            "padding": pad,
            "values": kind,
            "y": expected(y),
            "dx": expected(jax.grad(loss)(x, c)),
            "jit_y": expected(jax.jit(f)(x)),
            "jit_dx": expected(jax.jit(jax.grad(loss))(x, c)),
            "jvp": expected(jax.jvp(f, (x,), (jnp.asarray(inputs(shape, 3)),))[1]),
        })
    with open(OUT, "w") as fh:
        json.dump({"cases": cases}, fh)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
