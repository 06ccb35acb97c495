"""Conformance fixture for compiled training steps through normalization
layers: `jax.jit(jax.value_and_grad(loss, has_aux=True))(params,
batch_stats, x, y)` of small Flax models, where `loss` applies the model
with `mutable=["batch_stats"]` and returns the updated statistics as its
auxiliary output, as a Flax training step does:

- Dense -> BatchNorm (training) -> relu -> Dense,
- Dense -> LayerNorm -> tanh -> Dense,
- Conv -> BatchNorm (training, over N, H, W of NHWC) -> relu -> flatten
  -> Dense,

with the mean squared error and optax's softmax cross-entropies (integer
labels, label distributions), on a few shapes (odd feature counts, a
LayerNorm batch of one). Three calls each: between calls the parameters
take an SGD step on the jitted gradients (`p - 0.25 * g`, in float32
here) and the statistics become the jitted call's updated ones. flaxen's
`jit_value_and_grad_with_aux` traces the first call and replays the next
two: all three must give the loss, every gradient and the updated
statistics bit for bit (tests/jit_norm_step.rs). The eager numbers
(`jax.value_and_grad(loss, has_aux=True)`) are stored too, to count
where the two differ.

Pinned: jax==0.10.2, jaxlib==0.10.2, flax==0.12.8, optax==0.2.8 (CPU).
From the repository root:

    .venv-oracle/bin/python tools/oracle/generate_jit_norm_step.py

Writes tests/fixtures/jit_norm_step.json (floats as u32 bit patterns).
"""

import json
import os
import sys

import numpy as np

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

sys.path.insert(0, os.path.dirname(__file__))
from generate_random import check_versions, f32_bits  # noqa: E402
from generate_modules import tree_bits  # noqa: E402

OUT = os.path.join(
    os.path.dirname(__file__), "..", "..", "tests", "fixtures", "jit_norm_step.json"
)


class DenseNorm(nn.Module):
    """Dense -> BatchNorm (training) or LayerNorm -> activation -> Dense."""

    norm: str
    hidden: int
    out: int

    @nn.compact
    def __call__(self, x):
        x = nn.Dense(self.hidden)(x)
        if self.norm == "batch":
            x = nn.relu(nn.BatchNorm(use_running_average=False)(x))
        else:
            x = jnp.tanh(nn.LayerNorm()(x))
        return nn.Dense(self.out)(x)


class ConvNorm(nn.Module):
    """Conv 3x3 (SAME) -> BatchNorm (training) -> relu -> flatten -> Dense."""

    hidden: int
    out: int

    @nn.compact
    def __call__(self, x):
        x = nn.Conv(self.hidden, (3, 3))(x)
        x = nn.relu(nn.BatchNorm(use_running_average=False)(x))
        return nn.Dense(self.out)(x.reshape((x.shape[0], -1)))


LOSSES = {
    # The mean of squared errors.
    "mse": lambda out, y: jnp.mean((out - y) ** 2),
    # optax's cross-entropy with integer labels, averaged over the batch.
    "xent_int": lambda out, y: optax.softmax_cross_entropy_with_integer_labels(out, y).mean(),
    # optax's cross-entropy with label distributions, averaged.
    "xent_soft": lambda out, y: optax.softmax_cross_entropy(out, y).mean(),
}

# (name, model, loss, input shape, hidden features, outputs)
CASES = [
    ("bn_mse", "dense_bn", "mse", [16, 8], 12, 4),
    ("bn_xent_int_odd", "dense_bn", "xent_int", [10, 5], 7, 3),
    ("bn_xent_soft", "dense_bn", "xent_soft", [32, 6], 9, 5),
    ("bn_mse_wide", "dense_bn", "mse", [40, 6], 33, 3),
    ("ln_mse", "dense_ln", "mse", [12, 8], 16, 4),
    ("ln_xent_int_batch1", "dense_ln", "xent_int", [1, 5], 7, 3),
    ("ln_mse_odd", "dense_ln", "mse", [7, 3], 5, 2),
    ("ln_xent_soft_wide", "dense_ln", "xent_soft", [20, 6], 40, 4),
    ("conv_bn_mse", "conv_bn", "mse", [4, 6, 6, 2], 5, 3),
    ("conv_bn_xent_int", "conv_bn", "xent_int", [2, 5, 5, 3], 4, 4),
]

CALLS = 3
LEARNING_RATE = np.float32(0.25)


def f32(a):
    return np.asarray(a, dtype=np.float32)


def init(rs, model, shape, hidden, n_out):
    """Parameters and statistics from `rs` (not flax's initializers: the
    scales, biases and running averages are not their defaults, so that
    every term of the step is exercised)."""

    def dense(i, o):
        return {"kernel": f32(rs.randn(i, o) / np.sqrt(i)), "bias": f32(rs.randn(o) * 0.1)}

    def norm(n):
        return {"scale": f32(1.0 + 0.2 * rs.randn(n)), "bias": f32(0.1 * rs.randn(n))}

    def stats(n):
        return {"mean": f32(0.1 * rs.randn(n)), "var": f32(1.0 + 0.2 * np.abs(rs.randn(n)))}

    batch_stats = {}
    if model == "conv_bn":
        c_in = shape[-1]
        params = {
            "Conv_0": {
                "kernel": f32(rs.randn(3, 3, c_in, hidden) / np.sqrt(9 * c_in)),
                "bias": f32(rs.randn(hidden) * 0.1),
            },
            "BatchNorm_0": norm(hidden),
            "Dense_0": dense(shape[1] * shape[2] * hidden, n_out),
        }
        batch_stats["BatchNorm_0"] = stats(hidden)
    else:
        layer = "BatchNorm_0" if model == "dense_bn" else "LayerNorm_0"
        params = {"Dense_0": dense(shape[-1], hidden), layer: norm(hidden), "Dense_1": dense(hidden, n_out)}
        if model == "dense_bn":
            batch_stats[layer] = stats(hidden)
    return params, batch_stats


def main():
    check_versions()
    cases = []
    total_differ = 0
    for seed, (name, model_name, loss_name, shape, hidden, n_out) in enumerate(CASES):
        rs = np.random.RandomState(300 + seed)
        x = f32(rs.randn(*shape))
        batch = shape[0]
        if loss_name == "mse":
            y = f32(rs.randn(batch, n_out))
        elif loss_name == "xent_int":
            y = rs.randint(0, n_out, size=batch).astype(np.int32)
        else:
            y = f32(rs.rand(batch, n_out))
            y = f32(y / y.sum(axis=1, keepdims=True))
        params, stats = init(rs, model_name, shape, hidden, n_out)
        if model_name == "conv_bn":
            model = ConvNorm(hidden, n_out)
        else:
            model = DenseNorm("batch" if model_name == "dense_bn" else "layer", hidden, n_out)

        def loss(p, stats, x, y, model=model, loss_name=loss_name):
            variables = {"params": p}
            if stats:
                variables["batch_stats"] = stats
                out, updated = model.apply(variables, x, mutable=["batch_stats"])
                new_stats = updated["batch_stats"]
            else:
                out, new_stats = model.apply(variables, x), {}
            return LOSSES[loss_name](out, y), new_stats

        jitted = jax.jit(jax.value_and_grad(loss, has_aux=True))
        eager = jax.value_and_grad(loss, has_aux=True)
        calls = []
        differ = 0
        for _ in range(CALLS):
            (value, new_stats), grads = jitted(params, stats, x, y)
            (e_value, e_stats), e_grads = eager(params, stats, x, y)
            jit_bits = {
                "loss": f32_bits(value),
                "grads": tree_bits(grads),
                "batch_stats": tree_bits(new_stats),
            }
            eager_bits = {
                "loss": f32_bits(e_value),
                "grads": tree_bits(e_grads),
                "batch_stats": tree_bits(e_stats),
            }
            for part in ("loss", "grads", "batch_stats"):
                if part == "loss":
                    differ += int(jit_bits[part] != eager_bits[part])
                else:
                    differ += sum(
                        int(jit_bits[part][k] != eager_bits[part][k]) for k in jit_bits[part]
                    )
            calls.append(
                {
                    "params": tree_bits(params),
                    "batch_stats": tree_bits(stats),
                    "jit": jit_bits,
                    "eager": eager_bits,
                }
            )
            params = jax.tree.map(
                lambda p, g: f32(np.asarray(p) - LEARNING_RATE * np.asarray(g)), params, grads
            )
            stats = jax.tree.map(np.asarray, new_stats)
        arrays = CALLS * (1 + len(jit_bits["grads"]) + len(jit_bits["batch_stats"]))
        print(f"{name}: jitted and eager differ on {differ} of {arrays} arrays")
        total_differ += differ
        y_out = y.reshape(-1).tolist() if loss_name == "xent_int" else f32_bits(y)
        cases.append(
            {
                "name": name,
                "model": model_name,
                "loss": loss_name,
                "hidden": hidden,
                "out": n_out,
                "x": {"shape": list(x.shape), "bits": f32_bits(x)},
                "y": {"shape": list(y.shape), "values": y_out},
                "calls": calls,
            }
        )
    print(f"in all, jitted and eager differ on {total_differ} arrays")
    data = {"jax": jax.__version__, "cases": cases}
    path = os.path.abspath(OUT)
    with open(path, "w") as f:
        json.dump(data, f, separators=(",", ":"))
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main()
