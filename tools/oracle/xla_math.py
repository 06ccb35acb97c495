"""Fixture for src/xla/math.rs: XLA's f32 log, log1p, erf, erf_inv.

Pinned: jax==0.10.2, jaxlib==0.10.2 (CPU backend, x86-64 with FMA; XLA's CPU
code generator fuses multiply-adds only where the CPU has FMA, so run this on
such a machine). Set up and run from the repository root:

    python3 -m venv .venv-oracle
    .venv-oracle/bin/pip install jax==0.10.2 jaxlib==0.10.2
    .venv-oracle/bin/python tools/oracle/xla_math.py

Writes tests/fixtures/xla_math.json: for each function, input and output f32
bit patterns (as u32), a few thousand per function: edge cases (zeros,
subnormals, the smallest normals, +-1, infinities, NaNs, branch points such
as erf_inv's w = 5 and log1p's |x| = sqrt(2) - 1) and random patterns.

Inputs are evaluated in one array padded to a multiple of 1024 elements, so
XLA uses its vectorized kernels (a stand-alone `log` of a tiny array can be
compiled to libm's logf instead; see src/xla/math.rs). Eager and
jitted results are checked to be identical.

For an exhaustive comparison over all 2**32 inputs, see
xla_math_exhaustive.py.
"""

import json
import os
import sys

import numpy as np

import jax
from jax import lax

EXPECTED = {"jax": "0.10.2", "jaxlib": "0.10.2"}
OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "xla_math.json")
FNS = {"log": lax.log, "log1p": lax.log1p, "erf": lax.erf, "erf_inv": lax.erf_inv}
RANDOM_PER_FN = 2048


def check_versions():
    import jaxlib

    found = {"jax": jax.__version__, "jaxlib": jaxlib.__version__}
    if found != EXPECTED:
        sys.exit(f"oracle needs {EXPECTED}, found {found}")


def bits(x):
    return int(np.float32(x).view(np.uint32))


def around(x, k):
    """Bit patterns of the 2k+1 floats nearest to x (same sign side)."""
    b = bits(x)
    return [(b + d) & 0xFFFFFFFF for d in range(-k, k + 1)]


def both_signs(patterns):
    return [p & 0x7FFFFFFF for p in patterns] + [p | 0x80000000 for p in patterns]


COMMON = both_signs(
    [
        0x00000000,  # zero
        0x00000001, 0x00000002, 0x00400000, 0x007FFFFF,  # subnormals
        0x00800000, 0x00800001, 0x00900000, 0x01000000,  # smallest normals
        0x3F800000, 0x3F7FFFFF, 0x3F800001,  # 1 and neighbours
        0x3F000000, 0x40000000, 0x3E800000,  # 0.5, 2, 0.25
        0x7F7FFFFF, 0x7F000000,  # largest
        0x7F800000,  # infinity
        0x7FC00000, 0x7F800001, 0x7FFFFFFF, 0x7FA00000,  # NaNs (quiet, signalling)
        0x33800000, 0x34000000, 0x2F800000,  # 2^-24, 2^-23, 2^-32
    ]
)


def special_inputs(fn):
    s = []
    if fn == "log":
        s += around(1.0, 40)
        # Mantissas around sqrt(0.5), Cephes' reduction threshold, in many binades.
        for e in range(1, 255, 7):
            s += [(e << 23) | m for m in range(0x3504F3 - 3, 0x3504F3 + 4)]
        s += [e << 23 for e in range(0, 255)]  # powers of two
        s += around(np.e, 4) + around(10.0, 4) + around(1e-30, 4) + around(1e30, 4)
    elif fn == "log1p":
        s += both_signs(around(np.float32(0.41421357), 24))  # small/large branch
        s += around(-1.0, 24)  # -1 and its neighbours (incl. below -1)
        for v in [1e-3, 1e-7, 1e-10, 1e-20, 1e-37, 0.1, 0.3, 0.5, 0.9, 3.0, 1e10]:
            s += both_signs(around(v, 3))
    elif fn == "erf":
        s += both_signs(around(np.float32(3.8325066), 24))  # clamp to +-1
        s += both_signs(around(np.float32(1.0417548e-38), 8))  # flush threshold
        for v in [1e-3, 1e-7, 1e-20, 0.5, 0.9, 1.5, 2.5, 3.0, 3.5, 10.0]:
            s += both_signs(around(v, 3))
    elif fn == "erf_inv":
        # w = -log1p(-x*x) crosses 5 near |x| = sqrt(1 - exp(-5)).
        s += both_signs(around(np.float32(np.sqrt(1 - np.exp(-5.0))), 64))
        s += both_signs(around(1.0, 64))  # near +-1 (w large), and just above
        s += both_signs(around(np.float32(1.3264034e-38), 8))  # flushed product
        s += both_signs(around(np.float32(-0.99999994), 8))
        for v in [1e-3, 1e-7, 1e-19, 1e-20, 0.1, 0.5, 0.9, 0.99, 0.999, 0.9999]:
            s += both_signs(around(v, 3))
    return s


def random_inputs(fn, rng):
    n = RANDOM_PER_FN
    anything = rng.integers(0, 1 << 32, n // 4, dtype=np.uint64)
    if fn == "log":
        domain = rng.integers(0, 0x7F800000, n - n // 4, dtype=np.uint64)
    elif fn == "log1p":
        a = rng.integers(0, 0x7F800000, (n - n // 4) // 2, dtype=np.uint64)
        b = rng.integers(0x80000000, 0xBF800001, (n - n // 4) - len(a), dtype=np.uint64)
        domain = np.concatenate([a, b])
    elif fn == "erf":
        domain = rng.integers(0, 0x40A00000, n - n // 4, dtype=np.uint64)
        domain |= rng.integers(0, 2, len(domain), dtype=np.uint64) << 31
    else:
        # Half uniform in bit pattern over (-1, 1), half like jax.random.normal's u.
        h = (n - n // 4) // 2
        a = rng.integers(0, 0x3F800000, h, dtype=np.uint64)
        a |= rng.integers(0, 2, h, dtype=np.uint64) << 31
        u = np.maximum(
            np.float32(-0.99999994),
            rng.integers(0, 1 << 23, (n - n // 4) - h).astype(np.float32) * np.float32(2.0**-22)
            - np.float32(0.99999994),
        ).astype(np.float32)
        domain = np.concatenate([a, u.view(np.uint32).astype(np.uint64)])
    return [int(v) for v in np.concatenate([anything, domain])]


def evaluate(f, inputs):
    n = len(inputs)
    padded = np.zeros(-(-n // 1024) * 1024, np.uint32)
    padded[:n] = inputs
    x = padded.view(np.float32)
    jitted = np.asarray(jax.jit(f)(x)).view(np.uint32)[:n]
    eager = np.asarray(f(x)).view(np.uint32)[:n]
    if not np.array_equal(jitted, eager):
        sys.exit("eager and jitted results differ")
    return [int(v) for v in jitted]


def main():
    check_versions()
    rng = np.random.default_rng(20240610)
    out = {
        "about": "XLA CPU f32 results of jax.lax functions, jax 0.10.2 / jaxlib 0.10.2, "
        "as u32 bit patterns; generated by tools/oracle/xla_math.py",
    }
    for fn, f in FNS.items():
        seen = set()
        inputs = []
        for p in COMMON + special_inputs(fn) + random_inputs(fn, rng):
            if p not in seen:
                seen.add(p)
                inputs.append(p)
        out[fn] = {"in": inputs, "out": evaluate(f, inputs)}
        print(fn, len(inputs))
    with open(OUT, "w") as fh:
        json.dump(out, fh, separators=(",", ":"))
        fh.write("\n")


if __name__ == "__main__":
    main()
