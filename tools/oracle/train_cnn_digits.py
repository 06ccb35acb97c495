"""examples/cnn_digits.rs's training in Flax + optax: the reference run
whose per-epoch lines the example prints (examples/expected/cnn_digits.txt
holds the example's whole output; CI compares it). The network is
generate_cnn_step.py's CNN; params_key, shuffle_key = split(key(0));
adam(1e-2); batch 100 of the first 1,500 digits, 5 epochs, epoch e
shuffled by permutation(fold_in(shuffle_key, e), 1500); eager
jax.value_and_grad (as the example); the epoch loss is the float32 sum of
the batch losses divided by 15 in float32; test accuracy on the last 297.

Pinned: jax==0.10.2, jaxlib==0.10.2, flax==0.12.8, optax==0.2.8 (CPU).
From the repository root:

    .venv-oracle/bin/python tools/oracle/train_cnn_digits.py
"""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import numpy as np  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402

from generate_cnn_step import CNN  # noqa: E402
from train_digits import load  # noqa: E402

x, y = load()
TRAIN, BATCH, EPOCHS = 1500, 100, 5
xtr, ytr, xte, yte = x[:TRAIN], y[:TRAIN], x[TRAIN:], y[TRAIN:]
img = lambda a: jnp.asarray(a.reshape(-1, 8, 8, 1))
model = CNN()
pk, sk = jax.random.split(jax.random.key(0))
params = model.init(pk, img(xtr[:1]))["params"]
tx = optax.adam(1e-2)
st = tx.init(params)
for e in range(EPOCHS):
    perm = np.asarray(jax.random.permutation(jax.random.fold_in(sk, e), TRAIN))
    total = np.float32(0)
    for b in range(TRAIN // BATCH):
        idx = perm[b*BATCH:(b+1)*BATCH]
        xb, yb = img(xtr[idx]), jnp.asarray(ytr[idx])
        def loss_fn(p):
            return optax.softmax_cross_entropy_with_integer_labels(model.apply({"params": p}, xb), yb).mean()
        loss, g = jax.value_and_grad(loss_fn)(params)
        upd, st = tx.update(g, st, params)
        params = optax.apply_updates(params, upd)
        total = np.float32(total + np.float32(loss))
    pred = np.asarray(jnp.argmax(model.apply({"params": params}, img(xte)), -1))
    acc = float(np.mean(pred == yte))
    print(f"epoch {e+1}: train loss {float(np.float32(total / np.float32(TRAIN // BATCH))):.4f}, test accuracy {acc:.4f}", flush=True)
