"""The digits recipe in Flax + optax: the reference run that
examples/train_digits.rs reproduces bit for bit.

Pinned: jax==0.10.2, jaxlib==0.10.2, flax==0.12.8, optax==0.2.8 (CPU). From
the repository root:

    .venv-oracle/bin/python tools/oracle/train_digits.py

Reads data/digits/digits.csv.gz (scikit-learn's copy of the UCI digits, in
scikit-learn's order: 64 pixel columns 0..16, then the label). Prints one
line per epoch (the lines examples/expected/train_digits.txt holds) and
writes tests/fixtures/train_digits.json: the per-epoch lines, every step's
loss, the parameters at init, after step 1 and at the end, and the test
predictions.

Recipe: pixels / 16 as float32; the first 1,500 images train, the last 297
test. Dense(128) -> relu -> Dropout(0.2) -> Dense(128) -> relu ->
Dropout(0.2) -> Dense(10). params_key, dropout_key, shuffle_key =
split(key(0), 3); params = init(params_key, x[:1], train=False).
adamw(warmup_cosine_decay_schedule(0.0, 3e-3, 50, 450, 1e-5),
weight_decay=1e-4); batch 100, 30 epochs (450 steps). Epoch e shuffles with
permutation(fold_in(shuffle_key, e), 1500); step t uses dropout key
fold_in(dropout_key, t); loss: mean softmax cross-entropy with integer
labels; the step is jax.jit'ted. The epoch loss is the float32 mean of the
epoch's 15 batch losses (summed in order, divided by 15, in float32),
printed with 9 significant digits; the test accuracy with 4 decimals.
"""

import gzip
import json
import os

import sys

import numpy as np

import jax
import jax.numpy as jnp
import flax
import flax.linen as nn
import optax

sys.path.insert(0, os.path.dirname(__file__))
from fixture_io import enc, flat  # noqa: E402

EXPECTED = {"jax": "0.10.2", "flax": "0.12.8", "optax": "0.2.8"}
assert jax.__version__ == EXPECTED["jax"], jax.__version__
assert flax.__version__ == EXPECTED["flax"], flax.__version__
assert optax.__version__ == EXPECTED["optax"], optax.__version__

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
OUT = os.path.join(ROOT, "tests", "fixtures", "train_digits.json")

EPOCHS = 30
BATCH = 100
TRAIN = 1500


def load():
    with gzip.open(os.path.join(ROOT, "data", "digits", "digits.csv.gz"), "rt") as f:
        rows = np.loadtxt(f, delimiter=",", dtype=np.int64)
    x = (rows[:, :64].astype(np.float32) / np.float32(16.0)).astype(np.float32)
    y = rows[:, 64].astype(np.int32)
    return x, y


class Mlp(nn.Module):
    @nn.compact
    def __call__(self, x, train):
        x = nn.relu(nn.Dense(128)(x))
        x = nn.Dropout(0.2, deterministic=not train)(x)
        x = nn.relu(nn.Dense(128)(x))
        x = nn.Dropout(0.2, deterministic=not train)(x)
        return nn.Dense(10)(x)


def make_train_step(model, tx):
    """The recipe's jitted step: loss, gradients, AdamW, new parameters."""

    @jax.jit
    def train_step(params, opt_state, xb, yb, key):
        def loss_fn(p):
            logits = model.apply({"params": p}, xb, train=True, rngs={"dropout": key})
            return optax.softmax_cross_entropy_with_integer_labels(logits, yb).mean()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return train_step


def mean_f32(values):
    """The epoch loss: the batch losses summed in order in float32, divided
    by their count in float32 (so that flaxen's sum reproduces it)."""
    total = np.float32(0.0)
    for v in values:
        total = np.float32(total + np.float32(v))
    return np.float32(total / np.float32(len(values)))


def main():
    x, y = load()
    x_train, y_train = x[:TRAIN], y[:TRAIN]
    x_test, y_test = x[TRAIN:], y[TRAIN:]
    steps_per_epoch = TRAIN // BATCH
    total_steps = EPOCHS * steps_per_epoch

    model = Mlp()
    params_key, dropout_key, shuffle_key = jax.random.split(jax.random.key(0), 3)
    params = model.init(params_key, jnp.asarray(x_train[:1]), train=False)["params"]
    schedule = optax.warmup_cosine_decay_schedule(0.0, 3e-3, 50, total_steps, 1e-5)
    tx = optax.adamw(schedule, weight_decay=1e-4)
    opt_state = tx.init(params)

    train_step = make_train_step(model, tx)

    @jax.jit
    def predict(params, xs):
        return jnp.argmax(model.apply({"params": params}, xs, train=False), axis=-1)

    fixture = {
        "versions": EXPECTED,
        "first_image": [int(v) for v in (x[0] * 16).astype(np.int32)],
        "labels_head": [int(v) for v in y[:20]],
        "label_counts": [int((y == c).sum()) for c in range(10)],
        "init_params": flat(params),
        "schedule": [float(schedule(t)) for t in range(total_steps + 1)],
        "losses": [],
        "lines": [],
    }
    t = 0
    for epoch in range(EPOCHS):
        perm = np.asarray(jax.random.permutation(jax.random.fold_in(shuffle_key, epoch), TRAIN))
        if epoch == 0:
            fixture["perm0"] = [int(v) for v in perm]
        losses = []
        for b in range(steps_per_epoch):
            idx = perm[b * BATCH:(b + 1) * BATCH]
            key = jax.random.fold_in(dropout_key, t)
            params, opt_state, loss = train_step(
                params, opt_state, jnp.asarray(x_train[idx]), jnp.asarray(y_train[idx]), key
            )
            losses.append(np.float32(loss))
            fixture["losses"].append(float(np.float32(loss)))
            if t == 0:
                fixture["params_step1"] = flat(params)
            t += 1
        acc = float(np.mean(np.asarray(predict(params, jnp.asarray(x_test))) == y_test))
        line = f"epoch {epoch:02d}  loss {mean_f32(losses):.9g}  test accuracy {acc:.4f}"
        print(line)
        fixture["lines"].append(line)
    fixture["final_params"] = flat(params)
    fixture["test_predictions"] = [int(v) for v in np.asarray(predict(params, jnp.asarray(x_test)))]
    with open(OUT, "w") as f:
        json.dump(fixture, f)
        f.write("\n")


if __name__ == "__main__":
    main()
