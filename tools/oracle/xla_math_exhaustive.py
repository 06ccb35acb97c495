"""Dump XLA's f32 log, log1p, erf, erf_inv, tanh, exp, logistic, expm1, sqrt
and rsqrt for every f32 bit pattern.

Pinned: jax==0.10.2, jaxlib==0.10.2 (CPU, x86-64 with FMA). Development tool,
not run in CI. Usage:

    .venv-oracle/bin/python tools/oracle/xla_math_exhaustive.py FN OUT [--eager]
        [--start N] [--count N]

FN is one of the names above. OUT receives the output bit patterns
(little-endian u32) for the inputs start, start+1, ..., start+count-1 (by
default all 2**32 patterns, 16 GiB); OUT may be a FIFO. Arrays are processed
in chunks of 2**22 elements, so XLA's vectorized kernels are used (tiny
stand-alone arrays can compile differently, see src/xla/math.rs).

Compare with the ignored test in src/xla/math.rs:

    XLA_MATH_DUMP=OUT XLA_MATH_FN=FN cargo test --release --lib \
        xla_math::tests::exhaustive -- --ignored --nocapture
"""

import argparse
import sys

import numpy as np

import jax
from jax import lax

FNS = {
    "log": lax.log,
    "log1p": lax.log1p,
    "erf": lax.erf,
    "erf_inv": lax.erf_inv,
    "tanh": lax.tanh,
    "exp": lax.exp,
    "logistic": lax.logistic,
    "expm1": lax.expm1,
    "sqrt": lax.sqrt,
    "rsqrt": lax.rsqrt,
}
CHUNK = 1 << 22


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("fn", choices=sorted(FNS))
    ap.add_argument("out")
    ap.add_argument("--eager", action="store_true", help="call lax.* directly, not under jax.jit")
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--count", type=int, default=1 << 32)
    a = ap.parse_args()
    if jax.__version__ != "0.10.2":
        sys.exit(f"needs jax 0.10.2, found {jax.__version__}")
    f = FNS[a.fn] if a.eager else jax.jit(FNS[a.fn])
    end = a.start + a.count
    with open(a.out, "wb") as out:
        lo = a.start
        while lo < end:
            n = min(CHUNK, end - lo)
            # Keep every call the same (vectorized) shape: pad the last chunk.
            bits = np.arange(lo, lo + CHUNK, dtype=np.uint64).astype(np.uint32)
            y = np.asarray(f(bits.view(np.float32)))
            out.write(y.view(np.uint32)[:n].astype("<u4").tobytes())
            lo += n


if __name__ == "__main__":
    main()
