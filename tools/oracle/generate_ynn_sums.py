"""Sums that XLA:CPU hands to YNNPACK (at least 4,096 input elements):
full sums, sums over the last axis, over leading axes (BatchNorm's
statistics over (N, H, W)), over middle axes, a mean, and some with NaN,
infinities and -0 set into their inputs, computed by
eager `jnp.sum` / `jnp.mean` (jax 0.10.2, CPU).

Inputs are not stored: both sides make them with `inputs` below (the
hashed mixed magnitudes of generate_matmul.py, which
`tests/common::hashed_inputs` reproduces), so the fixture keeps only the
expected bits. YNNPACK splits long reductions into tiles only when XLA
runs it with a thread pool: these bits are a machine with 2 CPUs'.

Pinned: jax==0.10.2, jaxlib==0.10.2 (CPU). From the repository root:

    .venv-oracle/bin/python tools/oracle/generate_ynn_sums.py

Writes tests/fixtures/ynn_sums.json. Floats are u32 bit patterns.
"""

import json
import os
import sys

import numpy as np

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(__file__))
from generate_matmul import inputs  # noqa: E402
from generate_random import check_versions  # noqa: E402

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "ynn_sums.json")

# (shape, axes or None for all, mean).
CASES = [
    ((4096,), None, False),
    ((5000,), None, False),
    ((32768,), None, False),
    ((32769,), None, False),
    ((100000,), None, False),
    ((64, 64), None, False),
    ((300, 70), None, False),
    ((8, 16, 16, 3), None, False),
    ((2, 128, 128), None, False),
    ((32, 128), (1,), False),
    ((8, 4096), (1,), False),
    ((2, 50000), (1,), False),
    ((3, 20000), (-1,), False),
    ((128, 512), (0,), False),
    ((4096, 3), (0,), False),
    ((1000, 40), (0,), False),
    ((300, 300), (0,), False),
    ((8, 16, 16, 1), (0, 1, 2), False),
    ((8, 16, 16, 3), (0, 1, 2), False),
    ((8, 16, 16, 16), (0, 1, 2), False),
    ((32, 16, 16, 16), (0, 1, 2), False),
    ((32, 16, 16, 64), (0, 1, 2), False),
    ((32, 16, 16, 100), (0, 1, 2), False),
    ((32, 16, 16, 16), (0, 1, 2), True),
    ((4, 2048, 8), (1,), False),
    ((16, 32, 16), (0, 2), False),
    ((64, 8, 16), (0, 1), False),
]


NAN, PINF, NINF = 0x7FC00000, 0x7F800000, 0xFF800000

# Non-finite inputs (seeds continue after CASES): (shape, axes, edits as
# [row-major index, u32 bits]). Row 0 an infinity, row 1 a NaN, row 2
# infinities of both signs, row 3 a -0 among its values; BatchNorm-like
# columns with an infinity in one tile and a NaN in another.
NONFINITE = [
    ((8, 4096), (1,), [[5, PINF], [4096 + 7, NAN], [2 * 4096 + 3, NINF], [2 * 4096 + 100, PINF],
                       [3 * 4096, 0x80000000]]),
    ((32, 16, 16, 16), (0, 1, 2), [[3, PINF], [20 * 4096 + 5, NAN], [31 * 4096 + 7, NINF]]),
    ((40000,), None, [[39999, PINF]]),
]

# Rows longer than a tile, of 2 to 16 rows (seeds continue after
# NONFINITE): YNNPACK tiles a stored array's rows only when there are
# fewer than twice its threads.
MANY_ROWS = [((3, 40000), (1,)), ((4, 40000), (1,)), ((8, 40000), (-1,)), ((16, 33000), (1,))]


def main():
    check_versions()
    cases = []
    for i, (shape, axes, mean) in enumerate(CASES):
        seed = 500 + i
        x = jnp.asarray(inputs(shape, seed))
        f = jnp.mean if mean else jnp.sum
        y = f(x) if axes is None else f(x, axis=axes)
        cases.append({
            "shape": list(shape), "axes": None if axes is None else list(axes), "mean": mean,
            "seed": seed,
            "y": np.asarray(y, np.float32).reshape(-1).view(np.uint32).tolist(),
        })
    for i, (shape, axes, edits) in enumerate(NONFINITE):
        seed = 500 + len(CASES) + i
        flat = np.array(inputs(shape, seed)).reshape(-1)
        for at, b in edits:
            flat[at] = np.array([b], np.uint32).view(np.float32)[0]
        x = jnp.asarray(flat.reshape(shape))
        y = jnp.sum(x) if axes is None else jnp.sum(x, axis=axes)
        cases.append({
            "shape": list(shape), "axes": None if axes is None else list(axes), "mean": False,
            "seed": seed, "edits": edits,
            "y": np.asarray(y, np.float32).reshape(-1).view(np.uint32).tolist(),
        })
    for i, (shape, axes) in enumerate(MANY_ROWS):
        seed = 500 + len(CASES) + len(NONFINITE) + i
        y = jnp.sum(jnp.asarray(inputs(shape, seed)), axis=axes)
        cases.append({
            "shape": list(shape), "axes": list(axes), "mean": False, "seed": seed,
            "y": np.asarray(y, np.float32).reshape(-1).view(np.uint32).tolist(),
        })
    with open(OUT, "w") as f:
        json.dump({"cases": cases}, f)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
