#!/usr/bin/env python3
"""Generates flaxen's TensorFlow random-number fixtures (tests/fixtures/tf_*.json).

The oracle is TensorFlow's CPU kernels, pinned to tensorflow-cpu==2.21.0:

    python3 -m venv .venv-tf && .venv-tf/bin/pip install tensorflow-cpu==2.21.0
    .venv-tf/bin/python tools/oracle/tf/gen_fixtures.py

Floats are stored as their IEEE bit patterns (u32 for float32, u64 for
float64) so that nothing is lost in JSON. Large arrays are stored as the
SHA-1 of their little-endian bytes. Integers and states are stored as JSON
integers; Python integer seeds of any size are stored as decimal strings.
"""

import hashlib
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

TF_VERSION = "2.21.0"
if tf.__version__ != TF_VERSION:
    sys.exit(f"need tensorflow-cpu=={TF_VERSION}, found {tf.__version__}")

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "..", "tests", "fixtures")
BIG = 2048  # arrays with more elements than this are stored as SHA-1

DT = {
    "float32": tf.float32,
    "float64": tf.float64,
    "float16": tf.float16,
    "bfloat16": tf.bfloat16,
    "int32": tf.int32,
    "int64": tf.int64,
    "uint32": tf.uint32,
    "uint64": tf.uint64,
}


def encode(t):
    """An output tensor as JSON: bits for floats, integers for ints, SHA-1 if big."""
    a = t.numpy()
    flat = a.reshape(-1)
    if a.dtype == np.float32:
        flat = flat.view(np.uint32)
    elif a.dtype == np.float64:
        flat = flat.view(np.uint64)
    elif a.dtype == np.float16 or a.dtype.name == "bfloat16":
        flat = flat.view(np.uint16)
    if flat.size > BIG:
        return {"sha1": hashlib.sha1(flat.astype(flat.dtype.newbyteorder("<")).tobytes()).hexdigest()}
    return {"values": [int(x) for x in flat]}


def stateless_cases():
    seeds = [
        ([1, 2], "int32"),
        ([1, 2], "int64"),
        ([0, 0], "int32"),
        ([-5, 7], "int32"),
        ([-1, -1], "int64"),
        ([2**31 - 1, -(2**31)], "int32"),
        ([2**63 - 1, -(2**63)], "int64"),
        ([123456789012345, -98765432109876], "int64"),
        ([42, 0], "int64"),
    ]
    shapes = [[], [0], [1], [3], [5], [2, 3], [4, 1, 3], [7, 9]]
    cases = []

    def add(op, dtype, shape, seed, sdt, params, fn):
        t = fn(shape, tf.constant(seed, dtype=DT[sdt]))
        cases.append({"op": op, "dtype": dtype, "shape": shape, "seed": seed,
                      "seed_dtype": sdt, "params": params, **encode(t)})

    for seed, sdt in seeds:
        for shape in shapes:
            for dtype in ["float32", "float64", "float16", "bfloat16"]:
                d = DT[dtype]
                add("uniform", dtype, shape, seed, sdt, [0.0, 1.0],
                    lambda s, sd: tf.random.stateless_uniform(s, sd, dtype=d, alg="philox"))
                add("normal", dtype, shape, seed, sdt, [0.0, 1.0],
                    lambda s, sd: tf.random.stateless_normal(s, sd, dtype=d, alg="philox"))
                add("truncated_normal", dtype, shape, seed, sdt, [0.0, 1.0],
                    lambda s, sd: tf.random.stateless_truncated_normal(s, sd, dtype=d, alg="philox"))
            for dtype in ["int32", "int64", "uint32", "uint64"]:
                d = DT[dtype]
                add("full_int", dtype, shape, seed, sdt, [],
                    lambda s, sd: tf.random.stateless_uniform(s, sd, minval=None, maxval=None, dtype=d, alg="philox"))
        # Parameters, ranges and the default alg on a few shapes.
        for shape in [[5], [2, 3]]:
            for dtype in ["float32", "float64", "float16", "bfloat16"]:
                d = DT[dtype]
                for lo, hi in [(-3.25, 10.5), (2.0, 2.5), (-1e3, 1e-3)]:
                    add("uniform", dtype, shape, seed, sdt, [lo, hi],
                        lambda s, sd: tf.random.stateless_uniform(s, sd, minval=lo, maxval=hi, dtype=d))
                for mean, std in [(1.5, 0.25), (-10.0, 3.0)]:
                    add("normal", dtype, shape, seed, sdt, [mean, std],
                        lambda s, sd: tf.random.stateless_normal(s, sd, mean=mean, stddev=std, dtype=d))
                    add("truncated_normal", dtype, shape, seed, sdt, [mean, std],
                        lambda s, sd: tf.random.stateless_truncated_normal(s, sd, mean=mean, stddev=std, dtype=d))
            for dtype, ranges in [("int32", [(0, 10), (-7, 3), (-(2**31), 2**31 - 1), (5, 6)]),
                                  ("int64", [(0, 10), (-7, 3), (-(2**63), 2**63 - 1), (-(2**40), 2**50)])]:
                d = DT[dtype]
                for lo, hi in ranges:
                    add("uniform_int", dtype, shape, seed, sdt, [lo, hi],
                        lambda s, sd: tf.random.stateless_uniform(s, sd, minval=lo, maxval=hi, dtype=d))
    # Big arrays, stored as SHA-1: many Box-Muller and truncation decisions.
    for seed, sdt in [([1, 2], "int64"), ([-3, 99], "int32")]:
        for dtype in ["float32", "float64"]:
            d = DT[dtype]
            add("normal", dtype, [250, 401], seed, sdt, [0.0, 1.0],
                lambda s, sd: tf.random.stateless_normal(s, sd, dtype=d))
            add("truncated_normal", dtype, [250, 401], seed, sdt, [0.0, 1.0],
                lambda s, sd: tf.random.stateless_truncated_normal(s, sd, dtype=d))
            add("uniform", dtype, [100003], seed, sdt, [0.0, 1.0],
                lambda s, sd: tf.random.stateless_uniform(s, sd, dtype=d))
        add("normal", "float32", [1000000], seed, sdt, [0.0, 1.0],
            lambda s, sd: tf.random.stateless_normal(s, sd, dtype=tf.float32))
        for dtype in ["float16", "bfloat16"]:
            d = DT[dtype]
            add("normal", dtype, [300, 101], seed, sdt, [0.0, 1.0],
                lambda s, sd: tf.random.stateless_normal(s, sd, dtype=d))
            add("truncated_normal", dtype, [300, 101], seed, sdt, [0.0, 1.0],
                lambda s, sd: tf.random.stateless_truncated_normal(s, sd, dtype=d))
            add("uniform", dtype, [300, 101], seed, sdt, [-3.25, 10.5],
                lambda s, sd: tf.random.stateless_uniform(s, sd, minval=-3.25, maxval=10.5, dtype=d))
    return cases


def key_counter_cases():
    out = []
    for seed, sdt in [([1, 2], "int32"), ([-5, 7], "int32"), ([-5, 7], "int64"),
                      ([2**63 - 1, -(2**63)], "int64"), ([0, 0], "int64")]:
        key, counter = tf.raw_ops.StatelessRandomGetKeyCounter(seed=tf.constant(seed, dtype=DT[sdt]))
        out.append({"seed": seed, "seed_dtype": sdt,
                    "key": int(key.numpy().view(np.uint64)[0]),
                    "counter": [int(x) for x in counter.numpy().view(np.uint64)]})
    return out


def split_fold_cases():
    splits, folds = [], []
    for seed, sdt in [([1, 2], "int32"), ([1, 2], "int64"), ([-5, 7], "int32"),
                      ([2**63 - 1, -(2**63)], "int64")]:
        for num in [1, 2, 3, 5]:
            r = tf.random.experimental.stateless_split(tf.constant(seed, dtype=DT[sdt]), num=num)
            splits.append({"seed": seed, "seed_dtype": sdt, "num": num,
                           "values": [[int(v) for v in row] for row in r.numpy()]})
        for data, ddt in [(3, "int32"), (0, "int32"), (-9, "int32"), (2**40 + 3, "int64"), (-1, "int64")]:
            r = tf.random.experimental.stateless_fold_in(
                tf.constant(seed, dtype=DT[sdt]), tf.constant(data, dtype=DT[ddt]))
            folds.append({"seed": seed, "seed_dtype": sdt, "data": data, "data_dtype": ddt,
                          "values": [int(v) for v in r.numpy()]})
    return splits, folds


def state_of(g):
    return [int(x) for x in g.state.numpy()]


def run_sequence(make, steps):
    """Runs `steps` on generator 0 (made by `make`) and on split children."""
    gens = [make()]
    rec = {"initial_state": state_of(gens[0]), "steps": []}
    for step in steps:
        g = gens[step.get("gen", 0)]
        call = step["call"]
        out = dict(step)
        if call in ("normal", "truncated_normal"):
            d = DT[step["dtype"]]
            mean, std = step.get("params", [0.0, 1.0])
            f = g.normal if call == "normal" else g.truncated_normal
            out.update(encode(f(step["shape"], mean=mean, stddev=std, dtype=d)))
        elif call == "uniform":
            d = DT[step["dtype"]]
            lo, hi = step.get("params", [0.0, 1.0])
            out.update(encode(g.uniform(step["shape"], minval=lo, maxval=hi, dtype=d)))
        elif call == "uniform_int":
            d = DT[step["dtype"]]
            lo, hi = step["params"]
            try:
                out.update(encode(g.uniform(step["shape"], minval=lo, maxval=hi, dtype=d)))
            except (tf.errors.InvalidArgumentError, tf.errors.NotFoundError, TypeError, ValueError) as e:
                out["error"] = type(e).__name__
        elif call == "uniform_full_int":
            out.update(encode(g.uniform_full_int(step["shape"], dtype=DT[step["dtype"]])))
        elif call == "split":
            new = g.split(step["count"])
            out["new_states"] = [state_of(n) for n in new]
            gens.extend(new)
        elif call == "make_seeds":
            out["values"] = [[int(v) for v in row] for row in g.make_seeds(step["count"]).numpy()]
        elif call == "skip":
            old = g.skip(step["delta"])
            out["returned"] = [int(x) for x in old.numpy()]
        elif call == "reset_from_seed":
            g.reset_from_seed(parse_seed(step["seed"]))
        elif call == "reset":
            g.reset(tf.constant(step["state"], dtype=tf.int64))
        else:
            raise ValueError(call)
        out["state_after"] = state_of(g)
        rec["steps"].append(out)
    return rec


def parse_seed(s):
    return int(s) if isinstance(s, str) else s


def generator_cases():
    seq_a = [
        {"call": "normal", "shape": [2, 3], "dtype": "float32"},
        {"call": "normal", "shape": [], "dtype": "float32"},
        {"call": "normal", "shape": [], "dtype": "float32"},
        {"call": "reset_from_seed", "seed": "1"},
        {"call": "normal", "shape": [], "dtype": "float32"},
        {"call": "split", "count": 3},
        {"gen": 1, "call": "normal", "shape": [], "dtype": "float32"},
        {"gen": 2, "call": "normal", "shape": [], "dtype": "float32"},
        {"gen": 3, "call": "normal", "shape": [], "dtype": "float32"},
        {"call": "normal", "shape": [], "dtype": "float32"},
        {"gen": 2, "call": "split", "count": 2},
        {"gen": 4, "call": "uniform", "shape": [3, 2], "dtype": "float64"},
        {"gen": 5, "call": "truncated_normal", "shape": [9], "dtype": "float32"},
        {"call": "skip", "delta": 5},
        {"call": "uniform", "shape": [7], "dtype": "float32", "params": [-2.0, 6.0]},
        {"call": "uniform_int", "shape": [6], "dtype": "int32", "params": [-10, 10]},
        {"call": "uniform_int", "shape": [5], "dtype": "int64", "params": [0, 2**40]},
        {"call": "uniform_full_int", "shape": [5], "dtype": "int64"},
        {"call": "uniform_full_int", "shape": [6], "dtype": "uint32"},
        {"call": "uniform_full_int", "shape": [3], "dtype": "uint64"},
        {"call": "make_seeds", "count": 4},
        {"call": "normal", "shape": [3, 3], "dtype": "float64", "params": [2.0, 0.5]},
        {"call": "truncated_normal", "shape": [2, 5], "dtype": "float64"},
        {"call": "truncated_normal", "shape": [11], "dtype": "float32", "params": [-1.0, 4.0]},
        {"call": "uniform_int", "shape": [3], "dtype": "int32", "params": [5, 5]},
        {"call": "normal", "shape": [0], "dtype": "float32"},
        {"call": "skip", "delta": 0},
        {"call": "reset", "state": [2**63 - 3, -1, 77]},
        {"call": "normal", "shape": [6], "dtype": "float32"},
        {"call": "split", "count": 1},
        {"call": "uniform_full_int", "shape": [4], "dtype": "int32"},
    ]
    seeds = ["1", "0", "-1", "2", str(2**64 - 1), str(2**70 + 5), str(-(2**100) - 12345),
             str(2**200 + 2**130 + 7), [7], [1, 2, 3, 4], [-3, 5], [2**63 - 1, -(2**63), 0]]
    out = []
    for seed in seeds:
        rec = run_sequence(lambda: tf.random.Generator.from_seed(parse_seed(seed), alg="philox"), seq_a)
        rec["from"] = {"seed": seed}
        out.append(rec)
    short = [
        {"call": "normal", "shape": [4], "dtype": "float32"},
        {"call": "split", "count": 2},
        {"gen": 1, "call": "uniform_full_int", "shape": [3], "dtype": "int64"},
        {"call": "skip", "delta": 2**40},
        {"call": "normal", "shape": [2], "dtype": "float64"},
    ]
    for state in [[0, 0, 0], [-256, -1, 5], [-1, -1, -1], [12345, 678, -9]]:
        rec = run_sequence(lambda: tf.random.Generator.from_state(state, alg="philox"), short)
        rec["from"] = {"state": state}
        out.append(rec)
    for key, counter in [(5, [1, 2]), (-7, [-1, 0])]:
        rec = run_sequence(lambda: tf.random.Generator.from_key_counter(key, counter, alg="philox"), short)
        rec["from"] = {"key": key, "counter": counter}
        out.append(rec)
    rec = run_sequence(lambda: tf.random.Generator.from_seed(3, alg="auto_select"), short)
    rec["from"] = {"seed": "3", "alg": "auto_select"}
    out.append(rec)
    half = [
        {"call": "normal", "shape": [2, 3], "dtype": "float16"},
        {"call": "normal", "shape": [5], "dtype": "bfloat16", "params": [1.5, 0.25]},
        {"call": "uniform", "shape": [7], "dtype": "float16", "params": [-2.0, 6.0]},
        {"call": "uniform", "shape": [3], "dtype": "bfloat16"},
        {"call": "truncated_normal", "shape": [9], "dtype": "float16", "params": [-1.0, 4.0]},
        {"call": "truncated_normal", "shape": [6], "dtype": "bfloat16"},
    ]
    for seed in ["1", "-7"]:
        rec = run_sequence(lambda: tf.random.Generator.from_seed(int(seed), alg="philox"), half)
        rec["from"] = {"seed": seed}
        out.append(rec)
    return out


def main():
    os.makedirs(OUT, exist_ok=True)
    splits, folds = split_fold_cases()
    files = {
        "tf_stateless.json": {"cases": stateless_cases()},
        "tf_seeds.json": {"key_counter": key_counter_cases(), "split": splits, "fold_in": folds},
        "tf_generator.json": {"sequences": generator_cases()},
    }
    for name, body in files.items():
        body = {"tf_version": TF_VERSION, "generated_by": "tools/oracle/tf/gen_fixtures.py", **body}
        with open(os.path.join(OUT, name), "w") as f:
            json.dump(body, f, separators=(",", ":"))
            f.write("\n")
        print(name, os.path.getsize(os.path.join(OUT, name)), "bytes")


if __name__ == "__main__":
    main()
