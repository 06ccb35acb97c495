"""Jitted sums over all axes of a product, which XLA:CPU fuses into the
reduction (`jnp.sum(x * c)`, `jnp.mean((h - y) ** 2)`), against their eager
values (the product rounded, then summed in the plain order).

Under `jax.jit`, a product summed over all axes of an array of fewer than
4,096 elements whose axes are all at most 32 long is one loop fusion: the
reduction's loop nest (src/xla/reduce.rs) with the product computed in
the loop, and LLVM contracts multiply and add into a fused multiply-add
(the product is never rounded). With a longer axis the product is a
fusion of its own (rounded) before XLA's tree reduction; from 4,096
elements the fusion goes to YNNPACK (the plain order of the rounded
products, for the shapes here).

For each case (an operation and a shape):

* `value`: the eager result's bits; `jit`: `jax.jit(f)`'s;
* `jit_vg`: `jax.jit(jax.value_and_grad(f))`'s value, and `jit_dx` its
  gradient with respect to `x` (digest), which the fusion does not touch.

The operations, with `x = inputs(shape, seed)`, `c = inputs(shape, seed +
1)` (tools/oracle/generate_gemv.py's `inputs`, tests/common's
`uniform_inputs`, values in [-2, 2)):

* `sum_xc`: `sum(x * c)`; `sum_xr`: `sum(x * r)`, `r = inputs(shape[-1:],
  seed + 1)` (a row broadcast along the leading axes); `sum_xs`:
  `sum(x * s)`, `s = inputs((), seed + 1)`;
* `sum_xx`: `sum(x * x)`; `mean_sq`: `mean((x - c) ** 2)`; `mean_xc`:
  `mean(x * c)`.

And sums over some axes (`partial`, see `partial_cases`), fused the same
way where XLA fuses them: `psum_xc` (`sum(x * c, axes)`, `c` of `x`'s
shape), `psum_xr` (`c` a row), `psum_xk` (`c` a column,
`inputs(shape[:-1] + (1,), seed + 1)`), `psum_xx` (`sum(x * x, axes)`),
`pmean_sq` (`mean(square(x), axes)`), `pmean_xr` (`mean(x * c, axes,
keepdims=True)`, `c` a row): one reduced axis (either end), several
trailing ones, several with a kept axis after them, an axis longer than
32, and 4,096 elements or more.

Pinned: jax==0.10.2, jaxlib==0.10.2 (CPU), flax==0.12.8. From the
repository root:

    .venv-oracle/bin/python tools/oracle/generate_fused_sums.py

Writes tests/fixtures/fused_sums.json.
"""

import json
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from fixture_io import expected  # noqa: E402
from generate_gemv import inputs  # noqa: E402
from generate_random import check_versions  # noqa: E402

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "fused_sums.json")

OPS = {
    "sum_xc": lambda x, c: jnp.sum(x * c),
    "sum_xr": lambda x, c: jnp.sum(x * c),
    "sum_xs": lambda x, c: jnp.sum(x * c),
    "sum_xx": lambda x, c: jnp.sum(x * x),
    "mean_sq": lambda x, c: jnp.mean((x - c) ** 2),
    "mean_xc": lambda x, c: jnp.mean(x * c),
}

SHAPES = [
    # One loop: the products summed in order.
    (7,), (16,), (32,),
    # Two loops; the outer one vectorized (rows of at most 8) or not.
    (3, 7), (8, 8), (8, 7), (17, 5), (20, 3), (32, 32), (2, 4), (13, 6),
    (29, 8), (4, 2), (24, 3), (16, 2), (31, 31), (6, 9),
    # Three and four axes (outer loops around the vectorized two).
    (2, 5, 16), (1, 20, 3), (8, 20, 3), (4, 8, 8), (3, 8, 7), (5, 18, 6),
    (32, 32, 3), (2, 3, 21, 5), (2, 2, 12, 3), (7, 1, 16, 4),
    # An axis longer than 32: the product rounded, then the plain sum.
    (40,), (100,), (3, 40), (2, 5, 33), (100, 3),
    # 4,096 elements or more: YNNPACK's fusion.
    (16, 16, 16), (32, 32, 8), (8, 20, 64),
]


# Sums over some axes: (shape, axes).
PARTIAL_SHAPES = [
    # One reduced axis, not the last: one fma chain per output.
    ((2, 5), (0,)), ((3, 17), (0,)), ((8, 8), (0,)), ((16, 33), (0,)),
    ((32, 12), (0,)), ((5, 3, 4), (1,)), ((1, 9), (0,)), ((31, 128), (0,)),
    # The last axis: one chain per row; rows of 5 to 8 of a square (and of
    # two full factors) are vectorized otherwise.
    ((2, 5), (1,)), ((3, 17), (1,)), ((8, 8), (1,)), ((7, 6), (1,)),
    ((31, 7), (1,)), ((5, 32), (1,)), ((4, 3, 12), (2,)),
    # Several trailing axes: product_sum's nest for each output.
    ((2, 3, 4), (1, 2)), ((4, 8, 8), (1, 2)), ((3, 16, 8), (1, 2)),
    ((2, 20, 3), (1, 2)), ((4, 6, 5, 3), (1, 2, 3)), ((3, 32, 32), (1, 2)),
    # Several axes with the kept ones after them (a BatchNorm's NHWC
    # statistics): one nest per output, vectorized by what it loads.
    # (more at the end).
    ((2, 3, 4), (0, 1)), ((8, 4, 4, 8), (0, 1, 2)),
    # A reduced axis longer than 32: the product rounded, then the plain
    # sums.
    ((40, 3), (0,)), ((3, 40), (1,)), ((100, 6), (0,)), ((2, 40, 4), (1, 2)),
    # 4,096 elements or more: YNNPACK.
    ((64, 64), (0,)), ((16, 512), (0,)), ((64, 64), (1,)),
    # Appended (the cases above keep their seeds): more axes with the kept
    # ones after them, their rows taken by 2 to 8 lanes or in order, and a
    # BatchNorm's statistics of 32,768 elements (YNNPACK).
    ((8, 2, 8), (0, 1)), ((2, 8, 4, 4), (0, 1, 2)), ((8, 8, 3), (0, 1)),
    ((16, 4, 8), (0, 1)), ((20, 3, 8), (0, 1)), ((4, 4, 4, 16), (0, 1, 2)),
    ((3, 9, 5), (0, 1)), ((16, 8, 8, 32), (0, 1, 2)),
]

# op: (second factor's shape from the product's, f(x, c, axes)).
PARTIAL_OPS = {
    "psum_xc": (lambda s: s, lambda x, c, ax: jnp.sum(x * c, axis=ax)),
    "psum_xr": (lambda s: s[-1:], lambda x, c, ax: jnp.sum(x * c, axis=ax)),
    "psum_xk": (lambda s: s[:-1] + (1,), lambda x, c, ax: jnp.sum(x * c, axis=ax)),
    "psum_xx": (lambda s: (), lambda x, c, ax: jnp.sum(x * x, axis=ax)),
    "pmean_sq": (lambda s: (), lambda x, c, ax: jnp.mean(jnp.square(x), axis=ax)),
    "pmean_xr": (
        lambda s: s[-1:],
        lambda x, c, ax: jnp.mean(x * c, axis=ax, keepdims=True),
    ),
}


def partial_cases():
    """Sums over some axes: `value` (eager), `jit` (`jax.jit(f)`), and
    from `jax.jit(jax.value_and_grad(loss, has_aux=True))` with `loss =
    sum(f(x, c) * d)` (`d = inputs(f's shape, seed + 2)`, an argument like
    `x` and `c`) and `f` the aux:
    `jit_aux` (the sums inside the jitted gradient), `jit_vg` (the loss)
    and `jit_dx` (its gradient with respect to `x`, digest)."""
    cases = []
    for n, (shape, axes) in enumerate(PARTIAL_SHAPES):
        for op, (cshape, f) in PARTIAL_OPS.items():
            seed = 10 * n + 5001
            x = jnp.asarray(inputs(shape, seed))
            c = jnp.asarray(inputs(cshape(shape), seed + 1))
            value = f(x, c, axes)
            d = jnp.asarray(inputs(value.shape, seed + 2))

            # `d` an argument (not a constant of the program): XLA would
            # fold a constant cotangent's `d / n` (a mean's) into a
            # division, where it multiplies an argument by `1 / n`.
            def loss(x, c, d):
                y = f(x, c, axes)
                return jnp.sum(y * d), y

            (vg, aux), dx = jax.jit(jax.value_and_grad(loss, has_aux=True))(x, c, d)
            cases.append({
                "op": op,
                "shape": list(shape),
                "axes": list(axes),
                "seed": seed,
                "value": expected(value),
                "jit": expected(jax.jit(lambda x, c: f(x, c, axes))(x, c)),
                "jit_aux": expected(aux),
                "jit_vg": expected(vg)[0],
                "jit_dx": expected(dx, limit=0),
            })
    return cases


def factor(op, shape, seed):
    if op == "sum_xr":
        return inputs(shape[-1:], seed + 1)
    if op == "sum_xs":
        return inputs((), seed + 1)
    return inputs(shape, seed + 1)


def main():
    check_versions()
    cases = []
    for n, shape in enumerate(SHAPES):
        for op, f in OPS.items():
            seed = 10 * n + 1
            x = jnp.asarray(inputs(shape, seed))
            c = jnp.asarray(factor(op, shape, seed))
            value, dx = jax.jit(jax.value_and_grad(f))(x, c)
            cases.append({
                "op": op,
                "shape": list(shape),
                "seed": seed,
                "value": expected(f(x, c))[0],
                "jit": expected(jax.jit(f)(x, c))[0],
                "jit_vg": expected(value)[0],
                "jit_dx": expected(dx, limit=0),
            })
    partial = partial_cases()
    with open(OUT, "w") as fh:
        json.dump({"cases": cases, "partial": partial}, fh, separators=(",", ":"))
    differ = sum(c["jit"] != c["value"] for c in cases)
    print(f"wrote {OUT}: {len(cases)} cases, {differ} jitted differ from eager")
    differ = sum(c["jit"] != c["value"] for c in partial)
    print(f"{len(partial)} partial sums, {differ} jitted differ from eager")


if __name__ == "__main__":
    main()
