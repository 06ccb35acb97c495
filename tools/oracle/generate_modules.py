"""Conformance fixtures for the module API (flaxen::core, flaxen::nn).

Pinned: jax==0.10.2, jaxlib==0.10.2, flax==0.12.8 (CPU); see
generate_random.py for the venv. Run from the repository root:

    .venv-oracle/bin/python tools/oracle/generate_modules.py

Writes tests/fixtures/modules.json. Floats are u32 bit patterns.
"""

import json
import os
import sys

import numpy as np

import jax
import jax.numpy as jnp
import flax
import flax.linen as nn

sys.path.insert(0, os.path.dirname(__file__))
from generate_random import check_versions, f32_bits, key_words  # noqa: E402

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures")


def tree_bits(tree):
    """{path: {shape, bits}} of a nested dict of arrays, in insertion order."""
    out = {}

    def walk(t, prefix):
        for k, v in t.items():
            p = f"{prefix}/{k}" if prefix else k
            if isinstance(v, dict) or hasattr(v, "items"):
                walk(v, p)
            else:
                out[p] = dict(shape=list(np.shape(v)), bits=f32_bits(v))

    walk(tree, "")
    return out


def guide_training():
    """The randomness guide's training loop, step by step."""

    class SubModule(nn.Module):
        @nn.compact
        def __call__(self, x, train):
            kernel = self.param("submodule_kernel", jax.random.normal, x.shape)
            x = x + kernel
            x = nn.Dropout(0.2)(x, deterministic=not train)
            x = nn.Dense(3)(x)
            return x

    class Model(nn.Module):
        @nn.compact
        def __call__(self, x, train):
            kernel = self.variable(
                "other_collection",
                "module_kernel",
                lambda: jax.random.normal(self.make_rng("other"), x.shape),
            )
            x = x + kernel.value
            x = SubModule()(x, train)
            x = nn.Dropout(0.2)(x, deterministic=not train)
            x = nn.Dense(2)(x)
            return x

    params_rng, other_rng, train_rng = jax.random.split(jax.random.key(0), 3)
    init_rngs = {"params": params_rng, "other": other_rng}
    x = jnp.ones((1, 3))
    y = jnp.ones((1, 2))
    module = Model()
    variables = module.init(init_rngs, x, train=False)
    steps = []
    init = tree_bits(variables)
    for _ in range(10):
        dropout_rng, next_rng = jax.random.split(train_rng)

        def loss(params):
            out = module.apply(
                {"params": params, "other_collection": variables["other_collection"]},
                x,
                train=True,
                rngs={"dropout": dropout_rng},
            )
            return jnp.mean((y - out) ** 2)

        train_out = module.apply(
            variables, x, train=True, rngs={"dropout": dropout_rng}
        )
        l, grads = jax.value_and_grad(loss)(variables["params"])
        params = jax.tree_util.tree_map(lambda p, g: p - 1e-3 * g, variables["params"], grads)
        variables = {"params": params, "other_collection": variables["other_collection"]}
        train_rng = next_rng
        out = module.apply(variables, x, train=False)
        steps.append(
            dict(
                train_out=f32_bits(train_out),
                train_loss=f32_bits(l),
                grads=tree_bits(grads),
                params=tree_bits(params),
                eval_out=f32_bits(out),
                eval_loss=f32_bits(jnp.mean((y - out) ** 2)),
            )
        )
    return dict(init=init, steps=steps)


def nesting():
    """Three levels, explicit and auto names, a child called twice, a
    stream that falls back to 'params', custom initializers, variables in
    several collections, and apply with a mutable collection."""
    I = nn.initializers

    class Inner(nn.Module):
        @nn.compact
        def __call__(self, x):
            k = self.make_rng("noise")
            x = nn.Dense(3, kernel_init=I.glorot_uniform(), bias_init=I.normal(0.5))(x)
            return x + jax.random.normal(k, x.shape)

    class Middle(nn.Module):
        @nn.compact
        def __call__(self, x):
            inner = Inner(name="inner")
            x = inner(x)
            x = inner(x)
            x = Inner()(x)
            return nn.Dense(3, name="out", kernel_init=I.he_normal())(x)

    class Top(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = Middle(name="mid")(x)
            x = Middle()(x)
            count = self.variable("counter", "n", lambda: jnp.zeros((), jnp.float32))
            stats = self.variable(
                "stats", "noise", lambda: jax.random.uniform(self.make_rng("stats"), (3,))
            )
            if self.is_mutable_collection("counter"):
                count.value = count.value + 1.0
            return x * stats.value

    x = jnp.asarray(np.random.RandomState(0).randn(4, 3).astype(np.float32))
    model = Top()
    out_init, variables = model.init_with_output(
        {"params": jax.random.key(0), "stats": jax.random.key(7)}, x
    )
    out_apply, mutated = model.apply(
        variables, x, rngs={"noise": jax.random.key(5)}, mutable=["counter"]
    )
    return dict(
        x=f32_bits(x),
        init_out=f32_bits(out_init),
        variables={c: tree_bits(t) for c, t in variables.items()},
        order=[p for c, t in variables.items() for p in tree_bits({c: t})],
        apply_out=f32_bits(out_apply),
        mutated={c: tree_bits(t) for c, t in mutated.items()},
    )


def dropout_masks():
    cases = []
    for rate, shape, dims, seed in [
        (0.5, (4, 5), (0,), 3),
        (0.3, (3, 4, 2), (1,), 4),
        (0.75, (6,), (), 5),
        (0.1, (2, 3, 4), (0, 2), 6),
    ]:
        x = jnp.asarray(np.random.RandomState(seed).randn(*shape).astype(np.float32))
        out = nn.Dropout(rate, broadcast_dims=dims).apply(
            {}, x, deterministic=False, rngs={"dropout": jax.random.key(seed)}
        )
        cases.append(
            dict(rate=rate, shape=list(shape), broadcast_dims=list(dims), seed=seed,
                 x=f32_bits(x), out=f32_bits(out))
        )
    return cases


def mlp_grads():
    """Gradients of a small MLP with dropout, through jax.value_and_grad."""

    class Mlp(nn.Module):
        @nn.compact
        def __call__(self, x, train):
            x = nn.relu(nn.Dense(4)(x))
            x = nn.Dropout(0.25)(x, deterministic=not train)
            return nn.Dense(1)(x)

    rs = np.random.RandomState(11)
    x = jnp.asarray(rs.randn(5, 3).astype(np.float32))
    y = jnp.asarray(rs.randn(5, 1).astype(np.float32))
    model = Mlp()
    variables = model.init(jax.random.key(1), x, train=False)

    def loss(params):
        out = model.apply({"params": params}, x, train=True, rngs={"dropout": jax.random.key(2)})
        return jnp.mean((y - out) ** 2)

    l, g = jax.value_and_grad(loss)(variables["params"])
    return dict(
        x=f32_bits(x), y=f32_bits(y), params=tree_bits(variables["params"]),
        loss=f32_bits(l), grads=tree_bits(g),
    )


def normalization():
    rs = np.random.RandomState(21)
    x = jnp.asarray(rs.randn(8, 3).astype(np.float32) * 2 + 1)
    bn = nn.BatchNorm(momentum=0.9)
    variables = bn.init(jax.random.key(0), x, use_running_average=False)
    y, updated = bn.apply(variables, x, use_running_average=False, mutable=["batch_stats"])
    y_eval = bn.apply(
        {"params": variables["params"], "batch_stats": updated["batch_stats"]},
        x, use_running_average=True,
    )
    z = jnp.asarray(rs.randn(4, 5).astype(np.float32))
    ln = nn.LayerNorm()
    lv = ln.init(jax.random.key(0), z)
    # Gradients through a plain BatchNorm: Dense -> BatchNorm -> relu -> Dense.
    class BnMlp(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = nn.Dense(4, name="hidden")(x)
            h = nn.BatchNorm(use_running_average=False)(h)
            return nn.Dense(1, name="out")(nn.relu(h))

    gx = jnp.asarray(np.random.RandomState(12).randn(7, 4).astype(np.float32))
    gv = BnMlp().init(jax.random.key(0), gx)

    def g_loss(p):
        out, _ = BnMlp().apply({"params": p, "batch_stats": gv["batch_stats"]}, gx,
                               mutable=["batch_stats"])
        return jnp.mean(out ** 2)

    gl, gg = jax.value_and_grad(g_loss)(gv["params"])
    return dict(
        grad_x=f32_bits(gx), grad_params=tree_bits(gv["params"]),
        grad_loss=f32_bits(gl), grad_grads=tree_bits(gg),
        bn_x=f32_bits(x), bn_variables={c: tree_bits(t) for c, t in variables.items()},
        bn_train=f32_bits(y), bn_stats=tree_bits(updated["batch_stats"]),
        bn_eval=f32_bits(y_eval),
        ln_x=f32_bits(z), ln_out=f32_bits(ln.apply(lv, z)),
    )


class MLP(nn.Module):
    @nn.compact
    def __call__(self, xs):
        h = nn.Dense(4, name="hidden")(xs)
        h = nn.relu(h)
        return nn.Dense(1, name="out")(h)


def manual_vmap():
    """The design note's ManualVmapMLP: the MLP's own init and apply under
    jax.vmap, its parameters stored with a tree-valued self.param."""

    class ManualVmapMLP(nn.Module):
        @nn.compact
        def __call__(self, xs):
            mlp = MLP(parent=None)
            init_fn = lambda rng, xs: jax.vmap(mlp.init, in_axes=0)(
                jax.random.split(rng, xs.shape[0]), xs)["params"]
            apply_fn = jax.vmap(mlp.apply, in_axes=0)
            mlp_params = self.param("mlp", init_fn, xs)
            return apply_fn({"params": mlp_params}, xs)

    xs = jnp.ones((3, 4))
    out, variables = ManualVmapMLP().init_with_output(jax.random.key(0), xs)
    xr = jnp.asarray(np.random.RandomState(13).randn(3, 4).astype(np.float32))
    applied = ManualVmapMLP().apply(variables, xr)
    return dict(params=tree_bits(variables["params"]), init_out=f32_bits(out),
                x=f32_bits(xr), apply_out=f32_bits(applied))


def scan_training():
    """Gradients through scan: a scanned residual MLP (per-step parameters)
    trained for 3 SGD steps, and the broadcast-parameter RNN's gradients
    (each step's contribution summed by scan's backward)."""

    class ResBlock(nn.Module):
        @nn.compact
        def __call__(self, c, _):
            h = nn.relu(nn.Dense(4)(c))
            return c + h, None

    mlp = nn.scan(ResBlock, variable_axes={"params": 0}, split_rngs={"params": True},
                  length=3)
    x = jnp.asarray(np.random.RandomState(41).randn(5, 4).astype(np.float32))
    y = jnp.asarray(np.random.RandomState(42).randn(5, 4).astype(np.float32))
    params = mlp().init(jax.random.key(11), x, None)["params"]

    def loss(params):
        out, _ = mlp().apply({"params": params}, x, None)
        return jnp.mean((out - y) ** 2)

    steps = []
    for _ in range(3):
        l, g = jax.value_and_grad(loss)(params)
        steps.append(dict(params=tree_bits(params), loss=f32_bits(l), grads=tree_bits(g)))
        params = jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, g)

    class Cell(nn.Module):
        @nn.compact
        def __call__(self, c, x):
            h = jnp.tanh(nn.Dense(2)(c) + x)
            return h, h * 2.0

    rnn = nn.scan(Cell, variable_broadcast="params", split_rngs={"params": False})
    c = jnp.asarray(np.random.RandomState(43).randn(2).astype(np.float32))
    xs = jnp.asarray(np.random.RandomState(44).randn(6, 2).astype(np.float32))
    rv = rnn().init(jax.random.key(12), c, xs)

    def rnn_loss(params):
        cf, ys = rnn().apply({"params": params}, c, xs)
        return jnp.sum(ys ** 2) + jnp.sum(cf)

    rl, rg = jax.value_and_grad(rnn_loss)(rv["params"])

    # The same RNN on a batch of 3: the kernel's cotangent is then a dot
    # (contraction over the batch), not an outer product.
    bc = jnp.asarray(np.random.RandomState(45).randn(3, 2).astype(np.float32))
    bxs = jnp.asarray(np.random.RandomState(46).randn(6, 3, 2).astype(np.float32))
    bv = rnn().init(jax.random.key(12), bc, bxs)

    def batched_loss(params):
        cf, ys = rnn().apply({"params": params}, bc, bxs)
        return jnp.sum(ys ** 2) + jnp.sum(cf)

    bl, bg = jax.value_and_grad(batched_loss)(bv["params"])
    return dict(x=f32_bits(x), y=f32_bits(y), steps=steps,
                rnn_c=f32_bits(c), rnn_xs=f32_bits(xs), rnn_params=tree_bits(rv["params"]),
                rnn_loss=f32_bits(rl), rnn_grads=tree_bits(rg),
                batched_c=f32_bits(bc), batched_xs=f32_bits(bxs),
                batched_params=tree_bits(bv["params"]), batched_loss=f32_bits(bl),
                batched_grads=tree_bits(bg))


def scan_collections():
    """scan with a broadcast collection besides params ('consts', created by
    the first pass) and a carried one ('counter', which must exist before
    the scan; Flax's constancy-check pass does not commit it)."""

    class Step(nn.Module):
        @nn.compact
        def __call__(self, c, x):
            scale = self.variable("consts", "scale", lambda: jnp.full((2,), 0.5, jnp.float32))
            n = self.variable("counter", "n", lambda: jnp.zeros((), jnp.float32))
            n.value = n.value + 1.0
            h = nn.Dense(2)(c) * scale.value + x
            return h, h * n.value

    S = nn.scan(Step, variable_broadcast=["params", "consts"], variable_carry="counter",
                split_rngs={"params": False})
    c = jnp.asarray(np.random.RandomState(51).randn(2).astype(np.float32))
    xs = jnp.asarray(np.random.RandomState(52).randn(3, 2).astype(np.float32))
    (cf, ys), v = S().apply({"counter": {"n": jnp.zeros((), jnp.float32)}}, c, xs,
                            rngs={"params": jax.random.key(13)}, mutable=True)
    (cf2, ys2), v2 = S().apply(v, c, xs, mutable=["counter"])
    return dict(c=f32_bits(c), xs=f32_bits(xs),
                init_carry=f32_bits(cf), init_ys=f32_bits(ys),
                init_vars={k: tree_bits(t) for k, t in v.items()},
                carry=f32_bits(cf2), ys=f32_bits(ys2), counter=tree_bits(v2["counter"]))


def nested_collectives():
    """vmap inside vmap, each with an axis name: the inner items reduce over
    the outer axis (pmean) and over their own (psum); init and gradients."""

    class Inner(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = nn.Dense(2)(x)
            a = jax.lax.pmean(h, "outer")
            b = jax.lax.psum(h * a, "inner")
            return a + b

    V = nn.vmap(nn.vmap(Inner, variable_axes={"params": 0}, split_rngs={"params": True},
                        axis_name="inner"),
                variable_axes={"params": 0}, split_rngs={"params": True}, axis_name="outer")
    x = jnp.asarray(np.random.RandomState(61).randn(3, 2, 4).astype(np.float32))
    out, v = V().init_with_output(jax.random.key(14), x)

    def loss(p):
        # Flattened first: XLA's order for a sum over several axes depends
        # on the shape (flaxen sums a flat array left to right, as XLA does
        # for short 1-D sums).
        return jnp.sum((V().apply({"params": p}, x) ** 2).reshape(-1))

    l, g = jax.value_and_grad(loss)(v["params"])

    # One use of the collective's result per item: x - pmean(x) over 5 items.
    class Center(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = nn.Dense(3)(x)
            return h - jax.lax.pmean(h, "batch")

    C = nn.vmap(Center, variable_axes={"params": 0}, split_rngs={"params": True},
                axis_name="batch")
    xc = jnp.asarray(np.random.RandomState(62).randn(5, 4).astype(np.float32))
    cv = C().init(jax.random.key(15), xc)

    def center_loss(p):
        return jnp.sum((C().apply({"params": p}, xc) ** 2).reshape(-1))

    cl, cg = jax.value_and_grad(center_loss)(cv["params"])
    return dict(x=f32_bits(x), out=f32_bits(out), params=tree_bits(v["params"]),
                loss=f32_bits(l), grads=tree_bits(g),
                center_x=f32_bits(xc), center_params=tree_bits(cv["params"]),
                center_loss=f32_bits(cl), center_grads=tree_bits(cg))


def vmap_shared_params():
    """vmap over examples with parameters shared by every item
    (variable_axes={'params': None}): forward and gradients for a few batch
    sizes, and a module that uses one Dense twice (tied weights)."""

    class Mlp(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = nn.relu(nn.Dense(4)(x))
            return nn.Dense(2)(h)

    class Tied(nn.Module):
        @nn.compact
        def __call__(self, x):
            d = nn.Dense(3)
            return d(jnp.tanh(d(x)))

    out = {}
    for name, cls in [("mlp", Mlp), ("tied", Tied)]:
        V = nn.vmap(cls, variable_axes={"params": None}, split_rngs={"params": False},
                    in_axes=0)
        for b in [5, 40]:
            x = jnp.asarray(np.random.RandomState(70 + b).randn(b, 3).astype(np.float32))
            y, v = V().init_with_output(jax.random.key(16), x)

            def loss(p):
                # Flattened: the loss's own sum order does not reach the
                # gradients (its cotangent is all ones).
                return jnp.sum((V().apply({"params": p}, x) ** 2).reshape(-1))

            l, g = jax.value_and_grad(loss)(v["params"])
            out[f"{name}_{b}"] = dict(x=f32_bits(x), y=f32_bits(y),
                                      params=tree_bits(v["params"]),
                                      loss=f32_bits(l), grads=tree_bits(g))

    # The other way round: an ensemble of 8 Dense(2) (per-item params) on
    # one shared example (in_axes=None): JAX folds the items into the
    # product's 16 columns (computed alone, a one-row product with 2
    # columns is summed differently).
    E = nn.vmap(nn.Dense, variable_axes={"params": 0}, split_rngs={"params": True},
                in_axes=None, axis_size=8)
    x = jnp.asarray(np.random.RandomState(80).randn(8).astype(np.float32))
    y, v = E(2).init_with_output(jax.random.key(17), x)

    def e_loss(p):
        return jnp.sum((E(2).apply({"params": p}, x) ** 2).reshape(-1))

    el, eg = jax.value_and_grad(e_loss)(v["params"])
    # And with respect to the shared example: its cotangent is summed over
    # the items.
    xg = jax.grad(lambda x: jnp.sum((E(2).apply(v, x) ** 2).reshape(-1)))(x)
    out["ensemble"] = dict(x=f32_bits(x), y=f32_bits(y), params=tree_bits(v["params"]),
                           loss=f32_bits(el), grads=tree_bits(eg), x_grad=f32_bits(xg))
    return out


def lifted_vmap():
    """The design note's LinenVmapMLP and LinenStatefulVmapMLP, and vmap of
    a non-root submodule with in_axes=(0, None), out_axes=1, params on axis
    1, dropout with a split stream, and the same instance called twice."""
    xs = jnp.ones((3, 4))

    class LinenVmapMLP(nn.Module):
        @nn.compact
        def __call__(self, xs):
            VmapMLP = nn.vmap(MLP, variable_axes={"params": 0},
                              split_rngs={"params": True}, in_axes=0)
            return VmapMLP(name="mlp")(xs)

    mlp_out, mlp_vars = LinenVmapMLP().init_with_output(jax.random.key(0), xs)

    class StatefulMLP(nn.Module):
        @nn.compact
        def __call__(self, x, train):
            h = nn.Dense(4, name="hidden")(x)
            h = nn.BatchNorm(axis_name="batch")(h, use_running_average=not train)
            h = nn.relu(h)
            return nn.Dense(1, name="out")(h)

    class LinenStatefulVmapMLP(nn.Module):
        @nn.compact
        def __call__(self, xs, train):
            VmapMLP = nn.vmap(StatefulMLP, variable_axes={"params": 0, "batch_stats": 0},
                              split_rngs={"params": True}, in_axes=(0, None),
                              axis_name="batch")
            return VmapMLP(name="mlp")(xs, train)

    xs2 = jnp.ones((3, 5, 4))  # 3 models, a batch of 5 each
    stateful = LinenStatefulVmapMLP().init(jax.random.key(0), xs2, True)
    # Training: BatchNorm averages its statistics over the 3 mapped items.
    xs2r = jnp.asarray(np.random.RandomState(12).randn(3, 5, 4).astype(np.float32))
    st_out, st_upd = LinenStatefulVmapMLP().apply(stateful, xs2r, True, mutable=["batch_stats"])

    def st_loss(params):
        out, _ = LinenStatefulVmapMLP().apply(
            {"params": params, "batch_stats": stateful["batch_stats"]}, xs2r, True,
            mutable=["batch_stats"])
        return jnp.mean(out ** 2)

    st_l, st_g = jax.value_and_grad(st_loss)(stateful["params"])

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x, scale):
            h = nn.Dense(3)(x) * scale
            return nn.Dropout(0.5)(h, deterministic=False)

    class Outer(nn.Module):
        @nn.compact
        def __call__(self, x, scale):
            x = nn.Dense(3)(x)
            V = nn.vmap(Block, in_axes=(0, None), out_axes=1,
                        variable_axes={"params": 1},
                        split_rngs={"params": True, "dropout": True})
            v = V()
            a = v(x, scale)
            b = v(x, scale)
            return a + b

    x = jnp.asarray(np.random.RandomState(5).randn(4, 2).astype(np.float32))
    outer_out, outer_vars = Outer().init_with_output(
        {"params": jax.random.key(3), "dropout": jax.random.key(4)}, x, 0.5)
    outer_apply = Outer().apply(outer_vars, x, 2.0, rngs={"dropout": jax.random.key(9)})

    # Gradients through vmap: an ensemble of 3 Dense(1) on one shared batch.
    ens = nn.vmap(nn.Dense, in_axes=None, out_axes=0, variable_axes={"params": 0},
                  split_rngs={"params": True}, axis_size=3)(1)
    xe = jnp.asarray(np.random.RandomState(6).randn(5, 2).astype(np.float32))
    ye = jnp.asarray(np.random.RandomState(7).randn(3, 5, 1).astype(np.float32))
    ev = ens.init(jax.random.key(8), xe)

    def loss(params):
        return jnp.mean((ens.apply({"params": params}, xe) - ye) ** 2)

    l, g = jax.value_and_grad(loss)(ev["params"])
    return dict(
        mlp_out=f32_bits(mlp_out), mlp_params=tree_bits(mlp_vars["params"]),
        stateful={c: tree_bits(t) for c, t in stateful.items()},
        stateful_x=f32_bits(xs2r), stateful_out=f32_bits(st_out),
        stateful_stats=tree_bits(st_upd["batch_stats"]),
        stateful_loss=f32_bits(st_l), stateful_grads=tree_bits(st_g),
        outer_x=f32_bits(x), outer_init=f32_bits(outer_out),
        outer_vars=tree_bits(outer_vars["params"]), outer_apply=f32_bits(outer_apply),
        ens_x=f32_bits(xe), ens_y=f32_bits(ye), ens_params=tree_bits(ev["params"]),
        ens_loss=f32_bits(l), ens_grads=tree_bits(g),
    )


def lifted_scan():
    """scan: a broadcast-parameter RNN (forward and reversed), per-step
    parameters with dropout on split streams, and vmap of a scan."""

    class Cell(nn.Module):
        @nn.compact
        def __call__(self, c, x):
            h = jnp.tanh(nn.Dense(2)(c) + x)
            return h, h * 2.0

    c = jnp.asarray(np.random.RandomState(31).randn(2).astype(np.float32))
    xs = jnp.asarray(np.random.RandomState(32).randn(4, 2).astype(np.float32))
    out = {}
    for reverse in [False, True]:
        rnn = nn.scan(Cell, variable_broadcast="params", split_rngs={"params": False},
                      in_axes=0, out_axes=0, reverse=reverse)
        (cf, ys), v = rnn().init_with_output(jax.random.key(0), c, xs)
        out[f"rnn_reverse_{reverse}"] = dict(
            carry=f32_bits(cf), ys=f32_bits(ys), params=tree_bits(v["params"]))

    class Block(nn.Module):
        @nn.compact
        def __call__(self, c, x):
            h = nn.Dense(3)(c) + x
            h = nn.Dropout(0.5)(h, deterministic=False)
            return h, jnp.sum(h)

    blocks = nn.scan(Block, variable_axes={"params": 0},
                     split_rngs={"params": True, "dropout": True}, in_axes=0)
    c3 = jnp.ones((3,))
    xs3 = jnp.asarray(np.random.RandomState(33).randn(5, 3).astype(np.float32))
    (cf, ys), v = blocks().init_with_output(
        {"params": jax.random.key(1), "dropout": jax.random.key(2)}, c3, xs3)
    (cf2, ys2) = blocks().apply(v, c3, xs3, rngs={"dropout": jax.random.key(7)})
    out["dropout_blocks"] = dict(
        xs=f32_bits(xs3), carry=f32_bits(cf), ys=f32_bits(ys), params=tree_bits(v["params"]),
        apply_carry=f32_bits(cf2), apply_ys=f32_bits(ys2))

    vrnn = nn.vmap(
        nn.scan(Cell, variable_broadcast="params", split_rngs={"params": False}),
        in_axes=(0, 0), out_axes=0, variable_axes={"params": 0}, split_rngs={"params": True})
    cs = jnp.asarray(np.random.RandomState(34).randn(3, 2).astype(np.float32))
    xss = jnp.asarray(np.random.RandomState(35).randn(3, 4, 2).astype(np.float32))
    (cf, ys), v = vrnn().init_with_output(jax.random.key(5), cs, xss)
    out["vmap_of_scan"] = dict(
        cs=f32_bits(cs), xss=f32_bits(xss), carry=f32_bits(cf), ys=f32_bits(ys),
        params=tree_bits(v["params"]))
    # vmap inside scan: each step runs 2 independently parameterised cells.
    class TwoCells(nn.Module):
        @nn.compact
        def __call__(self, c, x):
            V = nn.vmap(Cell, in_axes=(0, 0), out_axes=0,
                        variable_axes={"params": 0}, split_rngs={"params": True})
            return V()(c, x)

    sv = nn.scan(TwoCells, variable_axes={"params": 0}, split_rngs={"params": True})
    c2 = jnp.asarray(np.random.RandomState(36).randn(2, 2).astype(np.float32))
    xs2 = jnp.asarray(np.random.RandomState(37).randn(3, 2, 2).astype(np.float32))
    (cf, ys), v = sv().init_with_output(jax.random.key(6), c2, xs2)
    out["scan_of_vmap"] = dict(
        c=f32_bits(c2), xs=f32_bits(xs2), carry=f32_bits(cf), ys=f32_bits(ys),
        params=tree_bits(v["params"]))

    # BatchNorm inside vmap (no axis_name): init, then apply with
    # mutable=["batch_stats"] updates every item's statistics.
    class Normed(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.BatchNorm(use_running_average=False, momentum=0.8)(nn.Dense(3)(x))

    vb = nn.vmap(Normed, variable_axes={"params": 0, "batch_stats": 0},
                 split_rngs={"params": True})
    xb = jnp.asarray(np.random.RandomState(38).randn(2, 6, 4).astype(np.float32))
    vv = vb().init(jax.random.key(11), xb)
    yb, upd = vb().apply(vv, xb, mutable=["batch_stats"])
    out["vmap_batch_norm"] = dict(
        x=f32_bits(xb), params=tree_bits(vv["params"]), y=f32_bits(yb),
        stats=tree_bits(upd["batch_stats"]))
    out["c"] = f32_bits(c)
    out["xs"] = f32_bits(xs)
    return out


def lift_transpose_example():
    """The lifting note's `lift_transpose` on the functional core."""
    from flax.core import lift, init as core_init
    from flax.core import nn as core_nn

    def lift_transpose(fn, target="params", variables=True, rngs=True):
        def wrapper(scope_fn, repack_fn, variable_groups, rng_groups, *args):
            target, rest = variable_groups

            def trans(x):
                if x.ndim == 2:
                    return x.T
                return x

            target = jax.tree_util.tree_map(trans, target)
            variable_groups = (target, rest)
            scope = scope_fn(variable_groups, rng_groups)
            y = fn(scope, *args)
            out_variables = repack_fn(scope)
            return y, out_variables

        return lift.pack(wrapper, in_variable_filters=(target, variables),
                         out_variable_filters=(variables,), rng_filters=(rngs,))

    x = jnp.ones((3, 2))
    y, params = core_init(lift_transpose(core_nn.dense))(jax.random.key(0), x, 4)

    return dict(y=f32_bits(y), params=tree_bits(params["params"]),
                y_shape=list(y.shape))


if __name__ == "__main__":
    check_versions()
    data = dict(
        guide_training=guide_training(),
        nesting=nesting(),
        dropout_masks=dropout_masks(),
        mlp_grads=mlp_grads(),
        normalization=normalization(),
        lifted_vmap=lifted_vmap(),
        manual_vmap=manual_vmap(),
        scan_training=scan_training(),
        scan_collections=scan_collections(),
        nested_collectives=nested_collectives(),
        vmap_shared_params=vmap_shared_params(),
        lifted_scan=lifted_scan(),
        lift_transpose=lift_transpose_example(),
    )
    path = os.path.join(OUT, "modules.json")
    with open(path, "w") as f:
        json.dump(data, f, separators=(",", ":"))
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")
