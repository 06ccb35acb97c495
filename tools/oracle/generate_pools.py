"""`flax.linen.avg_pool` and its cotangent, eager and jitted.

`lax.reduce_window(x, 0., add, ...)` runs on YNNPACK for windows that do
not overlap with at least 4,096 input or output elements, else as XLA's
loop; the cotangent (a `reduce-window` of the dilated output cotangent)
always as the loop (src/xla/reduce_window.rs). The cases cover both back
ends: 2-D windows of 2x2, 3x3, 7x7 and 2x3, overlapping (stride 1 or 2,
SAME and VALID; jitted, XLA's loop hoists a window axis of 2 in the
cotangent), VALID leaving columns out, channels 1, 3, 8 and 16,
`count_include_pad=False`, 1-D and 3-D pools, an input without a batch
axis and one with two, asymmetric explicit padding.

For each case, with `f(x) = avg_pool(x, window, strides, padding,
count_include_pad)`:

* `y`: eager `f(x)`; `dx`: eager `jax.grad(lambda x: jnp.sum(f(x) * c))`;
* `jit_y`: `jax.jit(f)(x)`; `jit_dx`: `jax.jit` of that gradient.

Inputs are not stored: both sides make them with generate_gemv's `inputs`
(tests/common's `uniform_inputs`, values in [-2, 2)): `x = inputs(shape,
1)`, `c = inputs(y.shape, 2)`. YNNPACK tiles its sums only with a thread
pool: these bits are a machine with 2 CPUs'.

Pinned: jax==0.10.2, jaxlib==0.10.2 (CPU), flax==0.12.8. From the
repository root:

    .venv-oracle/bin/python tools/oracle/generate_pools.py

Writes tests/fixtures/pools.json.
"""

import json
import os
import sys

import jax
import jax.numpy as jnp
import flax.linen as nn

sys.path.insert(0, os.path.dirname(__file__))
from fixture_io import expected  # noqa: E402
from generate_gemv import inputs  # noqa: E402
from generate_random import check_versions  # noqa: E402

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "pools.json")

# (shape, window, strides, padding, count_include_pad); padding "SAME",
# "VALID" or (low, high) pairs per spatial axis.
CASES = [
    # The CNN's pools: YNNPACK (51,200 inputs), then the loop.
    ((100, 8, 8, 8), (2, 2), (2, 2), "VALID", True),
    ((100, 3, 3, 16), (2, 2), (2, 2), "VALID", True),
    # The loop, 2x2 rows a power of two apart (vectorized) or not.
    ((2, 8, 8, 8), (2, 2), (2, 2), "VALID", True),
    ((2, 6, 6, 3), (2, 2), (2, 2), "VALID", True),
    ((2, 8, 8, 1), (2, 2), (2, 2), "VALID", True),
    # Overlapping windows.
    ((3, 9, 9, 4), (3, 3), (2, 2), "SAME", True),
    ((3, 9, 9, 4), (3, 3), (2, 2), "SAME", False),
    ((3, 9, 9, 4), (2, 2), (1, 1), "SAME", True),
    ((3, 9, 9, 4), (2, 2), (1, 1), "VALID", True),
    ((2, 10, 10, 3), (3, 3), (1, 1), "SAME", True),
    ((8, 14, 14, 8), (3, 3), (2, 2), "SAME", True),
    ((8, 14, 14, 8), (3, 3), (2, 2), "SAME", False),
    ((2, 9, 10, 16), (3, 2), (1, 1), "VALID", True),
    ((2, 9, 10, 8), (4, 2), (1, 1), "SAME", True),
    ((2, 9, 10, 8), (3, 2), (2, 1), "VALID", True),
    ((2, 9, 10, 8), (2, 3), (1, 1), "SAME", True),
    ((16, 28, 28, 8), (3, 3), (1, 1), "SAME", True),
    # Global and 7x7 pools: the loop (3,136 inputs), YNNPACK with columns
    # left out by VALID.
    ((4, 7, 7, 16), (7, 7), (7, 7), "VALID", True),
    ((32, 8, 8, 16), (7, 7), (7, 7), "VALID", True),
    # YNNPACK: large, one channel, three channels, SAME, not counting
    # padding, 2x3 windows.
    ((32, 28, 28, 16), (2, 2), (2, 2), "VALID", True),
    ((16, 16, 16, 1), (2, 2), (2, 2), "VALID", True),
    ((16, 12, 12, 3), (3, 3), (3, 3), "VALID", True),
    ((16, 16, 16, 16), (2, 2), (2, 2), "SAME", True),
    ((16, 9, 9, 8), (2, 2), (2, 2), "SAME", False),
    ((16, 15, 15, 16), (3, 3), (3, 3), "SAME", True),
    ((8, 8, 9, 17), (2, 3), (2, 3), "VALID", True),
    # 1-D and 3-D pools, no batch axis, two batch axes.
    ((4, 30, 3), (3,), (3,), "VALID", True),
    ((4, 30, 3), (3,), (1,), "SAME", True),
    ((2, 6, 6, 6, 4), (2, 2, 2), (2, 2, 2), "VALID", True),
    ((2, 6, 7, 5, 4), (3, 2, 2), (1, 1, 1), "VALID", True),
    ((2, 6, 7, 5, 4), (2, 2, 3), (1, 1, 1), "VALID", True),
    ((8, 8, 3), (2, 2), (2, 2), "VALID", True),
    ((2, 3, 8, 8, 4), (2, 2), (2, 2), "VALID", True),
    # Asymmetric explicit padding. The last window at stride 2 stops short
    # of the high padding ((0, 1) read as (0, 0), (0, 2) as (0, 1)), or
    # reaches it; low padding only.
    ((3, 9, 9, 4), (3, 3), (2, 2), ((1, 2), (0, 1)), True),
    ((2, 8, 8, 4), (3, 3), (2, 2), ((0, 2), (0, 2)), True),
    ((2, 8, 8, 3), (2, 2), (1, 1), ((1, 0), (0, 1)), True),
    ((2, 9, 9, 4), (3, 3), (1, 1), ((2, 0), (0, 2)), True),
    ((2, 10, 9, 4), (3, 2), (2, 2), ((0, 1), (1, 1)), True),
    ((2, 7, 7, 4), (2, 2), (2, 2), ((0, 1), (0, 1)), True),
    ((2, 9, 8, 4), (3, 3), (2, 2), ((1, 2), (0, 1)), False),
    # Which window loop XLA peels: the inner one of 2 padded low, the outer
    # one padded (0, 1) past an inner one padded on both ends, none for
    # (0, 2); the inner one of a 2x2 padded on both ends.
    ((2, 9, 9, 4), (3, 2), (1, 1), ((0, 0), (1, 0)), True),
    ((2, 9, 9, 4), (3, 3), (1, 1), ((0, 1), (1, 1)), True),
    ((2, 9, 9, 4), (3, 3), (1, 1), ((0, 2), (0, 0)), True),
    ((2, 9, 9, 4), (3, 3), (1, 1), ((0, 1), (0, 0)), True),
    ((2, 9, 9, 4), (2, 2), (1, 1), ((1, 1), (1, 1)), True),
]


def main():
    check_versions()
    cases = []
    for shape, window, strides, padding, cip in CASES:
        pad = padding if isinstance(padding, str) else [list(p) for p in padding]

        def f(x, window=window, strides=strides, padding=padding, cip=cip):
            return nn.avg_pool(x, window, strides, padding, count_include_pad=cip)

        def loss(x, c, f=f):
            return jnp.sum(f(x) * c)

        x = jnp.asarray(inputs(shape, 1))
        y = f(x)
        c = jnp.asarray(inputs(y.shape, 2))
        cases.append({
            "shape": list(shape),
            "window": list(window),
            "strides": list(strides),
            "padding": pad,
            "count_include_pad": cip,
            "y": expected(y),
            "dx": expected(jax.grad(loss)(x, c)),
            "jit_y": expected(jax.jit(f)(x)),
            "jit_dx": expected(jax.jit(jax.grad(loss))(x, c)),
        })
    with open(OUT, "w") as fh:
        json.dump({"cases": cases}, fh)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
