"""Conformance fixtures for BatchNorm inside `nn.jit`: the forward pass as
XLA compiles it (its statistics and normalization fused, multiply-adds
contracted, constants folded), which is not eager JAX's.

Each case is `nn.jit(nn.BatchNorm)(...)` as the top-level module (its
variables are the plain module's), with random running statistics,
scale and bias, applied three times to new inputs; in training the
updated `batch_stats` of each call are fed to the next. The shapes cover
the orders in which XLA:CPU sums the statistics: one reduced axis of at
most 32 rows (unrolled, products contracted), more than 32 (windows of
32, squares rounded), several axes (a loop nest, vectorized or not), from
4,096 elements (YNNPACK), many features (the product `s1 * 1/n`
contracted into `x - mean`), a single feature, `use_scale` / `use_bias`
off, another momentum, and evaluation with the running averages.

Pinned: jax==0.10.2, jaxlib==0.10.2, flax==0.12.8 (CPU). The numbers of
`rsqrt` are the CPU's (`rsqrtss` refined by a Newton step), so the
fixture is this machine's (AMD EPYC, AVX-512). From the repository root:

    .venv-oracle/bin/python tools/oracle/generate_nn_jit_bn.py

Writes tests/fixtures/nn_jit_bn.json (floats as u32 bit patterns).
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

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "nn_jit_bn.json")
CALLS = 3

# (name, shape, train, momentum, use_scale, use_bias)
CASES = [
    ("rows_6", (6, 8), True, 0.9, True, True),
    ("rows_13", (13, 5), True, 0.9, True, True),
    ("one_row", (1, 4), True, 0.9, True, True),
    ("rows_45_windows", (45, 7), True, 0.9, True, True),
    ("nhwc_sequential", (4, 5, 5, 16), True, 0.9, True, True),
    ("nhwc_small", (2, 3, 3, 4), True, 0.99, True, True),
    ("nhwc_vectorized", (2, 8, 4, 21), True, 0.9, True, True),
    ("nhwc_long_axis", (2, 2, 40, 3), True, 0.9, True, True),
    ("ynn_64x64", (64, 64), True, 0.9, True, True),
    ("features_200", (5, 200), True, 0.9, True, True),
    ("features_300_ynn", (20, 300), True, 0.9, True, True),
    ("one_feature", (3, 1), True, 0.9, True, True),
    ("no_scale", (9, 5), True, 0.9, False, True),
    ("no_bias", (9, 5), True, 0.5, True, False),
    ("no_bias_features_250", (7, 250), True, 0.9, True, False),
    ("no_scale_no_bias", (11, 6), True, 0.9, False, False),
    ("eval_rows_6", (6, 8), False, 0.9, True, True),
    ("eval_nhwc", (2, 8, 4, 21), False, 0.9, True, True),
    ("eval_features_200", (5, 200), False, 0.9, True, True),
    ("eval_no_bias", (9, 5), False, 0.9, True, False),
]


def run_case(name, shape, train, momentum, use_scale, use_bias, seed):
    rs = np.random.RandomState(seed)
    features = shape[-1]
    module = nn.jit(nn.BatchNorm)(
        use_running_average=not train,
        momentum=momentum,
        use_scale=use_scale,
        use_bias=use_bias,
    )
    xs = [(rs.randn(*shape) * 1.7 + 0.3).astype(np.float32) for _ in range(CALLS)]
    v = module.init(jax.random.key(0), jnp.asarray(xs[0]))
    # Random statistics and parameters, so that every term counts.
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
    variables = {"params": params, "batch_stats": stats}
    calls = []
    for x in xs:
        y, upd = module.apply(
            {"params": params, "batch_stats": stats}, jnp.asarray(x), mutable=["batch_stats"]
        )
        call = {"x": f32_bits(x), "y": f32_bits(y)}
        if train:
            stats = jax.tree_util.tree_map(np.asarray, upd["batch_stats"])
            call["batch_stats"] = tree_bits(stats)
        calls.append(call)
    return {
        "name": name,
        "shape": list(shape),
        "train": train,
        "momentum": momentum,
        "use_scale": use_scale,
        "use_bias": use_bias,
        "variables": {c: tree_bits(t) for c, t in variables.items()},
        "calls": calls,
    }


def main():
    check_versions()
    cases = [run_case(*c, seed=i) for i, c in enumerate(CASES)]
    with open(OUT, "w") as f:
        json.dump({"cases": cases}, f)
    print(f"wrote {OUT} ({len(cases)} cases)")


if __name__ == "__main__":
    main()
