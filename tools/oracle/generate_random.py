"""Conformance fixtures for `flaxen::random`, `flaxen::init` and the make_rng hash.

Pinned: jax==0.10.2, jaxlib==0.10.2, flax==0.12.8 (CPU). Set up and run from
the repository root:

    python3 -m venv .venv-oracle
    .venv-oracle/bin/pip install jax==0.10.2 jaxlib==0.10.2 flax==0.12.8
    .venv-oracle/bin/python tools/oracle/generate_random.py

Writes tests/fixtures/random.json, tests/fixtures/init.json and
tests/fixtures/rng_hash.json. Floats are stored as their u32 bit patterns so
the tests can compare them exactly (or count ulps).
"""

import json
import os
import sys

import numpy as np

import jax
import jax.numpy as jnp
from jax import random

EXPECTED = {"jax": "0.10.2", "jaxlib": "0.10.2", "flax": "0.12.8"}

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures")

SEEDS = [0, 1, 42, 2**31 - 1, 2**32 + 5, 2**63 - 1, -1, -(2**40) - 7, 123456789]
SHAPES = [[], [1], [7], [2, 3], [3, 5, 1, 4], [1000], [33, 17]]
MODES = {"partitionable": True, "non_partitionable": False}


def check_versions():
    import flax
    import jaxlib

    found = {"jax": jax.__version__, "jaxlib": jaxlib.__version__, "flax": flax.__version__}
    if found != EXPECTED:
        sys.exit(f"oracle needs {EXPECTED}, found {found}")


def f32_bits(a):
    return np.asarray(a, dtype=np.float32).reshape(-1).view(np.uint32).tolist()


def ints(a):
    return np.asarray(a).reshape(-1).astype(np.int64).tolist()


def key_words(k):
    return np.asarray(random.key_data(k)).astype(np.int64).reshape(-1).tolist()


def random_cases():
    cases = []

    def add(fn, mode, seed, shape, out, dtype, **args):
        cases.append(
            dict(fn=fn, mode=mode, seed=seed, shape=shape, args=args, dtype=dtype, out=out)
        )

    for mode, flag in MODES.items():
        jax.config.update("jax_threefry_partitionable", flag)
        for seed in SEEDS:
            k = random.key(seed)
            add("key", mode, seed, [2], key_words(k), "u32")
            for n in [0, 1, 2, 3, 7]:
                add("split", mode, seed, [n, 2], key_words(random.split(k, n)), "u32", n=n)
            for d in [0, 1, 7, 2**31, 2**32 - 1]:
                add("fold_in", mode, seed, [2], key_words(random.fold_in(k, d)), "u32", data=d)
            for shape in SHAPES:
                s = tuple(shape)
                add("bits", mode, seed, shape, ints(random.bits(k, s, jnp.uint32)), "u32")
                add("uniform", mode, seed, shape, f32_bits(random.uniform(k, s)), "f32")
                add("normal", mode, seed, shape, f32_bits(random.normal(k, s)), "f32")
                add("gumbel", mode, seed, shape, f32_bits(random.gumbel(k, s)), "f32")
                add("exponential", mode, seed, shape, f32_bits(random.exponential(k, s)), "f32")
            for shape in [[5], [2, 3], [1000]]:
                s = tuple(shape)
                for lo, hi in [(-2.0, 3.0), (0.5, 0.75), (-1e3, 1e-3)]:
                    add("uniform_range", mode, seed, shape,
                        f32_bits(random.uniform(k, s, minval=lo, maxval=hi)), "f32",
                        minval=lo, maxval=hi)
                for lo, hi in [(-2.0, 2.0), (-1.0, 3.5), (0.0, 0.1), (-5.0, -4.0)]:
                    add("truncated_normal", mode, seed, shape,
                        f32_bits(random.truncated_normal(k, lo, hi, s)), "f32",
                        lower=lo, upper=hi)
                for p in [0.0, 0.2, 0.5, 0.8, 1.0]:
                    add("bernoulli", mode, seed, shape,
                        ints(random.bernoulli(k, p, s)), "bool", p=p)
                for lo, hi in [(0, 100), (-5, 6), (0, 7), (-(2**31), 2**31 - 1), (3, 4)]:
                    add("randint", mode, seed, shape,
                        ints(random.randint(k, s, lo, hi)), "i32", minval=lo, maxval=hi)
            for n in [1, 2, 5, 100, 1625, 1626, 5000]:
                add("permutation", mode, seed, [n], ints(random.permutation(k, n)), "i32", n=n)
            x = np.arange(12).reshape(3, 4)
            add("permutation_along", mode, seed, [3, 4],
                ints(random.permutation(k, x, axis=1, independent=True)), "i32",
                axis=1, independent=True)
            add("permutation_along", mode, seed, [3, 4],
                ints(random.permutation(k, x, axis=1, independent=False)), "i32",
                axis=1, independent=False)
            p = np.array([0.1, 0.2, 0.05, 0.4, 0.25], np.float32)
            p40 = np.random.RandomState(abs(seed) % 2**32).rand(40).astype(np.float32)
            for n, shape, replace, probs in [
                (10, [3], True, None),
                (10, [3], False, None),
                (10, [10], False, None),
                (5, [2, 3], True, p),
                (5, [4], False, p),
                (40, [25], True, p40),
                (40, [8], False, p40),
            ]:
                out = random.choice(k, n, tuple(shape), replace, probs)
                add("choice", mode, seed, shape, ints(out), "i32", n=n, replace=replace,
                    p=None if probs is None else f32_bits(probs))
            logits = np.random.RandomState((abs(seed) + 1) % 2**32).randn(3, 6).astype(np.float32)
            for axis, shape in [(-1, None), (0, None), (-1, [4, 3]), (1, [2, 3])]:
                out = random.categorical(k, logits, axis=axis,
                                         shape=None if shape is None else tuple(shape))
                add("categorical", mode, seed, list(out.shape), ints(out), "i32",
                    axis=axis, sample_shape=shape, logits=f32_bits(logits), logits_shape=[3, 6])
    jax.config.update("jax_threefry_partitionable", True)
    # Seeds as JAX maps them with 64-bit types enabled.
    x64 = []
    jax.config.update("jax_enable_x64", True)
    for seed in SEEDS:
        x64.append(dict(seed=seed, out=key_words(random.key(seed))))
    jax.config.update("jax_enable_x64", False)
    return dict(cases=cases, key_x64=x64)


def init_cases():
    from jax.nn import initializers as I

    cases = []
    shapes = [[2, 3], [5, 4], [3, 3, 2, 4], [7, 1], [4, 6, 3]]
    makers = {
        "zeros": lambda: I.zeros,
        "ones": lambda: I.ones,
        "constant": lambda: I.constant(0.5),
        "normal": lambda: I.normal(0.02),
        "uniform": lambda: I.uniform(0.3),
        "truncated_normal": lambda: I.truncated_normal(0.7),
        "lecun_normal": lambda: I.lecun_normal(),
        "lecun_uniform": lambda: I.lecun_uniform(),
        "glorot_normal": lambda: I.glorot_normal(),
        "glorot_uniform": lambda: I.glorot_uniform(),
        "he_normal": lambda: I.he_normal(),
        "he_uniform": lambda: I.he_uniform(),
        "orthogonal": lambda: I.orthogonal(),
    }
    for mode in ["fan_in", "fan_out", "fan_avg"]:
        for dist in ["truncated_normal", "normal", "uniform"]:
            makers[f"variance_scaling/{mode}/{dist}"] = (
                lambda mode=mode, dist=dist: I.variance_scaling(1.7, mode, dist)
            )
    for seed in [0, 1, 7]:
        k = random.key(seed)
        for name, make in makers.items():
            for shape in shapes:
                out = make()(k, tuple(shape), jnp.float32)
                cases.append(dict(init=name, seed=seed, shape=shape, out=f32_bits(out)))
    return dict(cases=cases)


def hash_cases():
    """The make_rng hash, cross-checked against Flax's own `_fold_in_static`."""
    import hashlib

    import flax
    from flax.core import scope as flax_scope

    paths = [
        [1], [2], [3], [0], [255], [256], [65536], [2**40],
        ["RNGSubModule_0", 1], ["RNGSubModule_0", "RNGSubSubModule_0", 2],
        ["A", "B", "C", 1], ["AB", "C", 1], ["A", "BC", 1], ["ABC", 1],
        ["ab", "cdef", 1], ["abc", "def", 1], ["", 0], [""], ["\u00fcn\u00ef", 7],
        [1, 0], [0, 0, 0],
    ]
    cases = []
    for sep in [False, True]:
        flax.config.update("flax_fix_rng_separator", sep)
        for p in paths:
            m = hashlib.sha1()
            for x in p:
                if sep:
                    m.update(b"\0")
                if isinstance(x, str):
                    m.update(x.encode("utf-8"))
                else:
                    m.update(x.to_bytes((x.bit_length() + 7) // 8, byteorder="big"))
            ours = int.from_bytes(m.digest()[:4], byteorder="big")
            folded = key_words(flax_scope._fold_in_static(random.key(0), tuple(p)))
            if folded != key_words(random.fold_in(random.key(0), ours)):
                sys.exit(f"hash reimplementation disagrees with Flax for {p}")
            cases.append(dict(path=p, separator=sep, hash=ours, folded_key0=folded))
    flax.config.update("flax_fix_rng_separator", False)
    return dict(cases=cases)


def write(name, data):
    path = os.path.join(OUT, name)
    with open(path, "w") as f:
        json.dump(data, f, separators=(",", ":"))
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    check_versions()
    write("random.json", random_cases())
    write("init.json", init_cases())
    write("rng_hash.json", hash_cases())
