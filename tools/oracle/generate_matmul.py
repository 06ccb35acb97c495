"""Oracle for `Tensor::matmul`: products and their VJPs, bit for bit.

Pinned: jax==0.10.2, jaxlib==0.10.2 (CPU). Inputs are not stored: both
sides make them with `inputs` below (integer hashes, exact in f64), so the
fixture keeps only the expected results: u32 bit patterns, or for arrays of
more than 4,096 elements the SHA-1 of their bits and their length
(`fixture_io.expected`; tests/common's `digest` hashes flaxen's the same
way).
Recorded on an x86-64 CPU with AVX-512F (AMD EPYC, Zen 4): XLA:CPU hands most
f32 dots to YNNPACK, whose kernel choice depends on the CPU's ISA.

For each case: `a`, `b` and a cotangent `g` (made from seeds 3i, 3i + 1,
3i + 2), and `jnp.matmul(a, b)` with the two
cotangents of `jax.vjp(jnp.matmul, a, b)`, computed eagerly; the same three
from one `jax.jit` of (forward, vjp) are stored under `jit_*` only where they
differ from the eager ones.

Run: .venv-oracle/bin/python tools/oracle/generate_matmul.py
Writes tests/fixtures/matmul.json.
"""

import json
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from fixture_io import expected  # noqa: E402

assert jax.__version__ == "0.10.2", jax.__version__

# (a shape, b shape): MLP forward [B, k] @ [k, n] and its gradients, edge
# shapes of YNNPACK's kernel choice (k mod 4 tails, k-chunking, column
# tiles), XLA's own emitter (small, one row/column), batched products.
SHAPES = [
    ((1, 3), (3, 4)), ((5, 3), (3, 4)), ((40, 3), (3, 4)), ((40, 4), (4, 2)),
    ((3, 40), (40, 4)), ((4, 40), (40, 2)), ((3, 40), (40, 3)), ((40, 3), (3, 3)),
    ((3, 5), (5, 4)), ((2, 2), (2, 2)), ((7, 7), (7, 7)), ((8, 8), (8, 8)),
    ((5, 9), (9, 3)), ((17, 7), (7, 3)), ((16, 15), (15, 7)), ((9, 7), (7, 9)),
    ((16, 16), (16, 16)), ((32, 64), (64, 32)), ((64, 128), (128, 64)),
    ((8, 2), (2, 3)), ((8, 3), (3, 2)), ((8, 3), (3, 16)), ((8, 16), (16, 1)),
    ((1, 16), (16, 8)), ((1, 64), (64, 10)), ((32, 10), (10, 1)),
    ((4, 100), (100, 512)), ((2, 300), (300, 256)), ((16, 256), (256, 256)),
    ((7, 513), (513, 40)), ((17, 33), (33, 9)), ((31, 17), (17, 5)),
    ((16, 600), (600, 64)), ((100, 33), (33, 10)), ((128, 64), (64, 10)),
    ((32, 784), (784, 16)), ((64, 128), (128, 128)), ((128, 32), (32, 64)),
    ((256, 17), (17, 8)), ((9, 128), (128, 3)), ((2, 784), (784, 17)),
    ((2, 3, 4), (4, 5)), ((3, 16, 32), (32, 24)), ((4, 8, 9), (4, 9, 10)),
    ((2, 1, 9, 16), (3, 16, 8)),
]


def inputs(shape, seed):
    """Mixed magnitudes: u * 2^e with u = ((j * 2654435761 + seed * 40503)
    mod 2^32) / 2^32 * 4 - 2 and e = ((j * 40503 + seed * 2654435761) >> 7)
    mod 13 - 6, in f64, then rounded to f32 (j: the row-major index)."""
    n = int(np.prod(shape))
    j = np.arange(n, dtype=np.uint64)
    h = (j * np.uint64(2654435761) + np.uint64(seed * 40503)) % np.uint64(2**32)
    e = ((j * np.uint64(40503) + np.uint64(seed * 2654435761)) >> np.uint64(7)) % np.uint64(13)
    u = h.astype(np.float64) / 2**32 * 4 - 2
    return (u * np.exp2(e.astype(np.float64) - 6)).astype(np.float32).reshape(shape)


def bits(x):
    return np.asarray(x, np.float32).view(np.uint32).ravel().tolist()


def main():
    def fwd_vjp(a, b, g):
        y, vjp = jax.vjp(jnp.matmul, a, b)
        da, db = vjp(g)
        return y, da, db

    jitted = jax.jit(fwd_vjp)
    cases = []
    differ = []
    for i, (sa, sb) in enumerate(SHAPES):
        a, b = inputs(sa, 3 * i), inputs(sb, 3 * i + 1)
        y_shape = np.matmul(a, b).shape
        g = inputs(y_shape, 3 * i + 2)
        eager = fwd_vjp(a, b, g)
        jit = jitted(a, b, g)
        case = {
            "a_shape": list(sa), "b_shape": list(sb),
            "y": expected(eager[0]), "da": expected(eager[1]), "db": expected(eager[2]),
        }
        for name, e, j in zip(("y", "da", "db"), eager, jit):
            if bits(e) != bits(j):
                case["jit_" + name] = expected(j)
                differ.append(f"{sa}@{sb}:{name}")
        cases.append(case)
    out = os.path.join(os.path.dirname(__file__), "../../tests/fixtures/matmul.json")
    with open(out, "w") as f:
        json.dump({"jax": jax.__version__, "cases": cases}, f, separators=(",", ":"))
    print("eager != jit:", differ or "none")


if __name__ == "__main__":
    main()
