"""Conformance fixture for compiled training steps without `as_jitted`:
`jax.jit(jax.value_and_grad(loss))(params, x, y)` of small MLPs
(Dense -> activation -> Dense) whose jitted numbers differ from eager
JAX's, on three calls with new parameters each (an SGD update of the
jitted gradients, `p - 0.25 * g`, computed here in float32 and stored as
the next call's parameters). flaxen's `jit_value_and_grad_with` traces
the first call and replays the next two: all three must give these
numbers, bit for bit. The eager numbers (`jax.value_and_grad(loss)`) are
stored too, to count where the two differ.

Pinned: jax==0.10.2, jaxlib==0.10.2, optax==0.2.8 (CPU). From the
repository root:

    .venv-oracle/bin/python tools/oracle/generate_jit_step.py

Writes tests/fixtures/jit_step.json (floats as u32 bit patterns).
"""

import json
import os
import sys

import numpy as np

import jax
import jax.numpy as jnp
import optax

sys.path.insert(0, os.path.dirname(__file__))
from generate_random import check_versions, f32_bits  # noqa: E402
from generate_modules import tree_bits  # noqa: E402

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "jit_step.json")

ACTIVATIONS = {"relu": jax.nn.relu, "tanh": jnp.tanh, "sigmoid": jax.nn.sigmoid}


def forward(p, x, act):
    """Dense layers `Dense_0`, `Dense_1`, ... with `act` between them."""
    h = x
    for i in range(len(p)):
        if i > 0:
            h = ACTIVATIONS[act](h)
        h = h @ p[f"Dense_{i}"]["kernel"] + p[f"Dense_{i}"]["bias"]
    return h


LOSSES = {
    # The mean of squared errors.
    "mse": lambda out, y: jnp.mean((out - y) ** 2),
    # optax's cross-entropy with integer labels, averaged over the batch.
    "xent_int": lambda out, y: optax.softmax_cross_entropy_with_integer_labels(out, y).mean(),
    # optax's cross-entropy with label distributions, averaged.
    "xent_soft": lambda out, y: optax.softmax_cross_entropy(out, y).mean(),
}

# (name, loss, activation, batch, layer sizes: features in, hidden..., out)
CASES = [
    ("mse_relu", "mse", "relu", 12, [8, 16, 4]),
    ("mse_tanh", "mse", "tanh", 12, [8, 16, 4]),
    ("mse_sigmoid", "mse", "sigmoid", 16, [6, 10, 3]),
    ("xent_int_relu", "xent_int", "relu", 12, [8, 16, 5]),
    ("xent_int_tanh", "xent_int", "tanh", 32, [10, 24, 7]),
    ("xent_soft_relu", "xent_soft", "relu", 12, [8, 16, 5]),
    ("xent_soft_tanh", "xent_soft", "tanh", 20, [6, 12, 4]),
    # Other batch sizes (odd, the 32 rows XLA sums in one loop, more than
    # that, one row or two), a third layer: the fused bias sums and merged
    # losses beyond the shapes above.
    ("mse_relu_b7", "mse", "relu", 7, [5, 9, 3]),
    ("mse_tanh_b32", "mse", "tanh", 32, [8, 16, 4]),
    ("mse_relu_b40", "mse", "relu", 40, [6, 8, 2]),
    ("mse_sigmoid_b1", "mse", "sigmoid", 1, [8, 16, 4]),
    ("mse_tanh_3layer", "mse", "tanh", 16, [6, 12, 10, 3]),
    ("xent_soft_relu_b1", "xent_soft", "relu", 1, [8, 16, 5]),
    ("xent_soft_tanh_b2", "xent_soft", "tanh", 2, [6, 12, 4]),
    ("xent_soft_tanh_b32", "xent_soft", "tanh", 32, [6, 12, 4]),
    ("xent_soft_relu_b40", "xent_soft", "relu", 40, [6, 8, 3]),
    ("xent_soft_relu_3layer", "xent_soft", "relu", 24, [8, 16, 12, 6]),
]

CALLS = 3
LEARNING_RATE = np.float32(0.25)


def init(rs, sizes):
    def dense(i, o):
        return {
            "kernel": (rs.randn(i, o) / np.sqrt(i)).astype(np.float32),
            "bias": (rs.randn(o) * 0.1).astype(np.float32),
        }

    return {f"Dense_{k}": dense(i, o) for k, (i, o) in enumerate(zip(sizes, sizes[1:]))}


def main():
    check_versions()
    cases = []
    for seed, (name, loss_name, act, batch, sizes) in enumerate(CASES):
        n_in, n_out = sizes[0], sizes[-1]
        rs = np.random.RandomState(100 + seed)
        x = rs.randn(batch, n_in).astype(np.float32)
        if loss_name == "mse":
            y = rs.randn(batch, n_out).astype(np.float32)
        elif loss_name == "xent_int":
            y = rs.randint(0, n_out, size=batch).astype(np.int32)
        else:
            y = rs.rand(batch, n_out).astype(np.float32)
            y = (y / y.sum(axis=1, keepdims=True)).astype(np.float32)
        params = init(rs, sizes)

        def loss(p, x, y, act=act, loss_name=loss_name):
            return LOSSES[loss_name](forward(p, x, act), y)

        jitted = jax.jit(jax.value_and_grad(loss))
        eager = jax.value_and_grad(loss)
        calls = []
        differ = 0
        for _ in range(CALLS):
            value, grads = jitted(params, x, y)
            e_value, e_grads = eager(params, x, y)
            jit_bits = {"loss": f32_bits(value), "grads": tree_bits(grads)}
            eager_bits = {"loss": f32_bits(e_value), "grads": tree_bits(e_grads)}
            differ += int(jit_bits != eager_bits)
            calls.append({"params": tree_bits(params), "jit": jit_bits, "eager": eager_bits})
            params = jax.tree.map(
                lambda p, g: (np.asarray(p) - LEARNING_RATE * np.asarray(g)).astype(np.float32),
                params,
                grads,
            )
        print(f"{name}: jitted and eager differ on {differ} of {CALLS} calls")
        y_out = y.reshape(-1).tolist() if loss_name == "xent_int" else f32_bits(y)
        cases.append(
            {
                "name": name,
                "loss": loss_name,
                "activation": act,
                "x": {"shape": list(x.shape), "bits": f32_bits(x)},
                "y": {"shape": list(y.shape), "values": y_out},
                "calls": calls,
            }
        )
    data = {"jax": jax.__version__, "cases": cases}
    path = os.path.abspath(OUT)
    with open(path, "w") as f:
        json.dump(data, f, separators=(",", ":"))
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main()
