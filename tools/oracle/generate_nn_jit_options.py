"""Conformance fixture for `nn.jit`'s `static_argnums` and `methods`
(flax 0.12.8, `flax/linen/transforms.py` jit over `flax/core/lift.py`
jit): a setup-style autoencoder

    AE: enc = Dense(4), drop = Dropout(0.3), dec = Dense(3)
        encode(x, train) = drop(relu(enc(x)), deterministic=not train)
        decode(z) = dec(z)
        __call__(x, train) = decode(encode(x, train))

jitted as `nn.jit(AE, methods={'encode': dict(static_argnums=(2,)),
'decode': {}})` (both methods compiled, `__call__` not; the flag `train`
of `encode` static; `decode(self, z)` has no argument 2, so it gets no
static arguments), used inside `Outer`:

    ae = JitAE(); z = ae.encode(x, train); y = ae.decode(z); return y, z

Records the variables of `Outer.init(..., x, True)`, then `y` and `z` over
a sequence of applies with changing `train` flags and dropout keys
key(100 + t), with how many times Flax traced `encode` after each call
(a counter in its Python body: a static value seen before replays the
compiled program, a new one traces again); and `JitAE().apply(...,
method='encode')` at the top level with the JitAE_0 variables, and the
trace count after it (the same signature: no new trace).

Each run is done as Flax runs it (`jitted`) and with lift.jit's `jax.jit`
the identity (`eager`), to show whether compilation changes the numbers.

Pinned: jax==0.10.2, jaxlib==0.10.2, flax==0.12.8 (CPU). From the
repository root:

    .venv-oracle/bin/python tools/oracle/generate_nn_jit_options.py

Writes tests/fixtures/nn_jit_options.json (floats as u32 bit patterns).
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
from generate_nn_jit import both  # noqa: E402

OUT = os.path.join(
    os.path.dirname(__file__), "..", "..", "tests", "fixtures", "nn_jit_options.json"
)
TRAINS = [True, True, False, True, False, False, True]

traces = 0


class AE(nn.Module):
    def setup(self):
        self.enc = nn.Dense(4)
        self.drop = nn.Dropout(0.3)
        self.dec = nn.Dense(3)

    def encode(self, x, train):
        global traces
        traces += 1
        return self.drop(nn.relu(self.enc(x)), deterministic=not train)

    def decode(self, z):
        return self.dec(z)

    def __call__(self, x, train):
        return self.decode(self.encode(x, train))


JitAE = nn.jit(AE, methods={"encode": dict(static_argnums=(2,)), "decode": {}})


class Outer(nn.Module):
    @nn.compact
    def __call__(self, x, train):
        ae = JitAE()
        z = ae.encode(x, train)
        y = ae.decode(z)
        return y, z


def run(x):
    global traces
    traces = 0
    model = Outer()
    v = model.init({"params": jax.random.key(0), "dropout": jax.random.key(1)}, x, True)
    traces = 0
    calls = []
    for t, train in enumerate(TRAINS):
        y, z = model.apply(v, x, train, rngs={"dropout": jax.random.key(100 + t)})
        calls.append({"train": train, "y": f32_bits(y), "z": f32_bits(z), "traces": traces})
    top = JitAE().apply(
        {"params": v["params"]["JitAE_0"]},
        x,
        True,
        method="encode",
        rngs={"dropout": jax.random.key(7)},
    )
    top_traces = traces
    # An argument number past encode's arguments: JAX ignores it, so the
    # flag is traced as an array, on which `not train` cannot branch.
    try:
        Bad = nn.jit(AE, static_argnums=(3,), methods=["encode"])
        Bad().apply({"params": v["params"]["JitAE_0"]}, x, True, method="encode",
                    rngs={"dropout": jax.random.key(7)})
        ignored = "no error"
    except Exception as e:  # noqa: BLE001
        ignored = type(e).__name__
    return {
        "variables": {c: tree_bits(t) for c, t in v.items()},
        "calls": calls,
        "top_encode": f32_bits(top),
        "top_traces": top_traces,
        "out_of_range_argnum": ignored,
    }


def main():
    check_versions()
    x = jnp.asarray(np.random.RandomState(5).randn(6, 3).astype(np.float32))
    jitted, eager = both(lambda: run(x))
    same = {k: jitted[k] == eager[k] for k in ("variables", "top_encode")}
    same["calls"] = all(
        a["y"] == b["y"] and a["z"] == b["z"] for a, b in zip(jitted["calls"], eager["calls"])
    )
    print("jitted == eager:", same)
    print("traces after each call:", [c["traces"] for c in jitted["calls"]])
    out = {
        "x_shape": list(x.shape),
        "x": f32_bits(x),
        "jitted": jitted,
        "eager": eager,
        "jitted_equals_eager": same,
    }
    with open(OUT, "w") as f:
        json.dump(out, f)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
