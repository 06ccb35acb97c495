"""Conformance fixtures for `x.T @ g` with one column (x: [k, f], g: [k, 1]),
the product of a transposed matrix and a vector, three ways JAX computes it:

* `eager`: `x.T @ g` run op by op. JAX copies the transpose row-major and
  runs XLA's row-major GEMV on the copy (`[f, k] @ [k, 1]`); with one
  feature (`f == 1`) a dot of two vectors.
* `jit`: `jax.jit(lambda x, g: x.T @ g)` (and `jnp.dot(x.T, g)`, checked to
  give the same bits). XLA fuses the transpose and the dot into one loop
  while the vector is under 16 KiB (`k < 4096`), which LLVM vectorizes
  (src/xla/fused_dot.rs); from 4,096 rows it copies the transpose and runs
  the GEMV, as eagerly.
* `grad`: the weight gradient of a `Dense(1)` head without bias, `jax.grad`
  of `sum((x @ w) * c)` with respect to `w` (a `dot_general` contracting
  the batch, XLA's column-major GEMV); `jax.jit(jax.grad(...))` is checked
  to give the same bits.

Inputs are not stored: both sides make them with `inputs` below (an integer
hash, exact in f64), seeded `31 * f + k` (x) and `31 * f + k + 1` (g).
Results of more than 16 values are stored as the SHA-1 of their bits
(fixture_io's `expected`), so that the fixture stays small.

Pinned: jax==0.10.2, jaxlib==0.10.2 (CPU). From the repository root:

    .venv-oracle/bin/python tools/oracle/generate_xt_g.py

Writes tests/fixtures/xt_g.json.
"""

import json
import os
import sys

import numpy as np

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(__file__))
from generate_random import check_versions  # noqa: E402
from generate_gemv import inputs  # noqa: E402
from fixture_io import expected  # noqa: E402

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "xt_g.json")

# Rows k and features f of the main grid (every way the fused loop is
# vectorized up to 70 rows, then longer loops and the GEMV from 4,096).
KS = list(range(1, 71)) + [100, 128, 255, 256, 1000, 4095, 4096]
FS = [1, 2, 3, 7, 16, 33, 128]
# More feature counts for the jitted product only (the strided loads of
# each small f cost LLVM differently, which decides how it vectorizes).
MORE_KS = [33, 49, 50, 51, 52, 56, 59, 60, 63, 64, 65, 66, 67, 70, 96, 97, 100, 127, 128,
           129, 200, 255, 256, 257, 513, 1000, 2047, 4095]
MORE_FS = [4, 5, 6, 8, 9, 12, 17]
# Around the most blocks of 32 rows LLVM unrolls fully with 2 to 8 features
# (10 to 14, by the stride), with remainders that leave an epilogue.
UNROLL_KS = [330, 365, 398, 477, 510]
UNROLL_FS = range(2, 9)
# Results with more than this many values are stored as a digest.
BITS_LIMIT = 16


def head_loss(w, x, c):
    return jnp.sum((x @ w) * c)


def main():
    check_versions()
    jitted = jax.jit(lambda x, g: x.T @ g)
    jitted_dot = jax.jit(lambda x, g: jnp.dot(x.T, g))
    grad = jax.grad(head_loss)
    jitted_grad = jax.jit(jax.grad(head_loss))
    cases = []
    for f in FS:
        for k in KS:
            x = jnp.asarray(inputs((k, f), 31 * f + k))
            g = jnp.asarray(inputs((k, 1), 31 * f + k + 1))
            eager = x.T @ g
            jit = jitted(x, g)
            assert np.array_equal(np.asarray(jit), np.asarray(jitted_dot(x, g))), (k, f)
            w0 = jnp.zeros((f, 1), jnp.float32)
            dw = grad(w0, x, g)
            assert np.array_equal(np.asarray(dw), np.asarray(jitted_grad(w0, x, g))), (k, f)
            cases.append({"k": k, "f": f,
                          "eager": expected(eager, BITS_LIMIT),
                          "jit": expected(jit, BITS_LIMIT),
                          "grad": expected(dw, BITS_LIMIT)})
    more = []
    more_shapes = [(k, f) for f in MORE_FS for k in MORE_KS]
    more_shapes += [(k, f) for f in UNROLL_FS for k in UNROLL_KS]
    for k, f in more_shapes:
        x = jnp.asarray(inputs((k, f), 31 * f + k))
        g = jnp.asarray(inputs((k, 1), 31 * f + k + 1))
        more.append({"k": k, "f": f, "jit": expected(jitted(x, g), BITS_LIMIT)})
    with open(OUT, "w") as out:
        json.dump({"jax": jax.__version__, "cases": cases, "more_jit": more}, out,
                  separators=(",", ":"))
    print(f"wrote {OUT}: {len(cases)} cases, {len(more)} more jitted")


if __name__ == "__main__":
    main()
