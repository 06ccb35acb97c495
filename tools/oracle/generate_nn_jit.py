"""Conformance fixtures for `nn.jit` (lift.jit): variable names and values,
outputs, updated batch statistics, the RNG keys the jitted body sees, and
gradients through the jitted module, for

* `Net(bn)`: `nn.jit(Body)` twice (JitBody_0, JitBody_1) then Dense(2),
  where Body = Dense(8) -> relu -> Dropout(0.3) [-> BatchNorm(momentum
  0.9) when `bn`], applied four times with the dropout keys key(100 + t)
  and the batch statistics of each call fed to the next;
* `ProbeNet`: `nn.jit(Probe)` called twice, then `make_rng` outside, where
  Probe returns the key data of two `make_rng('dropout')` and of a child's
  (Flax's `fork_rngs`: the jitted module draws its seeds from its own
  scope, so the body's keys hang off them);
* `nn.jit(Body)` as the top-level module.

Each case is run twice: as Flax runs it (`jitted`: the body compiled by
XLA), and with lift.jit's `jax.jit` replaced by the identity (`eager`: the same
keys, the body op by op as eager JAX runs it).
XLA rewrites BatchNorm's statistics and normalization when it fuses them
(sums times 1/n folded into the momentum, multiply-adds contracted), so
with `bn` the compiled numbers differ from the eager ones in the last bit;
the script records whether they agree (`jitted_equals_eager`). flaxen's
test compares its outputs and statistics with the jitted numbers (a
`Jit`'s BatchNorm emulates XLA's fusion); nn_jit_bn_ulps.py tabulates
both runs' distance to them, and flaxen's.

Gradients are of `sum(y * w)` (w fixed) with respect to the parameters
for the first call, by eager `jax.grad` (the jitted module inside it is
compiled, forward and backward, as Flax runs it).

Pinned: jax==0.10.2, jaxlib==0.10.2, flax==0.12.8 (CPU). From the
repository root:

    .venv-oracle/bin/python tools/oracle/generate_nn_jit.py

Writes tests/fixtures/nn_jit.json (floats as u32 bit patterns).
"""

import json
import os
import sys

import numpy as np

import jax
import jax.numpy as jnp
import flax.core.lift as flax_lift
import flax.linen as nn

sys.path.insert(0, os.path.dirname(__file__))
from generate_random import check_versions, f32_bits, key_words  # noqa: E402
from generate_modules import tree_bits  # noqa: E402

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "nn_jit.json")
CALLS = 4


def arr(shape, seed):
    return jnp.asarray(np.random.RandomState(seed).randn(*shape).astype(np.float32))


class Body(nn.Module):
    bn: bool
    train: bool = True

    @nn.compact
    def __call__(self, x):
        h = nn.relu(nn.Dense(8)(x))
        h = nn.Dropout(0.3, deterministic=not self.train)(h)
        if self.bn:
            h = nn.BatchNorm(use_running_average=not self.train, momentum=0.9)(h)
        return h


class Net(nn.Module):
    bn: bool

    @nn.compact
    def __call__(self, x):
        h = nn.jit(Body)(self.bn)(x)
        h = nn.jit(Body)(self.bn)(h)
        return nn.Dense(2)(h)


class Child(nn.Module):
    @nn.compact
    def __call__(self, x):
        return jax.random.key_data(self.make_rng("dropout"))


class Probe(nn.Module):
    @nn.compact
    def __call__(self, x):
        a = jax.random.key_data(self.make_rng("dropout"))
        b = jax.random.key_data(self.make_rng("dropout"))
        return a, b, Child()(x)


class ProbeNet(nn.Module):
    @nn.compact
    def __call__(self, x):
        probe = nn.jit(Probe)()
        first = probe(x)
        second = probe(x)
        after = jax.random.key_data(self.make_rng("dropout"))
        return first, second, after


def same(a, b):
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    return len(la) == len(lb) and all(
        np.array_equal(np.asarray(p).view(np.uint32), np.asarray(q).view(np.uint32))
        for p, q in zip(la, lb)
    )


def run_net(module, x, w):
    """init, CALLS applies with fresh dropout keys, and the gradient."""
    v = module.init({"params": jax.random.key(0), "dropout": jax.random.key(1)}, x)
    params = v["params"]
    stats = v.get("batch_stats")
    calls = []
    for t in range(CALLS):
        variables = {"params": params}
        if stats is not None:
            variables["batch_stats"] = stats
        y, upd = module.apply(
            variables, x, rngs={"dropout": jax.random.key(100 + t)}, mutable=["batch_stats"]
        )
        stats = upd.get("batch_stats")
        call = {"y": f32_bits(y)}
        if stats is not None:
            call["batch_stats"] = tree_bits(stats)
        calls.append(call)

    def loss(p):
        variables = {"params": p}
        if "batch_stats" in v:
            variables["batch_stats"] = v["batch_stats"]
        y, _ = module.apply(
            variables, x, rngs={"dropout": jax.random.key(100)}, mutable=["batch_stats"]
        )
        return jnp.sum(y * w)

    grads = jax.grad(loss)(params)
    return {
        "variables": {c: tree_bits(t) for c, t in v.items()},
        "calls": calls,
        "grads": tree_bits(grads),
        "y_shape": list(module.apply(v, x, rngs={"dropout": jax.random.key(100)},
                                     mutable=["batch_stats"])[0].shape),
    }


class _NoJit:
    """`jax` as `flax.core.lift` sees it, with `jit` the identity: the
    jitted body then runs op by op, as eager JAX runs it (unlike
    `jax.disable_jit()`, which also un-jits JAX's own functions, such as
    the random samplers, and so changes their numbers)."""

    def __getattr__(self, name):
        return getattr(jax, name)

    @staticmethod
    def jit(fn, **_):
        return fn


def both(f):
    """`f()` as Flax runs it, and with lift.jit's `jax.jit` the identity."""
    jitted = f()
    real = flax_lift.jax
    flax_lift.jax = _NoJit()
    try:
        eager = f()
    finally:
        flax_lift.jax = real
    return jitted, eager


def net_case(name, module, x, w):
    jitted, eager = both(lambda: run_net(module, x, w))
    agree = {
        part: jitted[part] == eager[part] for part in ("variables", "calls", "grads")
    }
    print(name, "jitted == eager:", agree)
    return {
        "name": name,
        "x_shape": list(x.shape),
        "x": f32_bits(x),
        "w": f32_bits(w),
        "jitted": jitted,
        "eager": eager,
        "jitted_equals_eager": agree,
    }


def probe_case(x):
    def run():
        module = ProbeNet()
        v = module.init({"params": jax.random.key(0), "dropout": jax.random.key(1)}, x)
        first, second, after = module.apply(v, x, rngs={"dropout": jax.random.key(7)})
        return {
            "first": [key_words(jax.random.wrap_key_data(k)) for k in first],
            "second": [key_words(jax.random.wrap_key_data(k)) for k in second],
            "after": key_words(jax.random.wrap_key_data(after)),
        }

    jitted, eager = both(run)
    assert jitted == eager, "the keys do not depend on compilation"
    return jitted


def main():
    check_versions()
    x = arr((6, 3), 1)
    w = arr((6, 2), 2)
    top = nn.jit(Body)(False)
    cases = [
        net_case("net", Net(False), x, w),
        net_case("net_bn", Net(True), x, w),
    ]
    wt = arr((6, 8), 3)
    cases.append(net_case("top", top, x, wt))
    out = {"cases": cases, "probe": probe_case(x)}
    with open(OUT, "w") as f:
        json.dump(out, f)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
