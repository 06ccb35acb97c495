#!/usr/bin/env python3
"""Fixtures for `random::tf`'s TensorFlow API details (tests/fixtures/tf_api.json),
from TensorFlow's CPU kernels, pinned to tensorflow-cpu==2.21.0:

    .venv-tf/bin/python tools/oracle/tf/gen_api_fixtures.py

Covered: Generator defaults (`normal(shape)`, `uniform(shape)`,
`truncated_normal(shape)`) and draws with the dtype chosen at run time;
`split(0)`; `skip` with negative and large deltas (the state after each);
`stateless_fold_in` with int32/int64/uint32/uint64 data; the `alg`
argument (names and ids, accepted or refused, with TF's error class); the
raw `*_v2` kernels with an explicit key and counter, and
`StatelessRandomGetKeyCounter`. Encoding as gen_fixtures.py.
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from gen_fixtures import DT, TF_VERSION, encode  # noqa: E402

if tf.__version__ != TF_VERSION:
    sys.exit(f"need tensorflow-cpu=={TF_VERSION}, found {tf.__version__}")

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "..", "tests", "fixtures", "tf_api.json")


def state(g):
    return [int(x) for x in g.state.numpy()]


def error_name(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the class is the fixture
        return type(e).__name__
    return None


def generator_cases():
    out = []
    # Defaults: mean 0, stddev 1, [0, 1), float32.
    g = tf.random.Generator.from_seed(7)
    for op, fn in [("normal", g.normal), ("uniform", g.uniform), ("truncated_normal", g.truncated_normal)]:
        out.append({"op": op, "dtype": "float32", "shape": [2, 3], **encode(fn([2, 3])), "state": state(g)})
    # The dtype at run time.
    for dtype in ["float16", "bfloat16", "float32", "float64"]:
        for op in ["normal", "uniform", "truncated_normal"]:
            t = getattr(g, op)([4], dtype=DT[dtype])
            out.append({"op": op, "dtype": dtype, "shape": [4], **encode(t), "state": state(g)})
    for dtype in ["int32", "int64"]:
        t = g.uniform([5], minval=-3, maxval=11, dtype=DT[dtype])
        out.append({"op": "uniform_int", "dtype": dtype, "shape": [5], "params": [-3, 11], **encode(t), "state": state(g)})
    for dtype in ["int32", "int64", "uint32", "uint64"]:
        t = g.uniform_full_int([3], dtype=DT[dtype])
        out.append({"op": "uniform_full_int", "dtype": dtype, "shape": [3], **encode(t), "state": state(g)})
    return out


def param_rounding_cases():
    """How a Python float parameter becomes a 16-bit dtype: values just past
    a tie of the 16-bit type, where rounding through float32 first differs
    from rounding once (stddev 0, so the output is the converted mean)."""
    out = []
    for dtype, mean in [("float16", 1.0 + 2**-11 + 2**-40), ("bfloat16", 1.0 + 2**-8 + 2**-40),
                        ("float16", 1e-8), ("bfloat16", 3.3e38), ("float16", 65519.0)]:
        g = tf.random.Generator.from_seed(1)
        t = g.normal([1], mean=mean, stddev=0.0, dtype=DT[dtype])
        out.append({"dtype": dtype, "mean": repr(mean), **encode(t)})
    return out


def split_and_skip():
    g = tf.random.Generator.from_seed(1)
    children = g.split(0)
    split0 = {"count": len(children), "state": state(g)}
    skips = []
    for start, deltas in [([1, 0, 0], [-1, -5, 3, -(2**40), 2**62, -1]),
                          ([257, 0, 0], [-1, -2]),
                          ([-1, 0, 5], [1, -1]),
                          ([0, -1, 9], [1, 2**56, -(2**56)])]:
        g = tf.random.Generator.from_state(start, alg="philox")
        after = []
        for d in deltas:
            g.skip(d)
            after.append(state(g))
        skips.append({"start": start, "deltas": [str(d) for d in deltas], "states": after})
    return split0, skips


def fold_in_cases():
    out = []
    for seed, sdt in [([1, 2], "int32"), ([1, 2], "int64"), ([-5, 2**31 - 1], "int64")]:
        for data, ddt in [(3, "int32"), (-9, "int64"), (3, "uint32"), (2**32 - 1, "uint32"), (2**64 - 1, "uint64")]:
            t = tf.random.experimental.stateless_fold_in(
                tf.constant(seed, DT[sdt]), tf.constant(data, DT[ddt]))
            out.append({"seed": seed, "seed_dtype": sdt, "data": str(data), "data_dtype": ddt,
                        "values": [str(int(x)) for x in t.numpy()]})
    return out


def alg_cases():
    out = []
    for alg in ["philox", "auto_select", "threefry", 1, 2, 3, "bogus", 7]:
        err = error_name(lambda: tf.random.stateless_normal([2], [1, 2], alg=alg).numpy())
        case = {"alg": str(alg), "error": err}
        if err is None:
            case.update(encode(tf.random.stateless_normal([2], [1, 2], alg=alg)))
        out.append(case)
    return out


def v2_cases():
    out = []
    kc = []
    for seed in [[1, 2], [-7, 123456789], [0, 0]]:
        k, c = tf.raw_ops.StatelessRandomGetKeyCounter(seed=tf.constant(seed, tf.int64))
        kc.append({"seed": seed, "key": str(int(k.numpy()[0])), "counter": [str(int(x)) for x in c.numpy()]})
    keys = [(10413732777507651514, [0, 17830669156045600267]), (1, [0, 0]), (2**64 - 1, [2**64 - 1, 2**64 - 1]),
            (5, [2**64 - 3, 0])]
    for key, counter in keys:
        kt = tf.constant([key], tf.uint64)
        ct = tf.constant(counter, tf.uint64)
        base = {"key": str(key), "counter": [str(c) for c in counter]}
        for dtype in ["float16", "bfloat16", "float32", "float64"]:
            for op, raw in [("uniform", tf.raw_ops.StatelessRandomUniformV2),
                            ("normal", tf.raw_ops.StatelessRandomNormalV2),
                            ("truncated_normal", tf.raw_ops.StatelessTruncatedNormalV2)]:
                t = raw(shape=[5], key=kt, counter=ct, alg=1, dtype=DT[dtype])
                out.append({**base, "op": op, "dtype": dtype, "shape": [5], **encode(t)})
        # The CPU kernel has int32 and int64 only (uint32/uint64: see errors).
        for dtype, lo, hi in [("int32", -4, 9), ("int64", -(2**40), 2**41), ("int32", -(2**31), 2**31 - 1)]:
            t = tf.raw_ops.StatelessRandomUniformIntV2(
                shape=[6], key=kt, counter=ct, alg=1,
                minval=tf.constant(lo, DT[dtype]), maxval=tf.constant(hi, DT[dtype]))
            out.append({**base, "op": "uniform_int", "dtype": dtype, "shape": [6],
                        "params": [str(lo), str(hi)], "values": [str(int(x)) for x in t.numpy().reshape(-1)]})
        for dtype in ["int32", "int64", "uint32", "uint64"]:
            t = tf.raw_ops.StatelessRandomUniformFullIntV2(shape=[4], key=kt, counter=ct, alg=1, dtype=DT[dtype])
            out.append({**base, "op": "uniform_full_int", "dtype": dtype, "shape": [4],
                        "values": [str(int(x)) for x in t.numpy().reshape(-1)]})
    # Refusals of the raw kernels: ThreeFry on CPU, a short counter, an empty range.
    kt, ct = tf.constant([1], tf.uint64), tf.constant([0, 0], tf.uint64)
    errors = {
        "threefry_alg": error_name(lambda: tf.raw_ops.StatelessRandomNormalV2(shape=[2], key=kt, counter=ct, alg=2)),
        "bad_alg_id": error_name(lambda: tf.raw_ops.StatelessRandomNormalV2(shape=[2], key=kt, counter=ct, alg=9)),
        "short_counter": error_name(lambda: tf.raw_ops.StatelessRandomNormalV2(
            shape=[2], key=kt, counter=tf.constant([0], tf.uint64), alg=1)),
        "uint32_int_range": error_name(lambda: tf.raw_ops.StatelessRandomUniformIntV2(
            shape=[2], key=kt, counter=ct, alg=1, minval=tf.constant(0, tf.uint32),
            maxval=tf.constant(5, tf.uint32))),
        "empty_int_range": error_name(lambda: tf.raw_ops.StatelessRandomUniformIntV2(
            shape=[2], key=kt, counter=ct, alg=1, minval=5, maxval=5)),
    }
    return kc, out, errors


def refused_cases():
    """Refused Generator calls: TF's error class, and whether the state moved."""
    cases = [
        ("uniform_int_no_maxval", lambda g: g.uniform([3], dtype=tf.int32)),
        ("uniform_int_empty_range", lambda g: g.uniform([3], minval=5, maxval=5, dtype=tf.int32)),
        ("uniform_int_reversed_range", lambda g: g.uniform([3], minval=5, maxval=2, dtype=tf.int64)),
        ("uniform_negative_shape", lambda g: g.uniform([-1])),
        ("normal_negative_shape", lambda g: g.normal([2, -3])),
        ("normal_int_dtype", lambda g: g.normal([2], dtype=tf.int32)),
        ("truncated_normal_int_dtype", lambda g: g.truncated_normal([2], dtype=tf.int64)),
        ("uniform_full_int_float_dtype", lambda g: g.uniform_full_int([2], dtype=tf.float32)),
        ("split_negative", lambda g: g.split(-1)),
        ("uniform_int_uint32", lambda g: g.uniform([2], minval=0, maxval=5, dtype=tf.uint32)),
    ]
    out = []
    for name, fn in cases:
        g = tf.random.Generator.from_seed(3)
        before = state(g)
        err = error_name(lambda: fn(g))
        out.append({"case": name, "error": err, "before": before, "after": state(g)})
    return out


def main():
    split0, skips = split_and_skip()
    kc, v2, v2_errors = v2_cases()
    body = {
        "tf_version": TF_VERSION,
        "generator": generator_cases(),
        "split0": split0,
        "skip": skips,
        "fold_in": fold_in_cases(),
        "alg": alg_cases(),
        "key_counter": kc,
        "v2": v2,
        "v2_errors": v2_errors,
        "refused": refused_cases(),
        "param_rounding": param_rounding_cases(),
    }
    with open(OUT, "w") as f:
        json.dump(body, f, separators=(",", ":"))
    print(OUT, os.path.getsize(OUT), "bytes")


if __name__ == "__main__":
    main()
