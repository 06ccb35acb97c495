"""Oracle for batched products (3-D and 4-D `jnp.matmul`, and the two
`jnp.einsum` forms of `flax.linen.dot_product_attention`) and their VJPs,
bit for bit, as XLA:CPU computes them.

Pinned: jax==0.10.2, jaxlib==0.10.2 (CPU; recorded on x86-64 with AVX-512F,
AMD EPYC, Zen 4, where XLA:CPU hands most f32 dots to YNNPACK).

Inputs are not stored: each operand is `jax.random.normal(jax.random.key(
seed), shape)` (f32), which flaxen draws bit for bit as
`flaxen::random::normal(flaxen::random::key(seed), shape)`. For case i, `a`,
`b` and the cotangent `g` use seeds 3i, 3i + 1, 3i + 2.

Kinds:
* `matmul`: `jnp.matmul(a, b)`.
* `scores`: `jnp.einsum('...qhd,...khd->...hqk', q, k)` (a = q, b = k).
* `values`: `jnp.einsum('...hqk,...khd->...qhd', w, v)` (a = w, b = v).

`NONFINITE` cases then set single elements of a, b or g to NaN, infinities
or zero (`edits`: [row-major index, u32 bits] pairs per operand).

For each case: the product and both cotangents of `jax.vjp(f, a, b)` applied
to `g`, computed eagerly (op by op, what flaxen's eager mode mirrors) under
`y`, `da`, `db`; the same three from one `jax.jit` of (forward, vjp) under
`jit_y`, `jit_da`, `jit_db` only where they differ from the eager ones.
Expected arrays are u32 bit patterns, or beyond 4,096 elements the SHA-1 of
their bits (little-endian) and their length, as generate_nonfinite.py
stores them.

From the repository root:

    .venv-oracle/bin/python tools/oracle/generate_batched_matmul.py

Writes tests/fixtures/batched_matmul.json.
"""

import hashlib
import json
import os

import numpy as np

import jax
import jax.numpy as jnp

assert jax.__version__ == "0.10.2", jax.__version__

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures",
                   "batched_matmul.json")

# (kind, a shape, b shape).
CASES = [
    # Both operands batched, [b, m, k] @ [b, k, n].
    ("matmul", (2, 3, 4), (2, 4, 5)),
    ("matmul", (4, 8, 9), (4, 9, 10)),
    ("matmul", (3, 16, 32), (3, 32, 24)),
    ("matmul", (2, 64, 128), (2, 128, 64)),
    ("matmul", (2, 40, 3), (2, 3, 4)),
    ("matmul", (5, 4, 1), (5, 1, 6)),
    ("matmul", (8, 1, 16), (8, 16, 8)),
    ("matmul", (8, 16, 8), (8, 8, 1)),
    ("matmul", (3, 1, 300), (3, 300, 1)),
    ("matmul", (2, 5, 1000), (2, 1000, 7)),
    ("matmul", (2, 33, 2048), (2, 2048, 40)),
    ("matmul", (2, 4, 100), (2, 100, 512)),
    ("matmul", (1, 17, 33), (1, 33, 9)),
    ("matmul", (6, 128, 64), (6, 64, 10)),
    ("matmul", (3, 7, 3000), (3, 3000, 5)),
    # One side broadcast: [b, m, k] @ [k, n], [m, k] @ [b, k, n].
    ("matmul", (2, 3, 4), (4, 5)),
    ("matmul", (3, 16, 32), (32, 24)),
    ("matmul", (4, 1, 64), (64, 10)),
    ("matmul", (8, 16, 16), (16, 1)),
    ("matmul", (4, 32, 784), (784, 16)),
    ("matmul", (2, 7, 513), (513, 40)),
    ("matmul", (16, 1000), (3, 1000, 8)),
    ("matmul", (5, 3), (2, 3, 4)),
    ("matmul", (1, 64), (4, 64, 10)),
    ("matmul", (6, 5, 2), (2, 3)),
    # 1-D operands: [k] @ [b, k, n] and [b, m, k] @ [k].
    ("matmul", (16,), (3, 16, 8)),
    ("matmul", (3, 8, 16), (16,)),
    ("matmul", (300,), (2, 300, 40)),
    ("matmul", (2, 40, 300), (300,)),
    # 4-D, batch dims of 1, broadcast batch dims.
    ("matmul", (2, 3, 8, 16), (2, 3, 16, 8)),
    ("matmul", (2, 1, 9, 16), (3, 16, 8)),
    ("matmul", (1, 4, 8, 8), (4, 8, 8)),
    ("matmul", (1, 1, 5, 7), (1, 1, 7, 6)),
    ("matmul", (2, 3, 8, 16), (16, 8)),
    ("matmul", (2, 3, 20, 64), (1, 3, 64, 20)),
    # Attention scores: q [B, L, H, D], k [B, S, H, D] -> [B, H, L, S].
    ("scores", (2, 8, 4, 16), (2, 8, 4, 16)),
    ("scores", (1, 64, 8, 32), (1, 64, 8, 32)),
    ("scores", (2, 1, 4, 64), (2, 128, 4, 64)),
    ("scores", (4, 128, 2, 64), (4, 128, 2, 64)),
    ("scores", (3, 5, 1, 3), (3, 7, 1, 3)),
    ("scores", (16, 4, 8), (9, 4, 8)),
    ("scores", (2, 3, 10, 2, 16), (2, 3, 12, 2, 16)),
    # Attention values: w [B, H, L, S], v [B, S, H, D] -> [B, L, H, D].
    ("values", (2, 4, 8, 8), (2, 8, 4, 16)),
    ("values", (1, 8, 64, 64), (1, 64, 8, 32)),
    ("values", (2, 4, 1, 128), (2, 128, 4, 64)),
    ("values", (4, 2, 128, 128), (4, 128, 2, 64)),
    ("values", (3, 1, 5, 7), (3, 7, 1, 3)),
    ("values", (4, 16, 9), (9, 4, 8)),
    ("values", (2, 3, 2, 10, 12), (2, 3, 12, 2, 16)),
    # One-row products, whose cotangent `g @ B^T` is XLA's row-major GEMV
    # over B (appended last: earlier cases keep their seeds).
    ("matmul", (4, 1, 300), (4, 300, 40)),
    ("matmul", (3, 1, 2048), (3, 2048, 24)),
    ("matmul", (1, 1000), (1000, 33)),
    ("matmul", (2, 1, 9), (9, 17)),
]

NAN, PINF, NINF = 0x7FC00000, 0x7F800000, 0xFF800000

# Non-finite values through the new routes (appended after CASES, seeds
# continue): (kind, a shape, b shape, edits of a, of b, of g), each edit a
# [row-major index, u32 bits] pair. One-row cotangents (XLA's GEMV over B's
# rows) with NaN, an infinity meeting a zero (g[0, 0, 5] = inf times
# b[0, 7, 5] = 0 in da[0, 0, 7]) and infinities of both signs; products with a
# broadcast operand (one folded dot) and an attention einsum with NaN and
# infinities in their operands.
NONFINITE = [
    ("matmul", (3, 1, 40), (3, 40, 17), [], [], [[5, NAN]]),
    ("matmul", (3, 1, 40), (3, 40, 17), [], [[7 * 17 + 5, 0]], [[5, PINF]]),
    ("matmul", (3, 1, 40), (3, 40, 17), [], [], [[2, PINF], [20, NINF]]),
    ("matmul", (2, 3, 4), (4, 5), [[5, NAN]], [[3, PINF]], []),
    ("matmul", (16, 100), (3, 100, 8), [[17, NINF]], [], [[40, NAN]]),
    ("scores", (2, 8, 4, 16), (2, 8, 4, 16), [[9, PINF]], [[100, NINF]], [[3, NAN]]),
]

FORMS = {
    "matmul": jnp.matmul,
    "scores": lambda q, k: jnp.einsum("...qhd,...khd->...hqk", q, k),
    "values": lambda w, v: jnp.einsum("...hqk,...khd->...qhd", w, v),
}


def expected(x):
    """u32 bits, or beyond 4,096 elements {n, sha1} of the bits (every NaN
    hashed as 0x7fc00000: a NaN's payload and sign are not part of what
    XLA promises, the test compares NaNs as NaN)."""
    bits = np.asarray(x, dtype=np.float32).reshape(-1).view(np.uint32).copy()
    if bits.size <= 4096:
        return bits.tolist()
    bits[np.isnan(bits.view(np.float32))] = NAN
    return {"n": int(bits.size), "sha1": hashlib.sha1(bits.astype("<u4").tobytes()).hexdigest()}


def normal(seed, shape):
    return jax.random.normal(jax.random.key(seed), shape, dtype=jnp.float32)


def edited(x, edits):
    """`x` with single elements set to u32 bit patterns."""
    flat = np.array(x, dtype=np.float32).reshape(-1)
    for i, b in edits:
        flat[i] = np.array([b], dtype=np.uint32).view(np.float32)[0]
    return jnp.asarray(flat.reshape(x.shape))


def main():
    cases = []
    differ = []
    all_cases = [c + ([], [], []) for c in CASES] + NONFINITE
    for i, (kind, sa, sb, ea, eb, eg) in enumerate(all_cases):
        f = FORMS[kind]

        def fwd_vjp(a, b, g, f=f):
            y, vjp = jax.vjp(f, a, b)
            da, db = vjp(g)
            return y, da, db

        a, b = edited(normal(3 * i, sa), ea), edited(normal(3 * i + 1, sb), eb)
        y_shape = jax.eval_shape(f, a, b).shape
        g = edited(normal(3 * i + 2, y_shape), eg)
        eager = fwd_vjp(a, b, g)
        jit = jax.jit(fwd_vjp)(a, b, g)
        case = {
            "kind": kind, "a_shape": list(sa), "b_shape": list(sb),
            "seeds": [3 * i, 3 * i + 1, 3 * i + 2], "edits": [ea, eb, eg],
            "y": expected(eager[0]), "da": expected(eager[1]), "db": expected(eager[2]),
        }
        for name, e, j in zip(("y", "da", "db"), eager, jit):
            if expected(e) != expected(j):
                case["jit_" + name] = expected(j)
                differ.append(f"{kind} {sa} {sb}: {name}")
        cases.append(case)
    with open(OUT, "w") as fh:
        json.dump({"jax": jax.__version__, "cases": cases}, fh, separators=(",", ":"))
        fh.write("\n")
    print("eager != jit:", differ or "none")


if __name__ == "__main__":
    main()
