"""Oracle for products whose left operand is stored transposed (`a.T @ b`,
the weight gradient `x^T @ g` of a dense layer) with many terms, bit for bit.

XLA:CPU keeps these from YNNPACK: its dot thunk hands them to Eigen's
tensor contraction on the intra-op thread pool, which cuts `k` into blocks
by heuristics that read the machine (its cache sizes and its number of
CPUs; see src/xla/eigen_dot.rs). The results therefore depend on the
machine: the fixture records the one it was made on (L1d, L2 and L3 sizes
as sysfs reports them, and the CPU count), and the tests compare flaxen's
bits with it for that machine's parameters.

Pinned: jax==0.10.2, jaxlib==0.10.2 (CPU). Inputs are not stored: both
sides make them with `inputs` of generate_matmul.py (integer hashes, exact
in f64); the fixture keeps the expected results (`fixture_io.expected`).

Run: .venv-oracle/bin/python tools/oracle/generate_eigen_dots.py
Writes tests/fixtures/eigen_dots.json.
"""

import json
import os
import platform
import sys

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from fixture_io import expected  # noqa: E402
from generate_matmul import inputs  # noqa: E402

assert jax.__version__ == "0.10.2", jax.__version__

# (m, k, n) of `a.T @ b`, `a` stored [k, m]: products over large
# batches (k > 320, Eigen's parallel path in blocks of at most 320 terms),
# and k at the block boundaries.
SHAPES = [
    (64, 320, 128), (64, 321, 512), (10, 321, 512), (784, 321, 10),
    (64, 400, 128), (10, 400, 784), (64, 512, 128), (512, 512, 10),
    (784, 512, 512), (64, 700, 512), (64, 1000, 128), (512, 1024, 512),
    (784, 1024, 128), (64, 1500, 256), (128, 2048, 784), (512, 2048, 10),
    (64, 3000, 128), (64, 4096, 512), (128, 8192, 64), (512, 8192, 10),
    # Blocks of different lengths (one thread by Eigen's cost model: blocks
    # halved by oneDNN), and small outputs sharded by the inner dimension.
    (3, 1000, 5), (8, 2048, 8), (32, 1024, 32), (512, 200, 10),
    (10, 8192, 10), (2, 4096, 300), (300, 4096, 2), (13, 4096, 11),
]

# Dense layers' weight gradients, `jax.vjp(jnp.matmul, x, w)`'s cotangent
# of `w` (`x^T @ g`), with batches beyond one block: (batch, in, out).
VJPS = [(1024, 784, 512), (2048, 512, 10)]


def cache_size(level, kind):
    """The size in bytes of cpu0's cache of `level` and `kind` (sysfs)."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    for entry in sorted(os.listdir(base)):
        d = os.path.join(base, entry)
        if not entry.startswith("index"):
            continue
        read = lambda f: open(os.path.join(d, f)).read().strip()  # noqa: E731
        if int(read("level")) == level and read("type") in kind:
            size = read("size")
            units = {"K": 1024, "M": 1024 * 1024}
            return int(size[:-1]) * units[size[-1]] if size[-1] in units else int(size)
    return None


def cpu_model():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def main():
    machine = {
        "cpu": cpu_model(),
        "l1d": cache_size(1, ("Data",)),
        "l2": cache_size(2, ("Unified",)),
        "l3": cache_size(3, ("Unified",)),
        "cpus": len(os.sched_getaffinity(0)),
    }
    product = jax.jit(lambda a, b: a.T @ b)
    cases = []
    for i, (m, k, n) in enumerate(SHAPES):
        a, b = inputs((k, m), 2 * i), inputs((k, n), 2 * i + 1)
        cases.append({"m": m, "k": k, "n": n, "seeds": [2 * i, 2 * i + 1],
                      "y": expected(product(a, b))})
    vjps = []
    for i, (b, d_in, d_out) in enumerate(VJPS):
        x, w, g = (inputs(s, 100 + 3 * i + j) for j, s in
                   enumerate([(b, d_in), (d_in, d_out), (b, d_out)]))
        _, vjp = jax.vjp(jnp.matmul, x, w)
        dx, dw = jax.jit(vjp)(g)
        vjps.append({"batch": b, "in": d_in, "out": d_out, "seeds": [100 + 3 * i + j for j in range(3)],
                     "dx": expected(dx), "dw": expected(dw)})
    out = os.path.join(os.path.dirname(__file__), "../../tests/fixtures/eigen_dots.json")
    with open(out, "w") as f:
        json.dump({"jax": jax.__version__, "machine": machine, "cases": cases, "vjps": vjps}, f,
                  separators=(",", ":"))
    print(machine)


if __name__ == "__main__":
    main()
