"""Conformance fixtures for the order of `flaxen::tensor` sums: `jnp.sum`
and `jnp.mean` of vectors, over axis 0 and over the last axis of matrices,
with lengths around XLA:CPU's reduction window (32) and beyond.

Pinned: jax==0.10.2, jaxlib==0.10.2 (CPU). From the repository root:

    .venv-oracle/bin/python tools/oracle/generate_reductions.py

Writes tests/fixtures/reductions.json: inputs and results as u32 bit
patterns, eager and jitted (they agree on every case here).
"""

import json
import os

import numpy as np

import jax
import jax.numpy as jnp

EXPECTED = {"jax": "0.10.2", "jaxlib": "0.10.2"}
OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures",
                   "reductions.json")


def bits(x):
    return np.asarray(x, dtype=np.float32).reshape(-1).view(np.uint32).tolist()


def main():
    import jaxlib
    assert jax.__version__ == EXPECTED["jax"], jax.__version__
    assert jaxlib.__version__ == EXPECTED["jaxlib"], jaxlib.__version__
    rs = np.random.RandomState(5)

    def mixed(*shape):
        # Magnitudes from 1e-3 to 1e2: the order of summation shows.
        return (rs.randn(*shape) * 10.0 ** rs.randint(-3, 3, shape)).astype(np.float32)

    cases = []
    shapes = ([((n,), None) for n in [31, 32, 33, 40, 64, 65, 80, 100, 333, 1000, 1025]]
              + [((r, c), 0) for r, c in [(33, 5), (40, 4), (64, 16), (100, 3), (128, 3),
                                           (1000, 4)]]
              + [((r, c), 1) for r, c in [(2, 40), (4, 33), (16, 64), (3, 100)]])
    for shape, axis in shapes:
        x = mixed(*shape)
        for op, f in [("sum", jnp.sum), ("mean", jnp.mean)]:
            fn = (lambda a, f=f, axis=axis: f(a, axis=axis))
            eager = np.asarray(fn(x))
            jitted = np.asarray(jax.jit(fn)(x))
            assert (eager.view(np.uint32) == jitted.view(np.uint32)).all(), (shape, axis, op)
            cases.append(dict(op=op, shape=list(shape), axis=axis, x=bits(x), y=bits(eager)))
    path = os.path.abspath(OUT)
    with open(path, "w") as f:
        json.dump(dict(jax=jax.__version__, cases=cases), f, separators=(",", ":"))
    print(f"wrote {path} ({os.path.getsize(path)} bytes, {len(cases)} cases)")


if __name__ == "__main__":
    main()
