"""`lax.conv_general_dilated` (NHWC, HWIO) at realistic sizes: the output and
the two cotangents of `sum(conv(x, k) * w)`, jitted, as XLA:CPU computes
them. From 17 input or output features (the larger of the two, in total)
XLA hands a 2-D convolution to YNNPACK (`__ynn_fusion`), whose order
src/xla/ynn_conv.rs follows; below, Eigen's contraction runs it
(src/tensor/ops/conv.rs). Each cotangent is a convolution of its own,
routed by the same rule on its own features (the kernel's cotangent has the
batch as its input features).

Inputs are not stored: both sides make them with `inputs` below (exact in
f64, then f32), so the fixture keeps only expected bits. Machine-dependent
where Eigen's thread pool decides (a machine with 2 CPUs').

Pinned: jax==0.10.2, jaxlib==0.10.2 (CPU). From the repository root:

    .venv-oracle/bin/python tools/oracle/generate_convs.py

Writes tests/fixtures/convs.json.
"""

import json
import os
import sys

import jax
import jax.numpy as jnp
from jax import lax

sys.path.insert(0, os.path.dirname(__file__))
from fixture_io import expected  # noqa: E402
from generate_gemv import inputs  # noqa: E402
from generate_random import check_versions  # noqa: E402

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "convs.json")

# (name, x shape NHWC, kernel HWIO, strides, padding ("SAME", "VALID" or
# (low, high) pairs), kernel dilation, groups)
SAME = "SAME"
VALID = "VALID"
CASES = [
    # Leftover channels (17 = 4 * 4 + 1), tile_k 4 and 2, one chunk.
    ("c17_f8", (2, 8, 8, 17), (3, 3, 17, 8), (1, 1), SAME, (1, 1), 1),
    ("c17_f32", (2, 8, 8, 17), (3, 3, 17, 32), (1, 1), SAME, (1, 1), 1),
    ("c32_f1", (2, 8, 8, 32), (3, 3, 32, 1), (1, 1), SAME, (1, 1), 1),
    ("c24_f64", (2, 8, 8, 24), (3, 3, 24, 64), (1, 1), SAME, (1, 1), 1),
    # k1 cut into chunks (56 channels x 9 taps).
    ("c64_f64", (2, 8, 8, 64), (3, 3, 64, 64), (1, 1), SAME, (1, 1), 1),
    ("c130_f32", (2, 8, 8, 130), (3, 3, 130, 32), (1, 1), SAME, (1, 1), 1),
    # A CNN on 28x28 digits: one input channel to 32, then 32 to 64.
    ("mnist_conv1", (4, 28, 28, 1), (3, 3, 1, 32), (1, 1), SAME, (1, 1), 1),
    ("mnist_conv2", (4, 14, 14, 32), (3, 3, 32, 64), (1, 1), SAME, (1, 1), 1),
    # The benchmark's layer (16 -> 32 features: YNNPACK, for 32 >= 17).
    ("bench_c16_f32", (32, 28, 28, 16), (3, 3, 16, 32), (1, 1), SAME, (1, 1), 1),
    # 1x1 and 5x5, VALID.
    ("c24_f32_1x1", (4, 12, 12, 24), (1, 1, 24, 32), (1, 1), SAME, (1, 1), 1),
    ("c19_f17_5x5_valid", (2, 10, 10, 19), (5, 5, 19, 17), (1, 1), VALID, (1, 1), 1),
    # B unpacked (few rows), column tiles.
    ("unpacked_c32_f32", (1, 4, 4, 32), (3, 3, 32, 32), (1, 1), SAME, (1, 1), 1),
    ("unpacked_c300_f96", (1, 4, 4, 300), (3, 3, 300, 96), (1, 1), SAME, (1, 1), 1),
    ("unpacked_c40_f200", (2, 3, 3, 40), (3, 3, 40, 200), (1, 1), SAME, (1, 1), 1),
    # The batch as the kernel cotangent's input features.
    ("n17_c8_f8", (17, 8, 8, 8), (3, 3, 8, 8), (1, 1), SAME, (1, 1), 1),
    ("n24_c2_f40", (24, 6, 6, 2), (3, 3, 2, 40), (1, 1), SAME, (1, 1), 1),
    # Strides and kernel dilation.
    ("c32_f16_s2", (2, 8, 8, 32), (3, 3, 32, 16), (2, 2), SAME, (1, 1), 1),
    ("c17_f24_s2_valid", (2, 9, 9, 17), (3, 3, 17, 24), (2, 2), VALID, (1, 1), 1),
    ("c32_f16_d2", (2, 12, 12, 32), (3, 3, 32, 16), (1, 1), SAME, (2, 2), 1),
    ("c20_f16_3x5_s12", (2, 10, 12, 20), (3, 5, 20, 16), (1, 2), SAME, (1, 1), 1),
    # Groups (always packed), depthwise (SSE2's kernel: no FMA).
    ("c34_f8_g2", (2, 8, 8, 34), (3, 3, 17, 8), (1, 1), SAME, (1, 1), 2),
    ("c64_f64_g4", (2, 8, 8, 64), (3, 3, 16, 64), (1, 1), SAME, (1, 1), 4),
    ("depthwise_c32", (2, 8, 8, 32), (3, 3, 1, 32), (1, 1), SAME, (1, 1), 32),
    ("depthwise_c32_x2", (2, 8, 8, 32), (3, 3, 1, 64), (1, 1), SAME, (1, 1), 32),
    ("depthwise_c24_5x5", (2, 10, 10, 24), (5, 5, 1, 24), (1, 1), SAME, (1, 1), 24),
    ("c48_f48_g8", (2, 8, 8, 48), (3, 3, 6, 48), (1, 1), SAME, (1, 1), 8),
    # Eigen's side (at most 16 features each way), for the boundary.
    ("c16_f16", (2, 8, 8, 16), (3, 3, 16, 16), (1, 1), SAME, (1, 1), 1),
    # Eigen cutting the sums (src/xla/eigen_conv.rs). Sharded by the inner
    # dimension: 5x5 on 16 channels (400 terms, 200 + 200); two groups
    # (104 + 96: the groups' chips count in the cost model).
    ("eigen_k400_sharded", (1, 5, 60, 16), (5, 5, 16, 4), (1, 1), VALID, (1, 1), 1),
    ("eigen_g2_sharded", (2, 16, 16, 16), (5, 5, 8, 8), (1, 1), SAME, (1, 1), 2),
    # Parallel blocks (784 terms: 264, 264, 256); one thread (196 x 4,
    # oneDNN halving 392); 25 positions in blocks of 24 (the last alone).
    ("eigen_k784_chunks", (1, 7, 200, 16), (7, 7, 16, 16), (1, 1), VALID, (1, 1), 1),
    ("eigen_k784_one_thread", (1, 7, 16, 16), (7, 7, 16, 2), (1, 1), VALID, (1, 1), 1),
    ("eigen_lone_column", (1, 7, 31, 16), (7, 7, 16, 16), (1, 1), VALID, (1, 1), 1),
    # One output feature (oneDNN's gemv): 144 terms whole, and sharded
    # 96 + 48 (its kernel cotangent 1,600 terms, sharded too).
    ("eigen_f1_k144", (2, 9, 7, 16), (3, 3, 16, 1), (1, 1), SAME, (1, 1), 1),
    ("eigen_f1_sharded", (4, 20, 20, 16), (3, 3, 16, 1), (1, 1), SAME, (1, 1), 1),
    # Kernel cotangents over a small batch: 6,272 terms sharded, 1,600 in
    # blocks; a depthwise one (the diagonal of a dense convolution).
    ("eigen_dk_batch8", (8, 28, 28, 3), (3, 3, 3, 8), (1, 1), SAME, (1, 1), 1),
    ("eigen_dk_batch16_5x5", (16, 10, 10, 2), (5, 5, 2, 16), (1, 1), SAME, (1, 1), 1),
    ("eigen_depthwise_dk", (4, 12, 12, 8), (3, 3, 1, 8), (1, 1), SAME, (1, 1), 8),
    # 5x5 on 16 channels to 16: 400 terms each way.
    ("eigen_c16_f16_5x5", (4, 20, 20, 16), (5, 5, 16, 16), (1, 1), SAME, (1, 1), 1),
    # Grouped kernel cotangents whose operands XLA swaps (padding past the
    # kernel: more output positions than input ones), XLA's own loop; with
    # 2 groups LLVM leaves the batch's first product unfused from a batch
    # of 16, and at 12 on every other output feature (known).
    ("swapped_g2_n2", (2, 4, 4, 4), (2, 2, 2, 4), (1, 1), ((2, 2), (1, 1)), (1, 1), 2),
    ("swapped_g2_n16", (16, 4, 4, 4), (2, 2, 2, 4), (1, 1), ((2, 2), (1, 1)), (1, 1), 2),
    ("swapped_g2_n24_3x3", (24, 5, 5, 6), (3, 3, 3, 4), (1, 1), ((3, 3), (3, 3)), (1, 1), 2),
    ("swapped_g3_n9", (9, 4, 4, 6), (2, 2, 2, 6), (1, 1), ((2, 2), (1, 1)), (1, 1), 3),
    ("swapped_g4_n16_3x3", (16, 5, 5, 4), (3, 3, 1, 12), (1, 1), ((3, 3), (3, 3)), (1, 1), 4),
    ("swapped_g2_n12", (12, 4, 4, 4), (2, 2, 2, 4), (1, 1), ((2, 2), (1, 1)), (1, 1), 2),
    # Swapped kernel cotangents with an infinite cotangent at the first output
    # position, whose window lies wholly in the padding: XLA's loop skips
    # padded positions, so no `0 * inf` reaches the kernel's cotangent.
    ("swapped_g1_inf_in_padding", (2, 4, 4, 2), (2, 2, 2, 3), (1, 1), ((2, 2), (1, 1)), (1, 1), 1),
    ("swapped_g2_inf_in_padding", (2, 4, 4, 4), (2, 2, 2, 4), (1, 1), ((2, 2), (1, 1)), (1, 1), 2),
]

# Cases whose output cotangent is infinite at output position (0, 0) of
# every image.
INF_IN_PADDING = ("swapped_g1_inf_in_padding", "swapped_g2_inf_in_padding")


def main():
    check_versions()
    dn = ("NHWC", "HWIO", "NHWC")
    out = []
    for i, (name, xs, ks, strides, padding, dil, groups) in enumerate(CASES):
        x = jnp.asarray(inputs(xs, 3 * i + 1))
        k = jnp.asarray(inputs(ks, 3 * i + 2))

        def conv(x, k, strides=strides, padding=padding, dil=dil, groups=groups):
            return lax.conv_general_dilated(
                x, k, strides, padding, rhs_dilation=dil, dimension_numbers=dn,
                feature_group_count=groups)

        y = jax.jit(conv)(x, k)
        w = jnp.asarray(inputs(y.shape, 3 * i + 3))
        if name in INF_IN_PADDING:
            w = w.at[:, 0, 0, :].set(jnp.inf)

        def loss(x, k, w):
            return jnp.sum(conv(x, k) * w)

        dx, dk = jax.jit(jax.grad(loss, argnums=(0, 1)))(x, k, w)
        out.append({
            "name": name, "x": list(xs), "kernel": list(ks), "strides": list(strides),
            "padding": padding, "rhs_dilation": list(dil), "groups": groups,
            "y": expected(y), "dx": expected(dx), "dk": expected(dk),
            "inf_in_padding": name in INF_IN_PADDING,
        })
    with open(OUT, "w") as f:
        json.dump({"cases": out}, f)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
