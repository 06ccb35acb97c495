"""Conformance fixtures for the layers beyond Dense and the first norms:
RMSNorm, GroupNorm and Embed (with attend), and BatchNorm over a 3-D input
(statistics over two axes). For each: the parameters at
init, the output, and the gradients of `sum(output * w)` (w fixed) with
respect to the parameters and the input.

Pinned: jax==0.10.2, jaxlib==0.10.2, flax==0.12.8 (CPU). From the
repository root:

    .venv-oracle/bin/python tools/oracle/generate_layers.py

Writes tests/fixtures/layers.json. Floats are u32 bit patterns.
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

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "layers.json")


def arr(shape, seed, scale=1.0, shift=0.0):
    return jnp.asarray(np.random.RandomState(seed).randn(*shape).astype(np.float32) * scale + shift)


def norm_case(name, module, shape, seed):
    x = arr(shape, seed, 2.0, 0.5)
    v = dict(module.init(jax.random.key(0), x))
    v.setdefault("params", {})
    y = module.apply(v, x)
    w = arr(y.shape, seed + 100)

    def loss(p, x):
        return jnp.sum(module.apply({"params": p}, x) * w)

    gp, gx = jax.grad(loss, argnums=(0, 1))(v["params"], x)
    return {
        "name": name, "shape": list(shape), "y_shape": list(y.shape), "x": f32_bits(x), "w": f32_bits(w),
        "params": tree_bits(v["params"]), "y": f32_bits(y),
        "grad_params": tree_bits(gp), "grad_x": f32_bits(gx),
    }


class Tied(nn.Module):
    @nn.compact
    def __call__(self, ids):
        embed = nn.Embed(10, 4)
        h = embed(ids)
        return h, embed.attend(h)


def embed_case(ids):
    ids = jnp.array(ids, jnp.int32)
    v = Tied().init(jax.random.key(0), ids)
    h, logits = Tied().apply(v, ids)
    w = arr(logits.shape, 7)

    def loss(p):
        return jnp.sum(Tied().apply({"params": p}, ids)[1] * w)

    g = jax.grad(loss)(v["params"])
    oob = nn.Embed(10, 4).apply({"params": v["params"]["Embed_0"]}, jnp.array([10, -11, 3], jnp.int32))
    return {
        "ids": np.asarray(ids).tolist(), "params": tree_bits(v["params"]), "h": f32_bits(h),
        "logits": f32_bits(logits), "w": f32_bits(w), "grad_params": tree_bits(g),
        "oob": f32_bits(oob),
    }


def batchnorm_3d():
    """BatchNorm in training mode over (N, H, C): statistics over two axes."""
    x = arr((4, 3, 5), 8, 2.0, 0.5)
    w = arr((4, 3, 5), 108)
    bn = nn.BatchNorm(use_running_average=False)
    v = bn.init(jax.random.key(0), x)
    y, upd = bn.apply(v, x, mutable=["batch_stats"])

    def loss(p, x):
        out, _ = bn.apply({"params": p, "batch_stats": v["batch_stats"]}, x, mutable=["batch_stats"])
        return jnp.sum(out * w)

    gp, gx = jax.grad(loss, argnums=(0, 1))(v["params"], x)
    return {"shape": [4, 3, 5], "x": f32_bits(x), "w": f32_bits(w), "y": f32_bits(y),
            "stats": tree_bits(upd["batch_stats"]), "grad_params": tree_bits(gp),
            "grad_x": f32_bits(gx)}


CONVS = [
    ("conv2d_same", dict(features=4, kernel_size=(3, 3)), (2, 5, 5, 3)),
    ("conv2d_strided_valid", dict(features=4, kernel_size=(3, 3), strides=2, padding="VALID"), (2, 7, 7, 3)),
    ("conv1d_causal_dilated", dict(features=2, kernel_size=(3,), padding="CAUSAL", kernel_dilation=2), (2, 9, 3)),
    ("conv2d_groups", dict(features=6, kernel_size=(2, 2), feature_group_count=3), (1, 4, 4, 3)),
    ("conv3d", dict(features=2, kernel_size=(2, 2, 2)), (1, 3, 3, 3, 2)),
    ("conv2d_explicit_input_dilation",
     dict(features=2, kernel_size=(3, 3), padding=((1, 2), (0, 1)), input_dilation=2), (1, 3, 4, 2)),
    ("conv2d_circular", dict(features=2, kernel_size=(3, 3), padding="CIRCULAR"), (1, 4, 4, 1)),
    ("conv1d_no_batch", dict(features=3, kernel_size=(2,)), (5, 2)),
    ("conv2d_two_batch_dims", dict(features=2, kernel_size=(2, 2), use_bias=False), (2, 3, 4, 4, 1)),
    # A kernel with more taps than the output has positions (16 > 4 x 3):
    # XLA swaps the operands of the input's cotangent.
    ("conv2d_kernel_over_cotangent", dict(features=4, kernel_size=(4, 4), strides=2, padding="VALID"),
     (2, 11, 9, 3)),
    # Circular padding with several input features (conv2d_circular has
    # one, whose input gradient takes oneDNN's matrix-vector order), and a
    # kernel wider than the input (the input repeated in the padding).
    ("conv2d_circular_features", dict(features=3, kernel_size=(3, 3), padding="CIRCULAR"),
     (2, 5, 4, 2)),
    ("conv2d_circular_repeats", dict(features=2, kernel_size=(5, 4), padding="CIRCULAR"),
     (1, 2, 3, 3)),
    ("conv1d_circular", dict(features=2, kernel_size=(4,), padding="CIRCULAR"), (2, 7, 3)),
    # One output feature per group (forward, kernel gradient) and one input
    # feature per group (input gradient): oneDNN's matrix-vector order.
    ("conv2d_one_output", dict(features=1, kernel_size=(3, 3)), (1, 5, 4, 3)),
    ("conv2d_depthwise", dict(features=6, kernel_size=(3, 3), feature_group_count=6), (2, 6, 5, 6)),
    ("conv1d_one_output", dict(features=1, kernel_size=(4,)), (2, 9, 5)),
]


CONV_TRANSPOSES = [
    ("convT_same_stride2", dict(features=3, kernel_size=(3, 3), strides=(2, 2)), (2, 4, 4, 2)),
    ("convT_valid", dict(features=2, kernel_size=(2, 2), padding="VALID"), (1, 3, 3, 2)),
    ("convT_1d_stride1", dict(features=2, kernel_size=(3,)), (2, 5, 3)),
]


def conv_transpose_cases():
    return [norm_case(name, nn.ConvTranspose(**kw), shape, 40 + i) | {"config": kw}
            for i, (name, kw, shape) in enumerate(CONV_TRANSPOSES)]


def conv_cases():
    out = []
    for i, (name, kw, shape) in enumerate(CONVS):
        out.append({**norm_case(name, nn.Conv(**kw), shape, 30 + i), "config": {
            k: (list(map(list, v)) if k == "padding" and not isinstance(v, str) else v) for k, v in kw.items()}})
    return out


POOLS = [
    ("max_valid", "max", dict(window_shape=(2, 2), strides=(2, 2), padding="VALID"), (2, 4, 5, 3)),
    ("max_same", "max", dict(window_shape=(3, 3), strides=(2, 2), padding="SAME"), (1, 5, 5, 2)),
    ("avg_same", "avg", dict(window_shape=(3, 3), strides=(2, 2), padding="SAME"), (1, 5, 5, 2)),
    ("avg_same_exclude_pad", "avg",
     dict(window_shape=(3, 3), strides=(2, 2), padding="SAME", count_include_pad=False), (1, 5, 5, 2)),
    ("avg_1d_no_batch", "avg", dict(window_shape=(2,), padding=((1, 0),)), (4, 3)),
]


def pool_cases():
    out = []
    for i, (name, kind, kw, shape) in enumerate(POOLS):
        x = arr(shape, 60 + i, 2.0, 0.5)
        f = nn.max_pool if kind == "max" else nn.avg_pool
        y = f(x, **kw)
        w = arr(y.shape, 160 + i)
        gx = jax.grad(lambda x: jnp.sum(f(x, **kw) * w))(x)
        cfg = {k: (list(map(list, v)) if k == "padding" and not isinstance(v, str) else v) for k, v in kw.items()}
        out.append({"name": name, "kind": kind, "config": cfg, "shape": list(shape), "x": f32_bits(x),
                    "y_shape": list(y.shape), "y": f32_bits(y), "w": f32_bits(w), "grad_x": f32_bits(gx)})
    return out


def rnn_cases():
    """One LSTMCell and one GRUCell unrolled over 3 steps from zero carries:
    parameters, outputs, and gradients of sum(outputs * w)."""
    out = {}
    x = arr((3, 2, 5), 70)  # time, batch, features
    for name, cell in [("lstm", nn.LSTMCell(4)), ("gru", nn.GRUCell(4))]:
        carry = cell.initialize_carry(jax.random.key(1), x[0].shape)
        v = cell.init(jax.random.key(2), carry, x[0])

        def unroll(p, x):
            c = carry
            ys = []
            for t in range(x.shape[0]):
                c, y = cell.apply({"params": p}, c, x[t])
                ys.append(y)
            return jnp.stack(ys)

        ys = unroll(v["params"], x)
        w = arr(ys.shape, 71)
        gp, gx = jax.grad(lambda p, x: jnp.sum(unroll(p, x) * w), argnums=(0, 1))(v["params"], x)
        out[name] = {"x": f32_bits(x), "params": tree_bits(v["params"]), "ys": f32_bits(ys),
                     "w": f32_bits(w), "grad_params": tree_bits(gp), "grad_x": f32_bits(gx)}
    return out


def attention_cases():
    """DenseGeneral, dot_product_attention with a bias and a mask, and
    MultiHeadDotProductAttention (causal self-attention; with dropout from
    the `dropout` stream), with gradients."""
    out = {"dense_general": norm_case("dense_general", nn.DenseGeneral((2, 3)), (2, 4, 5), 80)}
    out["dense_general_axes"] = norm_case(
        "dense_general_axes", nn.DenseGeneral(4, axis=(-2, -1)), (2, 3, 5), 81)
    q, k, v = arr((2, 3, 2, 4), 82), arr((2, 5, 2, 4), 83), arr((2, 5, 2, 4), 84)
    bias = arr((2, 2, 3, 5), 85)
    mask = nn.make_attention_mask(jnp.array([[1, 1, 1], [1, 1, 0]]) > 0,
                                  jnp.array([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]]) > 0)
    y = nn.dot_product_attention(q, k, v, bias=bias, mask=mask)
    w = arr(y.shape, 86)
    gq, gk, gv = jax.grad(lambda q, k, v: jnp.sum(nn.dot_product_attention(q, k, v, bias=bias, mask=mask) * w),
                          argnums=(0, 1, 2))(q, k, v)
    out["dpa"] = {"q": f32_bits(q), "k": f32_bits(k), "v": f32_bits(v), "bias": f32_bits(bias),
                  "mask": np.asarray(mask).reshape(-1).astype(int).tolist(), "mask_shape": list(mask.shape),
                  "y": f32_bits(y), "w": f32_bits(w), "gq": f32_bits(gq), "gk": f32_bits(gk), "gv": f32_bits(gv)}
    x = arr((2, 3, 8), 87)
    causal = nn.make_causal_mask(jnp.ones((2, 3)))
    mha = nn.MultiHeadDotProductAttention(num_heads=2)
    vv = mha.init(jax.random.key(0), x, mask=causal)
    y = mha.apply(vv, x, mask=causal)
    w = arr(y.shape, 88)
    gp, gx = jax.grad(lambda p, x: jnp.sum(mha.apply({"params": p}, x, mask=causal) * w),
                      argnums=(0, 1))(vv["params"], x)
    drop = nn.MultiHeadDotProductAttention(num_heads=2, dropout_rate=0.5)
    yd = drop.apply(vv, x, mask=causal, deterministic=False, rngs={"dropout": jax.random.key(5)})
    out["mha"] = {"x": f32_bits(x), "params": tree_bits(vv["params"]), "y": f32_bits(y), "w": f32_bits(w),
                  "grad_params": tree_bits(gp), "grad_x": f32_bits(gx), "y_dropout": f32_bits(yd),
                  "causal": np.asarray(causal).reshape(-1).astype(int).tolist()}
    return out


def rnn_module_cases():
    """nn.RNN over LSTMCell (forward) and GRUCell (reverse, keep_order):
    parameters, final carry and outputs (lax.scan runs the cell compiled)."""
    x = arr((2, 5, 3), 90)
    out = {"x": f32_bits(x)}
    for name, rnn in [("lstm", nn.RNN(nn.LSTMCell(4), return_carry=True)),
                      ("gru_reverse", nn.RNN(nn.GRUCell(4), return_carry=True, reverse=True, keep_order=True))]:
        v = rnn.init(jax.random.key(0), x)
        carry, y = rnn.apply(v, x)
        flat_carry = carry if not isinstance(carry, tuple) else jnp.concatenate([c.reshape(-1) for c in carry])
        out[name] = {"params": tree_bits(v["params"]), "y": f32_bits(y), "carry": f32_bits(flat_carry)}
    # Padded sequences (seq_lengths): reversal keeps the padding at the end,
    # the final carry is each sequence's last real one.
    for name, rnn, lengths in [
            ("lstm_lengths", nn.RNN(nn.LSTMCell(4), return_carry=True), [5, 2]),
            ("gru_reverse_lengths",
             nn.RNN(nn.GRUCell(4), return_carry=True, reverse=True, keep_order=True), [3, 5]),
            ("gru_reverse_lengths_no_keep", nn.RNN(nn.GRUCell(4), return_carry=True, reverse=True), [1, 4])]:
        lengths = jnp.asarray(lengths)
        v = rnn.init(jax.random.key(0), x, seq_lengths=lengths)
        carry, y = rnn.apply(v, x, seq_lengths=lengths)
        flat_carry = carry if not isinstance(carry, tuple) else jnp.concatenate([c.reshape(-1) for c in carry])
        out[name] = {"params": tree_bits(v["params"]), "y": f32_bits(y), "carry": f32_bits(flat_carry)}
    # One row: the compiled code vectorizes some of the elements only, and
    # the LSTM's scalar leftovers contract the other product (i * g).
    x1 = arr((1, 6, 3), 91)
    out["x_one_row"] = f32_bits(x1)
    for name, rnn in [("lstm_one_row_17", nn.RNN(nn.LSTMCell(17), return_carry=True)),
                      ("lstm_one_row_36", nn.RNN(nn.LSTMCell(36), return_carry=True)),
                      ("gru_one_row_20", nn.RNN(nn.GRUCell(20), return_carry=True))]:
        v = rnn.init(jax.random.key(0), x1)
        carry, y = rnn.apply(v, x1)
        flat_carry = carry if not isinstance(carry, tuple) else jnp.concatenate([c.reshape(-1) for c in carry])
        out[name] = {"params": tree_bits(v["params"]), "y": f32_bits(y), "carry": f32_bits(flat_carry)}
    # No time step: the initial carry and empty outputs.
    empty = jnp.zeros((2, 0, 3), jnp.float32)
    rnn = nn.RNN(nn.LSTMCell(4), return_carry=True)
    v = rnn.init(jax.random.key(0), empty)
    (c, h), y = rnn.apply(v, empty)
    out["empty"] = {"params": tree_bits(v["params"]), "y_shape": list(y.shape),
                    "carry": f32_bits(jnp.concatenate([c.reshape(-1), h.reshape(-1)]))}
    return out


def main():
    check_versions()
    out = {
        "norms": [
            norm_case("rms_2d", nn.RMSNorm(), (4, 6), 1),
            norm_case("rms_3d", nn.RMSNorm(), (2, 3, 5), 2),
            norm_case("rms_eps_noscale", nn.RMSNorm(epsilon=1e-3, use_scale=False), (3, 4), 3),
            norm_case("group_2d", nn.GroupNorm(num_groups=2), (4, 6), 4),
            norm_case("group_size_2d", nn.GroupNorm(num_groups=None, group_size=2), (3, 8), 5),
            # Statistics over two axes (H and the group): the order of XLA's
            # multi-axis sums (see tests/layers.rs).
            norm_case("group_3d", nn.GroupNorm(num_groups=2), (2, 5, 6), 6),
        ],
        "batchnorm_3d": batchnorm_3d(),
        "convs": conv_cases(),
        "conv_transposes": conv_transpose_cases(),
        "pools": pool_cases(),
        "rnn": rnn_cases(),
        "attention": attention_cases(),
        "rnn_module": rnn_module_cases(),
        "embed": embed_case([[1, 2, -1], [9, 0, 3]]),
        # The same ids as one axis: attend's gradient is then a product
        # with one contracting axis.
        "embed_flat": embed_case([1, 2, -1, 9, 0, 3]),
    }
    with open(OUT, "w") as f:
        json.dump(out, f)
    print("wrote", OUT)


if __name__ == "__main__":
    main()
