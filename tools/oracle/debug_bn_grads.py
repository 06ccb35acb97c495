"""Debug: JAX's view of the stateful vmapped MLP's gradients (jaxpr and
intermediate cotangents), to compare with flaxen op by op.

    .venv-oracle/bin/python tools/oracle/debug_bn_grads.py jaxpr|grads|emulate

`emulate` replays the backward of the jaxpr in numpy float32 and prints the
ulp distance to jax.value_and_grad (eager). What reproduces it bit for bit:
forward means are sums times the f32 reciprocal (1/5), the pmean a true
division by 3; the cotangent of rsqrt's output is summed over the items
first (sequentially, item 0 first) and then multiplied by -0.5 * (ans / x);
the mean's cotangent from `x - mean` is one sequential sum over items and
rows flattened; the mean's backward multiplies by 1/5; the cotangents of the
hidden pre-activation are added as (dk + d_mean) + d_square before the
Dense backward."""
import sys, os
import numpy as np
import jax, jax.numpy as jnp
import flax.linen as nn

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

xs2 = jnp.ones((3, 5, 4))
stateful = LinenStatefulVmapMLP().init(jax.random.key(0), xs2, True)
xs2r = jnp.asarray(np.random.RandomState(12).randn(3, 5, 4).astype(np.float32))

def st_loss(params):
    out, _ = LinenStatefulVmapMLP().apply(
        {"params": params, "batch_stats": stateful["batch_stats"]}, xs2r, True,
        mutable=["batch_stats"])
    return jnp.mean(out ** 2)

if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "jaxpr"
    if what == "jaxpr":
        print(jax.make_jaxpr(jax.value_and_grad(st_loss))(stateful["params"]))
    elif what == "grads":
        l, g = jax.value_and_grad(st_loss)(stateful["params"])
        for k, v in jax.tree_util.tree_leaves_with_path(g):
            a = np.asarray(v)
            print(jax.tree_util.keystr(k), a.shape, [hex(b) for b in a.ravel().view(np.uint32)])



def seqsum(a, axis):
    """Sequential float32 sum along `axis` (starting from 0)."""
    a = np.moveaxis(np.asarray(a, np.float32), axis, 0)
    acc = np.zeros(a.shape[1:], np.float32)
    for v in a:
        acc = (acc + v).astype(np.float32)
    return acc


def ulps(a, b):
    a = np.asarray(a, np.float32).ravel().view(np.int32).astype(np.int64)
    b = np.asarray(b, np.float32).ravel().view(np.int32).astype(np.int64)
    a = np.where(a < 0, -(a & 0x7FFFFFFF), a)
    b = np.where(b < 0, -(b & 0x7FFFFFFF), b)
    return np.abs(a - b)


def emulate(variant):
    P = {k: {kk: np.asarray(vv) for kk, vv in v.items()} for k, v in stateful["params"]["mlp"].items()}
    A = np.asarray(xs2r)
    d, e = P["BatchNorm_0"]["bias"], P["BatchNorm_0"]["scale"]
    f, g = P["hidden"]["bias"], P["hidden"]["kernel"]
    h, i = P["out"]["bias"], P["out"]["kernel"]
    F = np.float32
    j = np.asarray(jax.lax.dot_general(xs2r, g, (([2], [1]), ([0], [0]))))
    l = j + f[:, None, :]
    m = l * l
    n = F(2) * l
    five, three = F(5), F(3)
    if variant.get("fwd_recip", True):
        p = seqsum(l, 1) * (F(1) / five)
        r = seqsum(m, 1) * (F(1) / five)
    else:
        p = seqsum(l, 1) / five
        r = seqsum(m, 1) / five
    if variant.get("pmean_div", True):
        v = seqsum(np.stack([p, r], 1), 0) / three
    else:
        v = seqsum(np.stack([p, r], 1), 0) * (F(1) / three)
    x, z = v[0], v[1]
    ba = x * x
    bb = F(2) * x
    bc = z - ba
    bd = np.maximum(F(0), bc)
    bm = np.where(bc == bd, F(1), F(0)) / np.where(bd == 0, F(2), F(1))
    bw = l - x
    bx = bd + F(1e-5)
    by = np.asarray(jax.lax.rsqrt(jnp.asarray(bx)))
    bz = by / bx
    ca = F(-0.5) * bz
    cd = by * e[:, None, :]
    ce = bw * cd
    cg = ce + d[:, None, :]
    ch = np.maximum(cg, F(0))
    cm = np.asarray(jax.lax.dot_general(jnp.asarray(ch), i, (([2], [1]), ([0], [0]))))
    co = cm + h[:, None, :]
    cq = F(2) * co
    ct = F(1) / F(15)
    cv = ct * cq
    db = cv * i[:, None, :, 0]
    dd = np.where(cg > 0, db, F(0))
    dh = bw * dd
    di = seqsum(dh, 1)
    dk = dd * cd
    dm = di * e
    dn = seqsum(dm, 0)
    ds = dn * ca
    dt = -dk
    if variant.get("du_flat", True):
        du = seqsum(dt.reshape(15, 4), 0)
    else:
        du = seqsum(seqsum(dt, 1), 0)
    ea = ds * bm
    eb = -ea
    ec = eb * bb
    ed = du + ec
    ej = np.stack([ed, ea]) / three if variant.get("bdiv3", True) else np.stack([ed, ea]) * (F(1) / three)
    if variant.get("bdiv5", True):
        ep = ej[1] / five
        er = ej[0] / five
    else:
        ep = ej[1] * (F(1) / five)
        er = ej[0] * (F(1) / five)
    et = dk + er
    eu = ep * n
    ev = et + eu
    ey = seqsum(ev, 1)
    fa = np.zeros((3, 4, 4), np.float32)
    for i_ in range(5):
        fa = fa + A[:, i_, :, None] * ev[:, i_, None, :]
    fa = np.asarray(jax.lax.dot_general(jnp.asarray(ev), xs2r, (([1], [1]), ([0], [0])))).transpose(0, 2, 1)
    return dict(loss=None, hb=ey, hk=fa, sb=seqsum(dd, 1), ss=by * di,
                out=co)


if __name__ == "__main__" and what == "emulate":
    l_, gr = jax.value_and_grad(st_loss)(stateful["params"])
    gr = gr["mlp"]
    base = dict()
    import itertools
    keys = ["bdiv3"]
    for combo in itertools.product([True, False], repeat=len(keys)):
        var = dict(zip(keys, combo)); var["bdiv5"] = False
        r = emulate(var)
        print(var)
        print("  hidden/bias", ulps(r["hb"], gr["hidden"]["bias"]))
        print("  hidden/kernel", ulps(r["hk"], gr["hidden"]["kernel"]))
        print("  BN scale", ulps(r["ss"], gr["BatchNorm_0"]["scale"]).max(),
              "BN bias", ulps(r["sb"], gr["BatchNorm_0"]["bias"]).max())
