"""Conformance fixture for the large training step of benches/autodiff.rs
and tools/bench/jax_train_step.py: a 784-512-512-10 ReLU MLP with an MSE
loss at batch 128, `jax.value_and_grad(mse)` jitted and eager. Its
products (up to 51M multiply-adds, the transposed ones of the backward
pass included) check flaxen's exact kernels at the sizes where they run
split between threads, with k cut into chunks.

Inputs are not stored: both sides make them with `inputs` below (the
integer hash of generate_gemv.py, values in [-2, 2)) times exact powers of
two. Expected results are u32 bits: the loss itself, and each gradient as
the SHA-1 of its bits (little-endian) and of every row's bits (so a failure
names the rows that differ).

Pinned: jax==0.10.2, jaxlib==0.10.2 (CPU; recorded on x86-64 with
AVX-512F, AMD EPYC). From the repository root:

    .venv-oracle/bin/python tools/oracle/generate_mlp_step.py

Writes tests/fixtures/mlp_step.json.
"""

import hashlib
import json
import os
import sys

import numpy as np

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(__file__))
from generate_random import check_versions, f32_bits  # noqa: E402
from generate_gemv import inputs  # noqa: E402

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "mlp_step.json")

SIZES = [784, 512, 512, 10]
BATCH = 128
# Kernel and bias scales (exact powers of two), and each operand's seed.
KERNEL_SCALE = 2.0**-5
BIAS_SCALE = 2.0**-4


def params():
    out = {}
    for i, (fan_in, fan_out) in enumerate(zip(SIZES[:-1], SIZES[1:])):
        out[f"Dense_{i}"] = {
            "kernel": inputs((fan_in, fan_out), 10 + 2 * i) * np.float32(KERNEL_SCALE),
            "bias": inputs((fan_out,), 11 + 2 * i) * np.float32(BIAS_SCALE),
        }
    return out


def mse(p, x, y):
    h = x
    n = len(p)
    for i in range(n):
        h = h @ p[f"Dense_{i}"]["kernel"] + p[f"Dense_{i}"]["bias"]
        if i + 1 < n:
            h = jax.nn.relu(h)
    return jnp.mean((h - y) ** 2)


def sha1(bits):
    return hashlib.sha1(np.asarray(bits, dtype="<u4").tobytes()).hexdigest()


def expected(g):
    g = np.asarray(g, dtype=np.float32)
    rows = g.reshape(-1, g.shape[-1]) if g.ndim > 1 else g.reshape(1, -1)
    bits = rows.view(np.uint32)
    return {
        "shape": list(g.shape),
        "sha1": sha1(bits.reshape(-1)),
        "rows": [sha1(r) for r in bits],
    }


def main():
    check_versions()
    p = jax.tree_util.tree_map(jnp.asarray, params())
    x = jnp.asarray(inputs((BATCH, SIZES[0]), 1))
    y = jnp.asarray(inputs((BATCH, SIZES[-1]), 2))
    jit_loss, jit_grads = jax.jit(jax.value_and_grad(mse))(p, x, y)
    loss, grads = jax.value_and_grad(mse)(p, x, y)
    flat = lambda t: {f"{k}/{n}": v for k, d in t.items() for n, v in d.items()}
    cases = {}
    for name, (l, g) in {"jit": (jit_loss, jit_grads), "eager": (loss, grads)}.items():
        cases[name] = {
            "loss": f32_bits(l)[0],
            "grads": {path: expected(v) for path, v in flat(g).items()},
        }
    same = cases["jit"] == cases["eager"]
    print("jit and eager", "agree" if same else "DIFFER")
    fixture = {
        "jax": jax.__version__,
        "sizes": SIZES,
        "batch": BATCH,
        "kernel_scale": f32_bits(np.float32(KERNEL_SCALE))[0],
        "bias_scale": f32_bits(np.float32(BIAS_SCALE))[0],
        "cases": cases,
    }
    with open(OUT, "w") as f:
        json.dump(fixture, f, separators=(",", ":"))


if __name__ == "__main__":
    main()
