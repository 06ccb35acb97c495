"""Conformance fixtures for forward-mode differentiation: `jax.jvp` and
`jax.linearize` (eager, as flaxen's `tensor::jvp` runs) of the operations
flaxen gives a tangent rule, one case each, and of a small MLP; the
softmaxes also under `jax.linearize` (`linearize_cases`); plus
`jax.custom_jvp` (the tangent and the transposed rule under `jax.grad`).

Each case: the primal inputs and their tangents (float32, from a seeded
NumPy generator), the primal output and the output tangent, all as exact
decimals of their float32 bits (fixture_io.enc).

Pinned: jax==0.10.2, jaxlib==0.10.2 (CPU). From the repository root:

    .venv-oracle/bin/python tools/oracle/generate_jvp.py

Writes tests/fixtures/jvp.json.
"""

import json
import os
import sys

import numpy as np

import jax
import jax.numpy as jnp
import jaxlib

sys.path.insert(0, os.path.dirname(__file__))
from fixture_io import enc  # noqa: E402

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "jvp.json")
EXPECTED = {"jax": "0.10.2", "jaxlib": "0.10.2"}

rs = np.random.RandomState(11)


def arr(*shape, positive=False):
    x = rs.randn(*shape).astype(np.float32)
    return np.abs(x) + np.float32(0.1) if positive else x


X = lambda: arr(3, 5)  # noqa: E731
P = lambda: arr(3, 5, positive=True)  # noqa: E731

# name -> (function of the inputs, inputs)
CASES = {
    "exp": (jnp.exp, [X()]),
    "log": (jnp.log, [P()]),
    "tanh": (jnp.tanh, [X()]),
    "sigmoid": (jax.nn.sigmoid, [X()]),
    "relu": (jax.nn.relu, [X()]),
    "gelu": (jax.nn.gelu, [X()]),
    "sqrt": (jnp.sqrt, [P()]),
    "rsqrt": (jax.lax.rsqrt, [P()]),
    "square": (jnp.square, [X()]),
    "abs": (jnp.abs, [X()]),
    "powf": (lambda x: x ** 1.7, [P()]),
    "clip": (lambda x: jnp.clip(x, -0.5, 0.5), [X()]),
    "log1p": (jnp.log1p, [P()]),
    "expm1": (jnp.expm1, [X()]),
    "sin": (jnp.sin, [X()]),
    "cos": (jnp.cos, [X()]),
    "neg": (jnp.negative, [X()]),
    "add": (jnp.add, [X(), X()]),
    "add_row": (jnp.add, [X(), arr(5)]),
    "sub": (jnp.subtract, [X(), X()]),
    "mul": (jnp.multiply, [X(), X()]),
    "mul_row": (jnp.multiply, [X(), arr(5)]),
    "div": (jnp.divide, [X(), P()]),
    "div_scalar": (lambda x: x / 3.0, [X()]),
    "maximum": (jnp.maximum, [X(), X()]),
    "minimum": (jnp.minimum, [X(), X()]),
    "sum_0": (lambda x: jnp.sum(x, axis=0), [X()]),
    "sum_all": (jnp.sum, [X()]),
    "mean_last": (lambda x: jnp.mean(x, axis=-1), [X()]),
    "max_1": (lambda x: jnp.max(x, axis=1), [X()]),
    "softmax": (lambda x: jax.nn.softmax(x, axis=-1), [X()]),
    "softmax_0": (lambda x: jax.nn.softmax(x, axis=0), [X()]),
    "log_softmax": (lambda x: jax.nn.log_softmax(x, axis=-1), [X()]),
    "reshape": (lambda x: jnp.reshape(x, (5, 3)), [X()]),
    "transpose": (jnp.transpose, [X()]),
    "concatenate": (lambda a, b: jnp.concatenate([a, b], axis=1), [X(), X()]),
    "stack": (lambda a, b: jnp.stack([a, b], axis=0), [X(), X()]),
    "slice": (lambda x: x[:, 1:4], [X()]),
    "take": (lambda x: jnp.take(x, jnp.array([2, 0, 2]), axis=0), [X()]),
    "take_along_axis": (
        lambda x: jnp.take_along_axis(x, jnp.array([[0, 4], [1, 1], [3, 2]]), axis=1),
        [X()],
    ),
    "matmul": (jnp.matmul, [X(), arr(5, 4)]),
    "matvec": (jnp.matmul, [X(), arr(5)]),
    "logaddexp": (jnp.logaddexp, [X(), X()]),
    "where": (lambda a, b: jnp.where(a > 0, a, b), [X(), X()]),
    "mlp": (
        lambda x, w1, b1, w2: jnp.tanh(x @ w1 + b1) @ w2,
        [arr(4, 3), arr(3, 8), arr(8), arr(8, 2)],
    ),
}

BASE = set(CASES)

# Wider softmax rows, from a generator of their own (the cases above keep
# their draws): rows of 12 (log_softmax's tangent is one fused FMA chain)
# and of 40 (longer than XLA's 32-wide reduction windows: the products are
# rounded before the row sum).
rs_rows = np.random.RandomState(12)
CASES.update({
    "softmax_rows": (lambda x: jax.nn.softmax(x, axis=-1), [rs_rows.randn(6, 12).astype(np.float32)]),
    "softmax_wide": (lambda x: jax.nn.softmax(x, axis=-1), [rs_rows.randn(4, 40).astype(np.float32)]),
    "log_softmax_rows": (lambda x: jax.nn.log_softmax(x, axis=-1),
                         [rs_rows.randn(6, 12).astype(np.float32)]),
    "log_softmax_wide": (lambda x: jax.nn.log_softmax(x, axis=-1),
                         [rs_rows.randn(4, 40).astype(np.float32)]),
})

# Cases also run under `jax.linearize` (same inputs and tangents): where
# the jvp of a `jnp` function is fused under `jax.jvp` but its linear part
# runs operation by operation under `jax.linearize`.
LINEARIZE = ["softmax", "softmax_0", "softmax_rows", "softmax_wide",
             "log_softmax", "log_softmax_rows", "log_softmax_wide"]


def main():
    assert jax.__version__ == EXPECTED["jax"], jax.__version__
    assert jaxlib.__version__ == EXPECTED["jaxlib"], jaxlib.__version__
    cases, tangents = {}, {}
    for name, (f, xs) in CASES.items():
        ts = [arr(*np.shape(x)) for x in xs] if name in BASE else [
            rs_rows.randn(*np.shape(x)).astype(np.float32) for x in xs]
        y, ty = jax.jvp(f, tuple(xs), tuple(ts))
        cases[name] = dict(inputs=[enc(x) for x in xs], tangents=[enc(t) for t in ts],
                           out=enc(y), tangent=enc(ty))
        tangents[name] = ts
    linearized = {}
    for name in LINEARIZE:
        f, xs = CASES[name]
        y, f_jvp = jax.linearize(f, *xs)
        linearized[name] = dict(inputs=[enc(x) for x in xs],
                                tangents=[enc(t) for t in tangents[name]],
                                out=enc(y), tangent=enc(f_jvp(*tangents[name])))
    # linearize: the MLP's linear map applied to two tangents.
    f, xs = CASES["mlp"]
    y, f_jvp = jax.linearize(f, *xs)
    ts1 = [arr(*np.shape(x)) for x in xs]
    ts2 = [arr(*np.shape(x)) for x in xs]
    linearize = dict(inputs=[enc(x) for x in xs], out=enc(y),
                     tangents=[[enc(t) for t in ts1], [enc(t) for t in ts2]],
                     results=[enc(f_jvp(*ts1)), enc(f_jvp(*ts2))])

    # custom_jvp: sqrt with a tangent rule t / (2 sqrt(x) + 1e-6).
    @jax.custom_jvp
    def safe_sqrt(x):
        return jnp.sqrt(x)

    @safe_sqrt.defjvp
    def safe_sqrt_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        y = jnp.sqrt(x)
        return y, t * (y * 2.0 + 1e-6) ** -1.0

    x = np.concatenate([np.zeros(2, np.float32), arr(6, positive=True)])
    t = arr(8)
    y, ty = jax.jvp(safe_sqrt, (x,), (t,))
    g = jax.grad(lambda x: jnp.sum(safe_sqrt(x) * jnp.arange(8, dtype=jnp.float32)))(x)
    custom = dict(x=enc(x), t=enc(t), out=enc(y), tangent=enc(ty), grad=enc(g))

    data = dict(jax=jax.__version__, cases=cases, linearize=linearize, custom_jvp=custom,
                linearize_cases=linearized)
    path = os.path.abspath(OUT)
    with open(path, "w") as fh:
        json.dump(data, fh, separators=(",", ":"))
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main()
