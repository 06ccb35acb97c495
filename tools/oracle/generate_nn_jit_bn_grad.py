"""Conformance fixtures for gradients through a BatchNorm inside `nn.jit`
in training: under `jax.grad` JAX splits the jitted module into a forward
program (the jitted forward pass's numbers, plus residuals) and a backward
program, each compiled by XLA, whose numbers are not eager JAX's.

Each case differentiates `sum(y * w)` with `y` the output of
`nn.jit(nn.BatchNorm)(use_running_average=False)` applied to `x` (batch
statistics mutable; in training, and in evaluation with the running
averages), with respect to the parameters and to `x`, and keeps
`y`, the loss and the updated `batch_stats` (auxiliary outputs of the
forward program). The shapes cover the orders in which XLA:CPU sums the
statistics and the backward program's reductions: one reduced axis of at
most 32 rows, more than 32 (products rounded first), several axes (a loop
nest, vectorized or not), from 4,096 elements (YNNPACK), many features
(the output's `x - mean` contracted from 240 features, 288 without bias,
where the forward program reads `k` as one operand; on either side of
those limits), a single row, a single feature, `use_scale` /
`use_bias` off.

Pinned: jax==0.10.2, jaxlib==0.10.2, flax==0.12.8 (CPU). The numbers of
`rsqrt` are the CPU's, so the fixture is this machine's (AMD EPYC,
AVX-512). From the repository root:

    .venv-oracle/bin/python tools/oracle/generate_nn_jit_bn_grad.py

Writes tests/fixtures/nn_jit_bn_grad.json (floats as u32 bit patterns).
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

OUT = os.path.join(
    os.path.dirname(__file__), "..", "..", "tests", "fixtures", "nn_jit_bn_grad.json"
)

# (name, shape, momentum, use_scale, use_bias[, train])
CASES = [
    ("rows_6", (6, 8), 0.9, True, True),
    ("rows_13", (13, 5), 0.9, True, True),
    ("rows_32", (32, 8), 0.9, True, True),
    ("one_row", (1, 4), 0.9, True, True),
    ("rows_45_windows", (45, 7), 0.9, True, True),
    ("rows_100", (100, 3), 0.99, True, True),
    ("nhwc_sequential", (4, 5, 5, 16), 0.9, True, True),
    ("nhwc_small", (2, 3, 3, 4), 0.99, True, True),
    ("nhwc_vectorized", (2, 4, 4, 8), 0.9, True, True),
    ("nhwc_vectorized_21", (2, 8, 4, 21), 0.9, True, True),
    ("nhwc_long_axis", (2, 2, 40, 3), 0.9, True, True),
    ("ynn_64x64", (64, 64), 0.9, True, True),
    ("ynn_256x32", (256, 32), 0.9, True, True),
    ("features_200", (5, 200), 0.9, True, True),
    ("features_300_ynn", (20, 300), 0.9, True, True),
    ("one_feature", (3, 1), 0.9, True, True),
    ("no_scale", (9, 5), 0.9, False, True),
    ("no_bias", (9, 5), 0.5, True, False),
    ("no_bias_features_250", (7, 250), 0.9, True, False),
    ("features_239", (5, 239), 0.9, True, True),
    ("features_240", (5, 240), 0.9, True, True),
    ("no_scale_features_240", (5, 240), 0.9, False, True),
    ("no_bias_features_287", (5, 287), 0.9, True, False),
    ("no_bias_features_288", (5, 288), 0.9, True, False),
    ("no_scale_no_bias_features_300_ynn", (20, 300), 0.9, False, False),
    ("no_scale_no_bias", (11, 6), 0.9, False, False),
    ("nhwc_no_scale_no_bias", (2, 4, 4, 8), 0.9, False, False),
    ("eval_rows_6", (6, 8), 0.9, True, True, False),
    ("eval_rows_45", (45, 7), 0.9, True, True, False),
    ("eval_nhwc_vectorized", (2, 4, 4, 8), 0.9, True, True, False),
    ("eval_ynn_64x64", (64, 64), 0.9, True, True, False),
    ("eval_features_200", (5, 200), 0.9, True, True, False),
    ("eval_no_bias", (9, 5), 0.9, True, False, False),
    ("eval_no_scale_no_bias", (11, 6), 0.9, False, False, False),
]


def run_case(name, shape, momentum, use_scale, use_bias, train=True, seed=0):
    rs = np.random.RandomState(seed)
    features = shape[-1]
    module = nn.jit(nn.BatchNorm)(
        use_running_average=not train,
        momentum=momentum,
        use_scale=use_scale,
        use_bias=use_bias,
    )
    x = (rs.randn(*shape) * 1.7 + 0.3).astype(np.float32)
    w = rs.randn(*shape).astype(np.float32)
    v = module.init(jax.random.key(0), jnp.asarray(x))
    params = {}
    if use_scale:
        params["scale"] = (rs.rand(features) + 0.5).astype(np.float32)
    if use_bias:
        params["bias"] = rs.randn(features).astype(np.float32)
    stats = {
        "mean": (rs.randn(features) * 0.5).astype(np.float32),
        "var": (rs.rand(features) + 0.5).astype(np.float32),
    }
    assert set(v.get("params", {})) == set(params)

    def loss(p, x):
        y, upd = module.apply(
            {"params": p, "batch_stats": stats}, x, mutable=["batch_stats"]
        )
        return jnp.sum(y * w), (y, upd["batch_stats"])

    (value, (y, new_stats)), (gp, gx) = jax.value_and_grad(
        loss, argnums=(0, 1), has_aux=True
    )(params, jnp.asarray(x))
    return {
        "name": name,
        "shape": list(shape),
        "momentum": momentum,
        "train": train,
        "use_scale": use_scale,
        "use_bias": use_bias,
        "variables": {
            "params": tree_bits(params),
            "batch_stats": tree_bits(stats),
        },
        "x": f32_bits(x),
        "w": f32_bits(w),
        "loss": f32_bits(np.asarray(value).reshape(1)),
        "y": f32_bits(y),
        "batch_stats": tree_bits(jax.tree_util.tree_map(np.asarray, new_stats)),
        "grads": tree_bits(jax.tree_util.tree_map(np.asarray, gp)),
        "grad_x": f32_bits(gx),
    }


def main():
    check_versions()
    cases = [run_case(*c, seed=i) for i, c in enumerate(CASES)]
    with open(OUT, "w") as f:
        json.dump({"cases": cases}, f)
    print(f"wrote {OUT} ({len(cases)} cases)")


if __name__ == "__main__":
    main()
