"""Checkpoints written by Flax, for flaxen's serialization tests and the
examples/load_flax_checkpoint.rs example.

Pinned: jax==0.10.2, jaxlib==0.10.2, flax==0.12.8, optax==0.2.8,
safetensors==0.8.0 (CPU). From the repository root:

    .venv-oracle/bin/python tools/oracle/generate_checkpoints.py

Writes into tests/fixtures/checkpoints/:

* bn_variables.msgpack / .safetensors: `flax.serialization.to_bytes` and
  `safetensors.numpy.save(flatten_dict(..., sep='.'))` of the variables of
  Dense(8) -> BatchNorm -> relu -> Dense(3) initialized with key(0) on
  x = normal(key(1), (6, 4)), batch_stats after one training-mode apply;
* bn_train_state.msgpack: a Flax TrainState (with batch_stats) of the same
  model after 3 jitted adamw(1e-2, weight_decay=1e-4) steps on x and labels
  [0, 1, 2, 0, 1, 2];
* misc.msgpack: `msgpack_serialize` of a state dict holding every dtype,
  NumPy scalars, Python values, a complex, None, tuples, empty dicts and a
  0-size array; chunked.msgpack: the same function with MAX_CHUNK_SIZE set
  to 64 bytes over arrays of 400 and 320 bytes;
* checkpoints.json: what the tests compare against (the eval logits of the
  restored train state as f32 bits, misc.msgpack's values described).

And into data/checkpoints/: digits_mlp.msgpack, the params of
Dense(32) -> relu -> Dense(10) trained 5 epochs on the first 1,500 shipped
digits (adam(1e-2), batch 100, in order, jitted), with
examples/expected/load_flax_checkpoint.txt: what Flax prints for it.
"""

import gzip
import json
import os
import re
import sys

import numpy as np

import jax
import jax.numpy as jnp
import flax
import flax.linen as nn
import optax
import safetensors
import safetensors.numpy
from flax import serialization, traverse_util
from flax.training import train_state

EXPECTED = {"jax": "0.10.2", "flax": "0.12.8", "optax": "0.2.8", "safetensors": "0.8.0"}
assert jax.__version__ == EXPECTED["jax"], jax.__version__
assert flax.__version__ == EXPECTED["flax"], flax.__version__
assert optax.__version__ == EXPECTED["optax"], optax.__version__
assert safetensors.__version__ == EXPECTED["safetensors"], safetensors.__version__

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
FIX = os.path.join(ROOT, "tests", "fixtures", "checkpoints")
DATA = os.path.join(ROOT, "data", "checkpoints")


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


class Net(nn.Module):
    @nn.compact
    def __call__(self, x, train):
        x = nn.Dense(8)(x)
        x = nn.relu(nn.BatchNorm(use_running_average=not train)(x))
        return nn.Dense(3)(x)


class State(train_state.TrainState):
    batch_stats: dict


def bits(a):
    return [int(v) for v in np.asarray(a, np.float32).reshape(-1).view(np.uint32)]


def bn_cases(out):
    model = Net()
    x = jax.random.normal(jax.random.key(1), (6, 4))
    y = jnp.array([0, 1, 2, 0, 1, 2], jnp.int32)
    variables = model.init(jax.random.key(0), x, train=False)
    _, updated = model.apply(variables, x, train=True, mutable=["batch_stats"])
    v = {"params": variables["params"], "batch_stats": updated["batch_stats"]}
    write(os.path.join(FIX, "bn_variables.msgpack"), serialization.to_bytes(v))
    flat = {k: np.asarray(a) for k, a in traverse_util.flatten_dict(v, sep=".").items()}
    write(os.path.join(FIX, "bn_variables.safetensors"), safetensors.numpy.save(flat))

    state = State.create(apply_fn=model.apply, params=variables["params"],
                         tx=optax.adamw(1e-2, weight_decay=1e-4),
                         batch_stats=variables["batch_stats"])

    @jax.jit
    def step(state):
        def loss_fn(p):
            logits, upd = model.apply({"params": p, "batch_stats": state.batch_stats}, x,
                                      train=True, mutable=["batch_stats"])
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(), upd

        (loss, upd), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
        return state.apply_gradients(grads=grads).replace(batch_stats=upd["batch_stats"])

    for _ in range(3):
        state = step(state)
    write(os.path.join(FIX, "bn_train_state.msgpack"), serialization.to_bytes(state))
    # Eager: under jax.jit XLA fuses the BatchNorm affine into the bias
    # addition with other roundings (2 ulp apart here), which flaxen's
    # compiled mode does not reproduce yet.
    logits = model.apply({"params": state.params, "batch_stats": state.batch_stats}, x, train=False)
    out["bn_eval_logits"] = {"shape": list(logits.shape), "bits": bits(logits)}
    out["bn_x"] = {"shape": list(x.shape), "bits": bits(x)}


def misc_cases(out):
    tree = {
        "f32": np.arange(6, dtype=np.float32).reshape(2, 3) / 7,
        "f64": np.array([1 / 3, -2.5]),
        "f16": np.array([0.1, 65504, -0.0], np.float16),
        "bf16": jnp.array([1.5, -3.25], jnp.bfloat16),
        "i8": np.array([-128, 127], np.int8),
        "i16": np.array([-300], np.int16),
        "i32": np.array([[1, -2], [3, -4]], np.int32),
        "i64": np.array([2**40, -(2**40)], np.int64),
        "u8": np.array([255, 0], np.uint8),
        "u16": np.array([65535], np.uint16),
        "u32": np.array([4294967295], np.uint32),
        "u64": np.array([2**64 - 1], np.uint64),
        "bool": np.array([True, False, True]),
        "empty": np.zeros((0, 3), np.float32),
        "zero_d": np.array(2.5, np.float32),
        "scalar": np.float32(1.5),
        "scalar_i64": np.int64(-7),
        "int": 5,
        "neg": -3,
        "neg_big": -(2**40),
        "big": 2**63 + 5,
        "float": 2.5,
        "true": True,
        "none": None,
        "text": "flaxen",
        "long_text": "x" * 40,
        "bytes": b"\x00\x01",
        "complex": 1.5 - 2j,
        "list": [1, 2.0, "three"],
        "nested": {"a": {}, "b": {"c": np.array([7], np.int32)}},
    }
    data = serialization.msgpack_serialize(tree)
    write(os.path.join(FIX, "misc.msgpack"), data)
    back = serialization.msgpack_restore(data)
    desc = {}
    for k, v in back.items():
        if isinstance(v, np.ndarray):
            desc[k] = {"array": str(v.dtype), "shape": list(v.shape), "hex": v.tobytes().hex()}
        elif isinstance(v, np.generic):
            desc[k] = {"scalar": str(v.dtype), "hex": np.asarray(v).tobytes().hex()}
        elif isinstance(v, complex):
            desc[k] = {"complex": [v.real, v.imag]}
        elif isinstance(v, bool):
            desc[k] = {"bool": v}
        elif isinstance(v, int):
            desc[k] = {"int": str(v)}
        elif isinstance(v, float):
            desc[k] = {"float": v.hex()}
        elif v is None:
            desc[k] = {"none": True}
        elif isinstance(v, str):
            desc[k] = {"str": v}
        elif isinstance(v, bytes):
            desc[k] = {"bytes": v.hex()}
        elif isinstance(v, (list, tuple)):
            desc[k] = {"list": len(v)}
        elif isinstance(v, dict):
            desc[k] = {"dict": sorted(v.keys())}
        else:
            raise TypeError(k)
    out["misc"] = desc

    old = serialization.MAX_CHUNK_SIZE
    serialization.MAX_CHUNK_SIZE = 64
    try:
        chunked = {
            "params": {"w": np.arange(100, dtype=np.float32).reshape(10, 10) / 3,
                       "b": np.arange(3, dtype=np.float32)},
            "table": np.arange(40, dtype=np.int64) * 3,
        }
        data = serialization.msgpack_serialize(chunked)
    finally:
        serialization.MAX_CHUNK_SIZE = old
    write(os.path.join(FIX, "chunked.msgpack"), data)
    back = serialization.msgpack_restore(data)
    assert back["params"]["w"].shape == (10, 10)
    out["chunked"] = {"w_hex": back["params"]["w"].tobytes().hex(),
                      "table_hex": back["table"].tobytes().hex()}


class Digits(nn.Module):
    @nn.compact
    def __call__(self, x):
        # One layer per line: in `nn.Dense(10)(nn.relu(nn.Dense(32)(x)))`
        # Python constructs Dense(10) first, which would name it Dense_0.
        x = nn.relu(nn.Dense(32)(x))
        return nn.Dense(10)(x)


def digits_checkpoint():
    with gzip.open(os.path.join(ROOT, "data", "digits", "digits.csv.gz"), "rt") as f:
        rows = np.loadtxt(f, delimiter=",", dtype=np.int64)
    x = (rows[:, :64].astype(np.float32) / np.float32(16.0)).astype(np.float32)
    y = rows[:, 64].astype(np.int32)
    x_train, y_train, x_test, y_test = x[:1500], y[:1500], x[1500:], y[1500:]
    model = Digits()
    params = model.init(jax.random.key(0), x_train[:1])["params"]
    tx = optax.adam(1e-2)
    opt_state = tx.init(params)

    @jax.jit
    def step(params, opt_state, xb, yb):
        def loss_fn(p):
            return optax.softmax_cross_entropy_with_integer_labels(model.apply({"params": p}, xb), yb).mean()

        grads = jax.grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    for _ in range(5):
        for b in range(15):
            params, opt_state = step(params, opt_state, x_train[b * 100:(b + 1) * 100],
                                     y_train[b * 100:(b + 1) * 100])
    write(os.path.join(DATA, "digits_mlp.msgpack"), serialization.to_bytes({"params": params}))
    logits = jax.jit(lambda p, xs: model.apply({"params": p}, xs))(params, x_test)
    pred = np.asarray(jnp.argmax(logits, axis=-1))
    acc = float((pred == y_test).mean())
    table = nn.tabulate(Digits(), jax.random.key(0), console_kwargs={"width": 200})(x_train[:1])
    table = [line.rstrip() for line in re.sub(r"\x1b\[[0-9;]*m", "", table).strip("\n").split("\n")]
    lines = table + [
        "loaded data/checkpoints/digits_mlp.msgpack: Dense_0/kernel (64, 32), Dense_1/kernel (32, 10)",
        f"test accuracy: {acc:.4f} on {len(y_test)} images",
        "first 10 predictions: " + " ".join(str(int(p)) for p in pred[:10]),
        "first 10 labels:      " + " ".join(str(int(t)) for t in y_test[:10]),
        f"logits[0]: [{', '.join(str(np.float32(v)) for v in np.asarray(logits[0], np.float32))}]",
    ]
    with open(os.path.join(ROOT, "examples", "expected", "load_flax_checkpoint.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    eager = model.apply({"params": params}, x_test)
    return {"shape": list(logits.shape), "bits": bits(logits), "eager_bits": bits(eager)}


def main():
    os.makedirs(FIX, exist_ok=True)
    os.makedirs(DATA, exist_ok=True)
    out = {"versions": EXPECTED}
    bn_cases(out)
    misc_cases(out)
    out["digits_test_logits"] = digits_checkpoint()
    with open(os.path.join(FIX, "checkpoints.json"), "w") as f:
        json.dump(out, f)
    print("wrote", FIX, DATA)


if __name__ == "__main__":
    main()
