"""Conformance fixtures for NaN, infinities and signed zeros through the
summation orders of src/xla/ (dot.rs, gemv.rs, reduce.rs): how XLA:CPU
propagates them through `jnp.matmul` (XLA's small-dot emitter, YNNPACK's
scalar and blocked kernels, GEMV `[m, k] @ [k, 1]`, vector dots
`[1, k] @ [k, 1]`), through `jnp.sum` / `jnp.mean` (all axes, the last axis,
axis 0 of matrices with more than 32 rows, several axes), and through the
VJPs of `jnp.matmul` and `jnp.sum` with a NaN or an infinity in the
cotangent. Everything is computed eagerly, as flaxen's eager ops mirror.

Inputs are not stored: both sides make each operand from a description
(see `operand` below): the integer hash of generate_gemv.py (values in
[-2, 2)), optionally made non-negative (`abs`), times an exact power of two
(`scale`, u32 bits), optionally overwritten everywhere (`fill`, u32 bits),
then single elements set (`set`: [row-major index, u32 bits] pairs). That is
how NaN, +inf, -inf, an inf times a zero (`inf` in `a` where `b` has a 0 in
the matching row), sums that overflow to inf, and -0.0 reach the kernels.
Each shape also has a "finite" case (no edits): the control that tells an
order difference from a difference in how non-finite values propagate.

Expected results are u32 bit patterns; arrays of more than 4,096 elements
are stored as the SHA-1 of their bits and their length
(`fixture_io.expected`). A NaN's payload and sign are not part of what XLA
promises (compared as NaN; the digest hashes every NaN as 0x7fc00000);
infinities and zeros keep their sign and are compared exactly.

Pinned: jax==0.10.2, jaxlib==0.10.2 (CPU; recorded on x86-64 with
AVX-512F, AMD EPYC, where XLA:CPU hands most f32 dots to YNNPACK). From the
repository root:

    .venv-oracle/bin/python tools/oracle/generate_nonfinite.py

Writes tests/fixtures/nonfinite.json.
"""

import json
import os
import sys

import numpy as np

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(__file__))
from fixture_io import expected  # noqa: E402

EXPECTED = {"jax": "0.10.2", "jaxlib": "0.10.2"}
OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures",
                   "nonfinite.json")

NAN = 0x7FC00000
PINF = 0x7F800000
NINF = 0xFF800000
PZERO = 0x00000000
NZERO = 0x80000000


def f32_bits(x):
    return np.asarray(x, dtype=np.float32).reshape(-1).view(np.uint32).tolist()


def from_bits(b):
    return np.array([b], dtype=np.uint32).view(np.float32)[0]


def hashed(shape, seed):
    """Values in [-2, 2): ((i * 2654435761 + seed * 40503) mod 2^32) / 2^32 * 4 - 2,
    in f64, then f32 (i: the row-major index)."""
    n = int(np.prod(shape))
    i = np.arange(n, dtype=np.uint64)
    h = (i * np.uint64(2654435761) + np.uint64(seed * 40503)) % np.uint64(2**32)
    return (h.astype(np.float64) / 2**32 * 4 - 2).astype(np.float32).reshape(shape)


def operand(shape, seed, abs=False, scale=1.0, fill=None, set=()):
    """The description of one input (what the Rust test rebuilds)."""
    return {"shape": list(shape), "seed": seed, "abs": abs,
            "scale": f32_bits(np.float32(scale))[0], "fill": fill,
            "set": [[int(i), int(b)] for i, b in set]}


def build(d):
    """An operand's values from its description, in f32 throughout."""
    x = hashed(d["shape"], d["seed"])
    if d["abs"]:
        x = np.abs(x)
    x = (x * from_bits(d["scale"])).astype(np.float32)
    if d["fill"] is not None:
        x = np.full(x.shape, from_bits(d["fill"]), dtype=np.float32)
    flat = x.reshape(-1)
    for i, b in d["set"]:
        flat[i] = from_bits(b)
    return flat.reshape(d["shape"])


def idx(shape, *ix):
    return int(np.ravel_multi_index(ix, shape))


def near_max(r):
    """A scale (rounded to f32) at which the sum of `r` hashed magnitudes
    (mean about 1) lands about 2^128, where f32 overflows."""
    return float(np.float32(2.0**128 / max(r, 2)))


# Products: XLA's small-dot emitter ([5,3]@[3,4], [1,5]@[5,9] with its plain
# column, the outer product [5,1]@[1,4]), YNNPACK's scalar path ([3,40]@[40,4])
# and blocked kernels ([17,33]@[33,9], [7,513]@[513,40], [64,300]@[300,70]),
# GEMV ([8,16]@[16,1], [32,10]@[10,1], [17,33]@[33,1], [100,300]@[300,1]),
# vector dots ([1,k]@[k,1]).
PRODUCT_SHAPES = [
    (5, 3, 4), (1, 5, 9), (5, 1, 4), (3, 40, 4), (17, 33, 9), (7, 513, 40),
    (64, 300, 70), (8, 16, 1), (32, 10, 1), (17, 33, 1), (100, 300, 1),
    (1, 7, 1), (1, 33, 1), (1, 1000, 1),
]


def product_cases():
    cases = []
    for s, (m, k, n) in enumerate(PRODUCT_SHAPES):
        sa, sb = (m, k), (k, n)
        seed = 100 * s
        i, p, j = m // 2, k // 3, n - 1
        q = (2 * k) // 3
        kinds = {
            # No non-finite input: the control for the order itself.
            "finite": (operand(sa, seed), operand(sb, seed + 1)),
            # one NaN in a: row i of the output.
            "nan_a": (operand(sa, seed, set=[(idx(sa, i, p), NAN)]), operand(sb, seed + 1)),
            # +inf in a, -inf in b.
            "posinf_a": (operand(sa, seed, set=[(idx(sa, i, p), PINF)]), operand(sb, seed + 1)),
            "neginf_b": (operand(sa, seed), operand(sb, seed + 1, set=[(idx(sb, p, j), NINF)])),
            # +inf in a[i, p], b[p, j] = +0 and b[p, 0] = -0: inf * 0.
            "inf_times_zero": (
                operand(sa, seed, set=[(idx(sa, i, p), PINF)]),
                operand(sb, seed + 1, set=[(idx(sb, p, 0), NZERO), (idx(sb, p, j), PZERO)])),
            # +inf and -inf in the same row of a: inf - inf unless a zero meets one.
            "inf_minus_inf": (
                operand(sa, seed, set=[(idx(sa, i, p), PINF), (idx(sa, i, q), NINF)]),
                operand(sb, seed + 1, abs=True)),
            # Overflow: products of both signs up to 2^127, partial sums
            # beyond 2^128 (which depends on the order and on fused
            # multiply-adds).
            "overflow": (operand(sa, seed, scale=2.0**63), operand(sb, seed + 1, scale=2.0**62)),
            # Non-negative products whose sums land about 2^128.
            "overflow_same_sign": (operand(sa, seed, abs=True, scale=2.0**63),
                                   operand(sb, seed + 1, abs=True, scale=near_max(k) / 2.0**63)),
            # -0.0 everywhere in a; b positive: every product is -0.
            "negzero_a": (operand(sa, seed, fill=NZERO), operand(sb, seed + 1, abs=True)),
            # -0.0 in a, b of both signs.
            "negzero_a_mixed_b": (operand(sa, seed, fill=NZERO), operand(sb, seed + 1)),
            # -0.0 in both: every product is +0.
            "negzero_both": (operand(sa, seed, fill=NZERO), operand(sb, seed + 1, fill=NZERO)),
            # a row of -0.0 in a (the rest finite), b positive.
            "negzero_row": (
                operand(sa, seed, set=[(idx(sa, i, t), NZERO) for t in range(k)]),
                operand(sb, seed + 1, abs=True)),
        }
        for kind, (da, db) in kinds.items():
            a, b = build(da), build(db)
            y = jnp.matmul(jnp.asarray(a), jnp.asarray(b))
            cases.append({"kind": kind, "a": da, "b": db, "y": expected(y)})
    return cases


# Sums: (shape, axes; None: all of them), each as jnp.sum and jnp.mean.
SUM_SHAPES = [
    ((33,), None), ((1000,), None), ((40, 33), None), ((4, 100), [-1]), ((3, 33), [-1]),
    ((100, 5), [0]), ((40, 3), [0]), ((1000, 4), [0]), ((6, 40, 7), [0, 2]),
    ((6, 40, 7), [1, 2]), ((5, 40, 3), [0, 1]),
]


def sum_cases():
    cases = []
    for s, (shape, axes) in enumerate(SUM_SHAPES):
        seed = 7000 + 10 * s
        n = int(np.prod(shape))
        # Positions spread through the array: a middle element and a later one
        # that falls in the same reduction for the shapes above where possible.
        step = shape[-1] if axes == [0] else 1
        r = n if axes is None else int(np.prod([shape[a] for a in axes]))
        mid, late = n // 2, (n // 2 + 3 * step) % n
        kinds = {
            "finite": operand(shape, seed),
            "nan": operand(shape, seed, set=[(mid, NAN)]),
            "posinf": operand(shape, seed, set=[(mid, PINF)]),
            "neginf": operand(shape, seed, set=[(late, NINF)]),
            "inf_minus_inf": operand(shape, seed, set=[(mid, PINF), (late, NINF)]),
            "nan_and_inf": operand(shape, seed, set=[(mid, NAN), (late, PINF)]),
            # Both signs, up to 2^127: two large terms of one sign overflow,
            # so which partial sums do depends on the order.
            "overflow": operand(shape, seed, scale=2.0**126),
            # Non-negative values whose sums land about 2^128.
            "overflow_same_sign": operand(shape, seed, abs=True, scale=near_max(r)),
            "negzero": operand(shape, seed, fill=NZERO),
            "negzero_one_poszero": operand(shape, seed, fill=NZERO, set=[(mid, PZERO)]),
            "negzero_with_inf": operand(shape, seed, fill=NZERO, set=[(mid, NINF)]),
        }
        for kind, dx in kinds.items():
            x = jnp.asarray(build(dx))
            ax = None if axes is None else tuple(axes)
            for op, f in [("sum", jnp.sum), ("mean", jnp.mean)]:
                y = f(x, axis=ax)
                cases.append({"kind": kind, "op": op, "axes": axes, "x": dx,
                              "y": expected(y)})
    return cases


VJP_SHAPES = [(5, 3, 4), (17, 33, 9), (64, 300, 70), (100, 300, 1), (1, 33, 1), (32, 10, 1)]


def vjp_cases():
    cases = []
    for s, (m, k, n) in enumerate(VJP_SHAPES):
        seed = 9000 + 10 * s
        sa, sb, sg = (m, k), (k, n), (m, n)
        i, j, p = m // 2, n - 1, k // 3
        kinds = {
            "finite": (operand(sb, seed + 1), operand(sg, seed + 2)),
            "nan": (operand(sb, seed + 1), operand(sg, seed + 2, set=[(idx(sg, i, j), NAN)])),
            "posinf": (operand(sb, seed + 1), operand(sg, seed + 2, set=[(idx(sg, i, j), PINF)])),
            "neginf": (operand(sb, seed + 1), operand(sg, seed + 2, set=[(idx(sg, i, 0), NINF)])),
            # g[i, j] = inf meets b[p, j] = 0 in da[i, p] of da = g @ b^T.
            "inf_times_zero": (
                operand(sb, seed + 1, set=[(idx(sb, p, j), PZERO)]),
                operand(sg, seed + 2, set=[(idx(sg, i, j), PINF)])),
            "inf_minus_inf": (
                operand(sb, seed + 1, abs=True),
                operand(sg, seed + 2, set=[(idx(sg, i, j), PINF), (idx(sg, i, 0), NINF)]
                        if n > 1 else [(idx(sg, i, 0), PINF), (idx(sg, (i + 1) % m, 0), NINF)])),
            # da = g @ b^T sums n terms near 2^128.
            "overflow": (operand(sb, seed + 1, scale=2.0**62),
                         operand(sg, seed + 2, scale=2.0**63)),
            "negzero": (operand(sb, seed + 1, abs=True), operand(sg, seed + 2, fill=NZERO)),
        }
        if m * k + k * n > 10000:
            # The largest: fewer kinds, to keep the fixture small.
            kinds = {kind: kinds[kind] for kind in ["finite", "nan", "posinf", "inf_times_zero",
                                                     "overflow"]}
        da_ = operand(sa, seed)
        for kind, (db_, dg) in kinds.items():
            a, b, g = build(da_), build(db_), build(dg)
            y, pull = jax.vjp(jnp.matmul, jnp.asarray(a), jnp.asarray(b))
            ga, gb = pull(jnp.asarray(g))
            cases.append({"kind": kind, "a": da_, "b": db_, "g": dg, "y": expected(y),
                          "da": expected(ga), "db": expected(gb)})
    return cases


def sum_vjp_cases():
    """The VJP of `jnp.sum` over axes: the cotangent broadcast back."""
    cases = []
    for s, (shape, axes) in enumerate([((100, 5), [0]), ((4, 100), [-1]), ((6, 40, 7), [0, 2])]):
        seed = 9500 + 10 * s
        x = build(operand(shape, seed))
        ax = tuple(axes)
        y, pull = jax.vjp(lambda t: jnp.sum(t, axis=ax), jnp.asarray(x))
        gshape = y.shape
        dg = operand(gshape, seed + 1, set=[(0, NAN), (1, PINF), (2, NINF)] if y.size > 3
                     else [(0, NAN), (1, PINF)])
        (gx,) = pull(jnp.asarray(build(dg)))
        cases.append({"shape": list(shape), "axes": axes, "x_seed": seed, "g": dg,
                      "dx": expected(gx)})
    return cases


def main():
    import jaxlib
    assert jax.__version__ == EXPECTED["jax"], jax.__version__
    assert jaxlib.__version__ == EXPECTED["jaxlib"], jaxlib.__version__
    out = {"jax": jax.__version__, "products": product_cases(), "sums": sum_cases(),
           "matmul_vjps": vjp_cases(), "sum_vjps": sum_vjp_cases()}
    path = os.path.abspath(OUT)
    with open(path, "w") as f:
        json.dump(out, f, separators=(",", ":"))
    counts = {k: len(v) for k, v in out.items() if isinstance(v, list)}
    print(f"wrote {path} ({os.path.getsize(path)} bytes, {counts})")


if __name__ == "__main__":
    main()
