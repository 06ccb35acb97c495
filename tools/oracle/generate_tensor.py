"""Conformance fixtures for `flaxen::tensor`: values and vector-Jacobian
products of the differentiable operations, including the points where JAX
picks a convention (relu and abs at 0, ties of max/maximum, clip at its
bounds, pow at 0), and one MLP training step.

Pinned: jax==0.10.2, jaxlib==0.10.2, flax==0.12.8 (CPU). From the
repository root:

    .venv-oracle/bin/python tools/oracle/generate_tensor.py

Writes tests/fixtures/tensor_ops.json. Every float is an f32 written as the
decimal of its exact value; shapes are listed separately, data is row-major.
"""

import json
import os

import numpy as np

import jax
import jax.numpy as jnp

EXPECTED = {"jax": "0.10.2", "jaxlib": "0.10.2"}
OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "tensor_ops.json")


def enc(x):
    x = np.asarray(x, dtype=np.float32)
    return {"shape": list(x.shape), "data": [float(v) for v in x.reshape(-1)]}


def case(name, f, inputs, cotangent_seed=0):
    """Value of f(*inputs) and the VJP for a deterministic cotangent."""
    inputs = [jnp.asarray(np.asarray(x, dtype=np.float32)) for x in inputs]
    out, pullback = jax.vjp(f, *inputs)
    rng = np.random.default_rng(cotangent_seed)
    ct = rng.uniform(-1, 1, size=out.shape).astype(np.float32)
    grads = pullback(jnp.asarray(ct))
    return {
        "name": name,
        "inputs": [enc(x) for x in inputs],
        "cotangent": enc(ct),
        "output": enc(out),
        "grads": [enc(g) for g in grads],
    }


def main():
    assert jax.__version__ == EXPECTED["jax"], jax.__version__
    rng = np.random.default_rng(0)
    kinks = np.array([-2.0, -0.5, -0.25, 0.0, 0.25, 0.5, 1.0, 3.0], np.float32)
    pos = np.array([0.25, 0.5, 1.0, 2.0, 7.5], np.float32)
    wide = rng.uniform(-4, 4, size=(3, 5)).astype(np.float32)
    cases = [
        case("relu", jax.nn.relu, [kinks]),
        case("gelu", jax.nn.gelu, [wide]),
        case("sigmoid", jax.nn.sigmoid, [wide]),
        case("tanh", jnp.tanh, [wide]),
        case("exp", jnp.exp, [wide]),
        case("log", jnp.log, [pos]),
        case("sqrt", jnp.sqrt, [pos]),
        case("rsqrt", jax.lax.rsqrt, [pos]),
        case("abs", jnp.abs, [kinks]),
        case("square", jnp.square, [kinks]),
        case("clip", lambda x: jnp.clip(x, -0.5, 0.5), [kinks]),
        case("powf", lambda x: x ** 2.5, [pos]),
        case("pow", lambda x, y: x ** y, [np.array([0.0, 0.5, 2.0, 3.0], np.float32), np.array([2.0, 0.0, 1.5, -1.0], np.float32)]),
        case("maximum", jnp.maximum, [np.array([1.0, 2.0, 3.0, -1.0], np.float32), np.array([1.0, 0.0, 3.0, 5.0], np.float32)]),
        case("minimum", jnp.minimum, [np.array([1.0, 2.0, 3.0, -1.0], np.float32), np.array([1.0, 0.0, 3.0, 5.0], np.float32)]),
        case("max_axis1", lambda x: jnp.max(x, axis=1), [np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 1.0]], np.float32)]),
        case("max_all", lambda x: jnp.max(x), [np.array([[1.0, 3.0, 3.0], [2.0, 3.0, 1.0]], np.float32)]),
        case("softmax", lambda x: jax.nn.softmax(x, axis=-1), [wide]),
        case("log_softmax", lambda x: jax.nn.log_softmax(x, axis=0), [wide]),
        case("mean_keepdims", lambda x: jnp.mean(x, axis=0, keepdims=True), [wide]),
        case("var", lambda x: jnp.var(x, axis=-1), [wide]),
        case("broadcast_div", lambda x, y: x / y, [wide, np.array([0.5, -2.0, 4.0, 1.0, 3.0], np.float32)]),
        case("matmul_batched", jnp.matmul, [rng.uniform(-1, 1, (2, 1, 3, 4)), rng.uniform(-1, 1, (3, 4, 2))]),
    ]

    # One training step of a 2-layer MLP: loss and gradients of every parameter.
    params = {
        "Dense_0": {"kernel": rng.uniform(-0.5, 0.5, (6, 8)).astype(np.float32), "bias": rng.uniform(-0.1, 0.1, (8,)).astype(np.float32)},
        "Dense_1": {"kernel": rng.uniform(-0.5, 0.5, (8, 3)).astype(np.float32), "bias": rng.uniform(-0.1, 0.1, (3,)).astype(np.float32)},
    }
    x = rng.uniform(-1, 1, (4, 6)).astype(np.float32)
    labels = np.array([0, 2, 1, 2])
    onehot = np.eye(3, dtype=np.float32)[labels]

    def loss_fn(p):
        h = jax.nn.relu(x @ p["Dense_0"]["kernel"] + p["Dense_0"]["bias"])
        logits = h @ p["Dense_1"]["kernel"] + p["Dense_1"]["bias"]
        return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * onehot, axis=-1))

    loss, grads = jax.value_and_grad(loss_fn)(params)
    train_step = {
        "x": enc(x),
        "onehot": enc(onehot),
        "params": {m: {k: enc(v) for k, v in d.items()} for m, d in params.items()},
        "loss": float(loss),
        "grads": {m: {k: enc(v) for k, v in d.items()} for m, d in grads.items()},
    }

    # Backward rules bit for bit: each elementwise function's value and VJP
    # on 1024 inputs (as f32 bit patterns), run eagerly as jax.vjp does.
    wide_in = rng.uniform(-6, 6, 1024).astype(np.float32)
    pos_in = np.exp(rng.uniform(-8, 8, 1024)).astype(np.float32)
    ct = rng.uniform(-2, 2, 1024).astype(np.float32)
    rule_fns = {
        "tanh": (jnp.tanh, wide_in), "exp": (jnp.exp, wide_in / 2),
        "sigmoid": (jax.nn.sigmoid, wide_in), "relu": (jax.nn.relu, wide_in),
        "log": (jnp.log, pos_in), "sqrt": (jnp.sqrt, pos_in), "rsqrt": (jax.lax.rsqrt, pos_in),
        "square": (jnp.square, wide_in), "abs": (jnp.abs, wide_in),
        "gelu": (jax.nn.gelu, wide_in),
    }
    rules = {}
    for name, (f, x) in rule_fns.items():
        out, pullback = jax.vjp(f, jnp.asarray(x))
        (g,) = pullback(jnp.asarray(ct))
        bits = lambda a: np.asarray(a, np.float32).view(np.uint32).tolist()
        rules[name] = {"x": bits(x), "ct": bits(ct), "out": bits(out), "grad": bits(g)}

    # Softmax and log-softmax bit for bit: values and VJPs of the jitted
    # jax.nn functions over several row lengths, along the last axis and
    # along axis 0. Up to 32 elements XLA sums a row left to right, longer
    # rows in windows of 32 (TreeReductionRewriter). From 4096 elements on,
    # XLA:CPU hands the reductions to YNNPACK (`__ynn_fusion`), whose exp
    # and summation order differ: those cases are marked `exact: false`.
    srng = np.random.default_rng(7)
    softmax_cases = []
    shapes = [((3, w), -1) for w in (1, 2, 3, 5, 8, 10, 16, 31, 32, 33, 100, 1000)]
    shapes += [((4, 64), -1), ((2, 1500), -1), ((5, 3), 0), ((33, 4), 0), ((100, 3), 0), ((2, 40, 3), 1)]
    shapes += [((64, 64), -1), ((4, 1024), -1)]
    bits = lambda a: np.asarray(a, np.float32).reshape(-1).view(np.uint32).tolist()
    for shape, axis in shapes:
        x = (srng.standard_normal(shape) * 3).astype(np.float32)
        ct = srng.uniform(-2, 2, shape).astype(np.float32)
        sc = {"shape": list(shape), "axis": axis, "exact": int(np.prod(shape)) < 4096,
              "x": bits(x), "ct": bits(ct)}
        for fname, f in (("softmax", jax.nn.softmax), ("log_softmax", jax.nn.log_softmax)):
            out, pullback = jax.vjp(lambda x: f(x, axis=axis), jnp.asarray(x))
            (g,) = pullback(jnp.asarray(ct))
            sc[fname] = {"out": bits(out), "grad": bits(g)}
        softmax_cases.append(sc)

    with open(OUT, "w") as f:
        json.dump({"versions": {"jax": jax.__version__}, "cases": cases, "train_step": train_step,
                   "rules": rules, "softmax": softmax_cases}, f, separators=(",", ":"))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
