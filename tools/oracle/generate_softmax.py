"""`jax.nn.softmax` and `jax.nn.log_softmax` over the last axis, with the
cotangent of `sum(f(x) * c)`, in each of the ways JAX computes them:

* `eager`: `f(x)` called eagerly (`softmax` runs op by op in jax 0.10.2;
  `log_softmax` is itself jitted);
* `vjp`: eager `jax.vjp(f, x)`, its primal output and `vjp(c)`;
* `jit`: `jax.jit(f)(x)`, and `jax.jit(jax.grad(lambda x, c:
  jnp.sum(f(x) * c)))(x, c)`;
* forward mode: the tangent of `jax.jvp(f, (x,), (c,))` and of
  `jax.linearize(f, x)` at `c`.

From 4,096 input elements XLA:CPU hands the sums, and exponentials fused
into them, to YNNPACK (src/xla/ynn_reduce.rs, `math::ynn_exp`), so the
three differ there; smaller shapes are here too, for the jitted backward.

Inputs are not stored: both sides make them with `inputs` below (exact in
f64, then f32), so the fixture keeps only expected bits. YNNPACK splits
rows longer than 32,768 into tiles only with a thread pool: these bits are
a machine with 2 CPUs'.

Pinned: jax==0.10.2, jaxlib==0.10.2 (CPU). From the repository root:

    .venv-oracle/bin/python tools/oracle/generate_softmax.py

Writes tests/fixtures/softmax.json. 
"""

import json
import os
import sys

import numpy as np

import jax
import jax.numpy as jnp
import optax

sys.path.insert(0, os.path.dirname(__file__))
from fixture_io import expected  # noqa: E402
from generate_gemv import inputs as gemv_inputs  # noqa: E402
from generate_random import check_versions  # noqa: E402

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "softmax.json")

# Row counts below 16 that are 3, 5, 6 or 7 modulo 8 are left out: XLA
# computes the row sums' log with libm there (a known caveat, math.rs).
SHAPES = [
    (8, 12), (4, 40), (16, 100), (1, 1000), (2, 33),
    (4096,), (5000,), (2, 4096), (64, 128), (512, 16), (1024, 10),
    (1, 40000), (2, 40000), (4, 40000), (8, 40000), (12, 4000), (40000,),
    # One row from 4,096 elements (the tangent's sum of products is a YNNPACK
    # dot); 4,096 rows or more (the row sums' log runs in YNNPACK's fusion).
    (1, 5000), (1, 8192), (1, 20000), (4095, 10), (4096, 10),
]


# optax.softmax_cross_entropy_with_integer_labels: labels (i * 7919) % classes,
# the loss weighted per row by inputs(rows, 4).
XENT_SHAPES = [
    (8, 10), (100, 10), (1024, 10), (512, 16), (4096, 10), (2, 40000), (4, 5000),
    (4095, 10), (4096, 16), (6000, 7), (8192, 2),
]


def inputs(shape, seed):
    """generate_gemv's inputs in [-4, 4)."""
    return gemv_inputs(shape, seed, half_width=4.0)


def main():
    check_versions()
    cases = []
    for shape in SHAPES:
        x = jnp.asarray(inputs(shape, 1))
        c = jnp.asarray(inputs(shape, 2))
        case = {"shape": list(shape)}
        for name, f in [("softmax", jax.nn.softmax), ("log_softmax", jax.nn.log_softmax)]:
            y, pull = jax.vjp(f, x)
            (dx,) = pull(c)

            def loss(x, c, f=f):
                return jnp.sum(f(x) * c)

            _, jvp_t = jax.jvp(f, (x,), (c,))
            _, lin = jax.linearize(f, x)
            case[name] = {
                "jvp": expected(jvp_t),
                "linearize": expected(lin(c)),
                "eager": expected(f(x)),
                "vjp_y": expected(y),
                "vjp_dx": expected(dx),
                "jit": expected(jax.jit(f)(x)),
                "jit_dx": expected(jax.jit(jax.grad(loss))(x, c)),
            }
        cases.append(case)
    xent = []
    for shape in XENT_SHAPES:
        logits = jnp.asarray(inputs(shape, 3))
        labels = jnp.asarray((np.arange(shape[0]) * 7919 % shape[1]).astype(np.int32))
        w = jnp.asarray(inputs(shape[:1], 4))

        def loss(z, labels, w):
            return jnp.sum(optax.softmax_cross_entropy_with_integer_labels(z, labels) * w)

        xent.append({
            "shape": list(shape),
            "eager": expected(optax.softmax_cross_entropy_with_integer_labels(logits, labels)),
            "jit": expected(jax.jit(optax.softmax_cross_entropy_with_integer_labels)(logits, labels)),
            "grad": expected(jax.grad(loss)(logits, labels, w)),
            "jit_grad": expected(jax.jit(jax.grad(loss))(logits, labels, w)),
        })
    with open(OUT, "w") as f:
        json.dump({"cases": cases, "cross_entropy": xent}, f)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
