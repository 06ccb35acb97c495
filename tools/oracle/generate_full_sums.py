"""Conformance fixtures for the order of XLA:CPU's sums over all axes of 2-D
and 3-D float32 arrays (`jnp.sum(x)`), and over several axes
(`jnp.sum(x, axis=(a, b))`, the last axes or not), as `flaxen::tensor`
reproduces it in src/xla/reduce.rs (`reduce_all`): tree-reduction windows
of 32, then loop nests that LLVM vectorizes over rows of at most 8
elements, adjacent or with gaps (src/xla/reduce_gaps.rs).

Pinned: jax==0.10.2, jaxlib==0.10.2 (CPU, x86-64 with AVX2: the vectorized
order follows LLVM's cost model for the host). From the repository root:

    .venv-oracle/bin/python tools/oracle/generate_full_sums.py

Writes tests/fixtures/full_sums.json: per case the shape, the axes (null:
all), the input's seed and the eager result's u32 bit pattern(s). The inputs
are not stored: element i of the input with seed s has the bits of
`element_bits(s, i)`, which tests/full_sums.rs computes the same way (signs
and magnitudes from 2^-9 to 2^9 mixed, so that the order shows).
"""

import json
import os

import numpy as np

import jax
import jax.numpy as jnp

EXPECTED = {"jax": "0.10.2", "jaxlib": "0.10.2"}
OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures",
                   "full_sums.json")


def element_bits(seed, n):
    """The bits of elements 0..n of input `seed`: a 32-bit hash of (seed,
    i) gives the sign (bit 0), the exponent 127 + 3 * ((h >> 1) % 7 - 3)
    and the top 16 mantissa bits (h >> 16)."""
    i = np.arange(n, dtype=np.uint64)
    h = (i * np.uint64(2654435761) + np.uint64(seed) * np.uint64(40503) + np.uint64(12345)) \
        % np.uint64(1 << 32)
    h = (h ^ (h >> np.uint64(15))) * np.uint64(2246822519) % np.uint64(1 << 32)
    h = h ^ (h >> np.uint64(13))
    sign = (h & np.uint64(1)) << np.uint64(31)
    exp = (np.uint64(127 - 9) + np.uint64(3) * ((h >> np.uint64(1)) % np.uint64(7))) << np.uint64(23)
    mant = (h >> np.uint64(16)) << np.uint64(7)
    return (sign | exp | mant).astype(np.uint32)


def shapes():
    out = []
    # Every 2-D shape up to 40 x 40.
    out += [((r, c), None) for r in range(1, 41) for c in range(1, 41)]
    # Aspect ratios from 1:100 to 100:1 at sizes up to 2000.
    for n in [41, 64, 100, 127, 200, 333, 500, 777, 1000, 1024, 1500, 1999, 2000]:
        for ratio in [1 / 100, 1 / 30, 1 / 8, 1 / 3, 1, 3, 8, 30, 100]:
            r = max(1, int(round((n * ratio) ** 0.5)))
            c = max(1, n // r)
            out.append(((r, c), None))
    # Lengths of 32k + 31, 32k + 1 and 32k (windows padded by one
    # element at the end, by 31, by none) with short rows.
    for r in [33, 63, 64, 65, 95, 96, 127, 128, 159, 250, 255, 256, 257, 500, 999, 1000]:
        for c in [1, 2, 3, 4, 5, 6, 7, 8, 9]:
            if r * c <= 2000:
                out.append(((r, c), None))
                out.append(((c, r), None))
    out += [((63, 63), None), ((63, 31), None), ((31, 63), None), ((63, 64), None),
            ((2000, 2), None), ((4095, 1), None), ((1, 4095), None)]
    # 3-D.
    ds = [1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 20, 31, 32, 33, 40, 63, 64, 65, 100]
    for a in ds:
        for b in ds:
            for c in ds:
                if a * b * c <= 2000:
                    out.append(((a, b, c), None))
    # Several axes: the last ones, and others.
    for s, ax in [((6, 40, 7), (1, 2)), ((5, 40, 3), (0, 1)), ((3, 16, 4), (1, 2)),
                  ((2, 16, 2), (1, 2)), ((3, 63, 4), (1, 2)), ((4, 8, 5, 6), (1, 2, 3)),
                  ((2, 63, 3), (1, 2)), ((5, 95, 2), (1, 2)), ((3, 20, 3, 2), (2, 3)),
                  ((8, 4, 3), (0, 1)), ((16, 4, 3), (0, 1)), ((16, 3, 4), (0, 2)),
                  ((7, 8, 8, 3), (1, 2)), ((40, 5, 3), (0, 1)), ((33, 2, 5), (0, 1)),
                  ((8, 70, 3), (0, 1)), ((6, 50, 2), (0, 1)), ((40, 8, 2), (0, 2)),
                  ((2, 40, 8, 3), (0, 1, 2)), ((4, 7, 9, 5), (0, 1, 2, 3))]:
        out.append((s, ax))
    out += gapped_shapes()
    return out


def gapped_shapes():
    """Sums over several axes followed by kept ones, where the loads of the
    loop LLVM vectorizes leave gaps (src/xla/reduce_gaps.rs): `[2, b, c, k]`
    over (1, 2) and `[2, b, g, c]` over (1, 3) for the loop's lengths `b`
    (2 to 32, and windows of 32 on longer axes), rows of `c` elements read
    out of `c * k` or `g * c`; three reduced axes; kept axes of length 1
    after the reduced ones (the order of the last axes); and a seeded draw
    of shapes of 2 to 5 axes."""
    out = []
    bs = [2, 3, 4, 8, 15, 16, 17, 19, 20, 21, 23, 24, 25, 27, 28, 29, 31, 32,
          63, 64, 95, 96, 127, 128]
    for b in bs:
        for c in [2, 3, 4, 5]:
            for k in [2, 3, 4, 8]:
                if 2 * b * c * k < 4096:
                    out.append(((2, b, c, k), (1, 2)))
        for g in [2, 3, 4]:
            for c in [2, 3, 4]:
                if 2 * b * g * c < 4096:
                    out.append(((2, b, g, c), (1, 3)))
    for b in [8, 16, 20, 31, 32, 63, 64]:
        out += [((3, 2, b, 2, 2), (1, 2, 3)), ((b, 3, 2, 2), (0, 1, 2)),
                ((2, b, 2, 3, 2), (0, 1, 3)), ((b, 1, 4, 1), (0, 1, 2)),
                ((1, b, 1, 2, 1), (1, 3))]
    rng = np.random.default_rng(13)
    ds = [1, 2, 3, 4, 5, 6, 8, 12, 16, 17, 20, 24, 28, 31, 32, 33, 40, 63, 64,
          65, 95, 96, 127, 128, 159, 200]
    drawn = 0
    while drawn < 200:
        nd = int(rng.integers(3, 6))
        shape = tuple(int(v) for v in rng.choice(ds, nd))
        axes = tuple(sorted(int(a) for a in rng.choice(nd, int(rng.integers(2, nd)), replace=False)))
        if np.prod(shape) >= 4096 or axes == tuple(range(nd - len(axes), nd)):
            continue
        out.append((shape, axes))
        drawn += 1
    return out


def main():
    import jaxlib
    assert jax.__version__ == EXPECTED["jax"], jax.__version__
    assert jaxlib.__version__ == EXPECTED["jaxlib"], jaxlib.__version__
    cases = []
    seen = set()
    for seed, (shape, axes) in enumerate(shapes()):
        if (shape, axes) in seen:
            continue
        seen.add((shape, axes))
        n = int(np.prod(shape))
        x = element_bits(seed, n).view(np.float32).reshape(shape)
        y = np.asarray(jnp.sum(x, axis=axes), dtype=np.float32)
        cases.append(dict(shape=list(shape), axes=None if axes is None else list(axes),
                          seed=seed, y=[int(v) for v in y.reshape(-1).view(np.uint32)]))
    # An all -0.0 input sums to +0.0 (the sum starts from +0).
    x = np.full((4, 5), -0.0, np.float32)
    negzero = int(np.asarray(jnp.sum(x)).view(np.uint32))
    assert negzero == 0, hex(negzero)
    path = os.path.abspath(OUT)
    with open(path, "w") as f:
        json.dump(dict(jax=jax.__version__, negzero_sum=negzero, cases=cases), f,
                  separators=(",", ":"))
    print(f"wrote {path} ({os.path.getsize(path)} bytes, {len(cases)} cases)")


if __name__ == "__main__":
    main()
