"""Conformance fixtures for XLA:CPU's matrix-vector products (the order
src/xla/gemv.rs reproduces): `[m, k] @ [k, 1]` for many `m` and `k`,
vector dots `[1, k] @ [k, 1]`, a Flax `Dense(1)` head (output and
gradients), and the weight gradient of a `Dense(1)` head over many batch
sizes `k` and feature counts `m` (`head_grads`: eager `jax.grad` of
`sum((x @ w) * c)`, which XLA runs as `dot(c[k, 1], x[k, m])` contracting
the batch: its column-major GEMV; the jitted gradient compiles to the same
kernel, checked here; with one feature, `m == 1`, a dot of two vectors,
summed by YNNPACK from 4,096 terms), and the same for an ensemble of heads under
`nn.vmap` (`vmap_heads`: the kernel's gradient only; `vmap_shared_heads`:
heads of 1 to 4 features on one shared input, the kernel's and the input's
gradients). Inputs are not stored: both sides make them with `inputs` below
(an integer hash, exact in f64), so the fixture keeps only expected bits.

Pinned: jax==0.10.2, jaxlib==0.10.2, flax==0.12.8 (CPU). From the
repository root:

    .venv-oracle/bin/python tools/oracle/generate_gemv.py

Writes tests/fixtures/gemv.json. Floats are u32 bit patterns.
"""

import json
import os
import sys

import numpy as np

import jax
import jax.numpy as jnp
import flax.linen as nn

sys.path.insert(0, os.path.dirname(__file__))
from generate_random import check_versions, f32_bits  # noqa: E402
from generate_modules import tree_bits  # noqa: E402

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "gemv.json")


def inputs(shape, seed, half_width=2.0):
    """Values in [-w, w), w = half_width: ((i * 2654435761 + seed * 40503)
    mod 2^32) / 2^32 * 2w - w (tests/common's `uniform_inputs`)."""
    n = int(np.prod(shape))
    i = np.arange(n, dtype=np.uint64)
    h = (i * np.uint64(2654435761) + np.uint64(seed * 40503)) % np.uint64(2**32)
    w = float(half_width)
    return (h.astype(np.float64) / 2**32 * (2 * w) - w).astype(np.float32).reshape(shape)


def main():
    check_versions()
    gemv = []
    for m in [2, 3, 7, 8, 9, 16, 17, 24, 100]:
        for k in [1, 3, 7, 8, 9, 16, 33, 100, 300]:
            a = inputs((m, k), m * 1000 + k)
            v = inputs((k, 1), m * 1000 + k + 1)
            y = jnp.asarray(a) @ jnp.asarray(v)
            gemv.append({"m": m, "k": k, "y": f32_bits(y)})
    # Long rows: the product reduced by YNNPACK from 4,096 elements?
    for m, k in [(2, 4096), (3, 5000), (17, 4096), (2, 40000), (9, 300), (300, 300)]:
        a = inputs((m, k), m * 1000 + k)
        v = inputs((k, 1), m * 1000 + k + 1)
        y = jnp.asarray(a) @ jnp.asarray(v)
        gemv.append({"m": m, "k": k, "y": f32_bits(y)})
    dots = []
    for k in list(range(1, 34)) + [40, 64, 65, 100, 257, 1000, 2049, 4095, 4096, 8192, 40000]:
        a = inputs((1, k), k)
        v = inputs((k, 1), k + 7)
        dots.append({"k": k, "y": f32_bits(jnp.asarray(a) @ jnp.asarray(v))})
    # A Dense(1) head: y = x @ kernel + bias; gradients of sum(y * w).
    x = jnp.asarray(inputs((3, 16), 99))
    w = jnp.asarray(inputs((3, 1), 98))
    head = nn.Dense(1)
    v = head.init(jax.random.key(0), x)

    def loss(p, x):
        return jnp.sum(head.apply({"params": p}, x) * w)

    gp, gx = jax.grad(loss, argnums=(0, 1))(v["params"], x)
    dense = {"params": tree_bits(v["params"]), "y": f32_bits(head.apply(v, x)),
             "grad_params": tree_bits(gp), "grad_x": f32_bits(gx)}
    head_grads = []
    for m in [2, 3, 8, 9, 10, 16, 17, 25, 33]:
        for k in [2, 3, 5, 8, 9, 12, 33, 127, 321, 383, 1000, 4096]:
            x = jnp.asarray(inputs((k, m), 7 * m + k))
            c = jnp.asarray(inputs((k, 1), 7 * m + k + 1))

            def head_loss(w, x, c):
                return jnp.sum((x @ w) * c)

            w0 = jnp.zeros((m, 1), jnp.float32)
            g = jax.grad(head_loss)(w0, x, c)
            # x and c as arguments (closed over, they are constants XLA folds).
            g_jit = jax.jit(jax.grad(head_loss))(w0, x, c)
            assert f32_bits(g) == f32_bits(g_jit), (m, k)
            head_grads.append({"m": m, "k": k, "grad": f32_bits(g)})
    # One input feature (m == 1): a dot of two vectors, which XLA rewrites
    # into a reduce of a multiply, summed by YNNPACK from 4,096 terms.
    for k in [2, 9, 1000, 4095, 4096, 5000, 8192, 32768, 40000, 100000]:
        x = jnp.asarray(inputs((k, 1), 7 + k))
        c = jnp.asarray(inputs((k, 1), 7 + k + 1))

        def head_loss(w, x, c):
            return jnp.sum((x @ w) * c)

        w0 = jnp.zeros((1, 1), jnp.float32)
        g = jax.grad(head_loss)(w0, x, c)
        g_jit = jax.jit(jax.grad(head_loss))(w0, x, c)
        assert f32_bits(g) == f32_bits(g_jit), (1, k)
        head_grads.append({"m": 1, "k": k, "grad": f32_bits(g)})
    # An ensemble of Dense(1) heads (nn.vmap, parameters split over axis 0,
    # each member its own input): the kernel's gradient is one batched dot,
    # each member summed as the unbatched column-major GEMV.
    vmap_heads = []
    for b, m, k in [(2, 2, 9), (3, 9, 33), (2, 17, 321), (2, 25, 383), (3, 16, 100), (2, 3, 5)]:
        x = jnp.asarray(inputs((b, k, m), 11 * m + k))
        c = jnp.asarray(inputs((b, k, 1), 11 * m + k + 1))
        heads = nn.vmap(nn.Dense, variable_axes={"params": 0}, split_rngs={"params": True},
                        in_axes=0, out_axes=0)(features=1)
        v = heads.init(jax.random.key(0), x)

        def heads_loss(p, x, c, heads=heads):
            return jnp.sum(heads.apply({"params": p}, x) * c)

        gp = jax.grad(heads_loss)(v["params"], x, c)
        vmap_heads.append({"b": b, "m": m, "k": k, "grad_kernel": f32_bits(gp["kernel"])})
    # The same ensemble on one shared input (in_axes None): JAX folds the
    # members into the rows of one dot, c'[b * n, k] @ x[k, m]; the input's
    # gradient sums the members' cotangents.
    vmap_shared_heads = []
    for b, m, k, n in [(2, 2, 9, 1), (3, 9, 33, 1), (2, 17, 321, 1), (8, 25, 383, 1),
                       (3, 3, 3, 1), (2, 2, 3, 1), (16, 64, 128, 1), (3, 9, 33, 3),
                       (2, 17, 100, 4), (4, 40, 64, 2)]:
        x = jnp.asarray(inputs((k, m), 13 * m + k))
        c = jnp.asarray(inputs((b, k, n), 13 * m + k + 1))
        heads = nn.vmap(nn.Dense, variable_axes={"params": 0}, split_rngs={"params": True},
                        in_axes=None, out_axes=0, axis_size=b)(features=n)
        v = heads.init(jax.random.key(0), x)

        def shared_loss(p, x, c, heads=heads):
            return jnp.sum(heads.apply({"params": p}, x) * c)

        gp, gx = jax.grad(shared_loss, argnums=(0, 1))(v["params"], x, c)
        vmap_shared_heads.append({"b": b, "m": m, "k": k, "n": n,
                                  "grad_kernel": f32_bits(gp["kernel"]),
                                  "grad_x": f32_bits(gx)})
    with open(OUT, "w") as f:
        json.dump({"gemv": gemv, "dots": dots, "dense_head": dense, "head_grads": head_grads,
                   "vmap_heads": vmap_heads, "vmap_shared_heads": vmap_shared_heads}, f)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
