"""Gradients through `flax.linen.RNN`: `lax.scan`'s backward pass.

For each case, `nn.RNN(cell(features), return_carry=True, reverse,
keep_order)` over `x` of shape [batch, time, inputs], with the loss

    loss(params, x) = sum(y * c)   (+ sum(h * ch) (+ sum(c_carry * cc)) with
                                    `carry_loss`: the final carry too)

records the eager outputs `y` and final carry (`rnn.apply`), the loss and
its gradients with respect to every parameter and to `x`, eagerly
(`jax.grad`: the scan's forward and backward passes each run as a compiled
`while` loop of their own, the ops between them eagerly) and jitted
(`jax.jit(jax.grad)`: one program).

Inputs are not stored: both sides make them with generate_gemv's `inputs`
(tests/common's `uniform_inputs`): `x = inputs([B, T, I], seed, 1)`, the
parameters in the order of their sorted paths `k = 0, 1, ...` as
`inputs(shape, 100 * seed + k + 1, w)` with `w = 1 / sqrt(rows)` for a
kernel, 0.5 for a bias (the width is stored), `c = inputs(y.shape, seed +
50, 1)`, `ch` and `cc` with seeds `seed + 60` and `seed + 70`.

The cells: LSTMCell, GRUCell, OptimizedLSTMCell, SimpleCell (Flax's
defaults), at batch 1, 2, 8, features 1, 3, 16, 64, time 1, 5, 20 (3
inputs), then variants (reverse, keep_order, the carry in the loss) and
the corners whose forward values flaxen does not reproduce (loops XLA
hoists, contractions of length one).

Pinned: jax==0.10.2, jaxlib==0.10.2 (CPU), flax==0.12.8. From the
repository root:

    .venv-oracle/bin/python tools/oracle/generate_rnn_grads.py

Writes tests/fixtures/rnn_grads.json.
"""

import json
import os
import sys

import numpy as np

import jax
import jax.numpy as jnp
import flax.linen as nn
from flax.traverse_util import flatten_dict, unflatten_dict

sys.path.insert(0, os.path.dirname(__file__))
from fixture_io import expected  # noqa: E402
from generate_gemv import inputs  # noqa: E402
from generate_random import check_versions  # noqa: E402

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "rnn_grads.json")

CELLS = {
    "lstm": nn.LSTMCell,
    "gru": nn.GRUCell,
    "optimized_lstm": nn.OptimizedLSTMCell,
    "simple": nn.SimpleCell,
}

INPUTS = 3

# Arrays beyond this many elements are stored as digests (the fixture
# holds 166 cases).
LIMIT = 256


def exp(x):
    return expected(x, LIMIT)


def grid():
    """(cell, batch, features, inputs, time, reverse, keep_order, carry_loss)."""
    for cell in CELLS:
        for b in [1, 2, 8]:
            for f in [1, 3, 16, 64]:
                for t in [1, 5, 20]:
                    yield (cell, b, f, INPUTS, t, False, False, False)
    for cell in CELLS:
        yield (cell, 2, 16, INPUTS, 5, True, True, False)
        yield (cell, 2, 16, INPUTS, 5, True, False, True)
        yield (cell, 8, 3, INPUTS, 5, False, False, True)
    # Forward corners: tiny loops XLA hoists into one kernel (LSTM of one
    # row of up to 3 features, two rows of 1 or 2), one input feature (a
    # product of length one), one-feature GRUs.
    for b, f in [(1, 2), (2, 2), (3, 1), (4, 1)]:
        yield ("lstm", b, f, INPUTS, 5, False, False, False)
    for cell in ["lstm", "gru"]:
        yield (cell, 2, 4, 1, 5, False, False, False)
        yield (cell, 1, 4, 1, 5, False, False, False)
    for b in [2, 4]:
        yield ("gru", b, 1, INPUTS, 5, False, False, False)


def flat_carry(carry):
    leaves = carry if isinstance(carry, tuple) else (carry,)
    return [leaf for leaf in leaves]


def case(seed, cell, b, f, i, t, reverse, keep_order, carry_loss):
    rnn = nn.RNN(CELLS[cell](f), return_carry=True, reverse=reverse, keep_order=keep_order)
    x = jnp.asarray(inputs((b, t, i), seed, 1.0))
    shapes = flatten_dict(rnn.init(jax.random.key(0), x)["params"], sep="/")
    params, specs = {}, []
    for k, path in enumerate(sorted(shapes)):
        shape = shapes[path].shape
        width = float(1.0 / np.sqrt(shape[0])) if len(shape) == 2 else 0.5
        params[path] = jnp.asarray(inputs(shape, 100 * seed + k + 1, width))
        specs.append({"path": path, "shape": list(shape), "seed": 100 * seed + k + 1, "width": width})
    params = unflatten_dict(params, sep="/")
    carry, y = rnn.apply({"params": params}, x)
    leaves = flat_carry(carry)
    c = jnp.asarray(inputs(y.shape, seed + 50, 1.0))
    carry_c = [jnp.asarray(inputs(leaf.shape, seed + 60 + 10 * n, 1.0)) for n, leaf in enumerate(leaves)]

    def loss(p, x):
        carry, y = rnn.apply({"params": p}, x)
        total = jnp.sum(y * c)
        if carry_loss:
            # The last leaf (h) first, as flaxen's test adds them.
            for leaf, w in reversed(list(zip(flat_carry(carry), carry_c))):
                total = total + jnp.sum(leaf * w)
        return total

    value = loss(params, x)
    gp, gx = jax.grad(loss, argnums=(0, 1))(params, x)
    jvalue = jax.jit(loss)(params, x)
    jgp, jgx = jax.jit(jax.grad(loss, argnums=(0, 1)))(params, x)
    flat = lambda g: {p: exp(v) for p, v in sorted(flatten_dict(g, sep="/").items())}  # noqa: E731
    return {
        "cell": cell, "batch": b, "features": f, "inputs": i, "time": t,
        "reverse": reverse, "keep_order": keep_order, "carry_loss": carry_loss, "seed": seed,
        "params": specs,
        "y": exp(y), "carry": [exp(leaf) for leaf in leaves],
        "loss": exp(value), "jit_loss": exp(jvalue),
        "grad_params": flat(gp), "grad_x": exp(gx),
        "jit_grad_params": flat(jgp), "jit_grad_x": exp(jgx),
    }


def main():
    check_versions()
    cases = [case(n + 1, *spec) for n, spec in enumerate(grid())]
    with open(OUT, "w") as fh:
        json.dump({"cases": cases}, fh, separators=(",", ":"))
        fh.write("\n")
    print(f"wrote {OUT}: {len(cases)} cases")


if __name__ == "__main__":
    main()
