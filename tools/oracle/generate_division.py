"""Conformance fixture for the backward rules of division: JAX divides the
cotangent by a differentiated divisor, `div(g, y)` and
`neg(mul(mul(g, integer_pow(y, -2)), x))`, but multiplies it by the
reciprocal of a Python scalar divisor, which its program holds as a literal.

Pinned: jax==0.10.2, jaxlib==0.10.2 (CPU). From the repository root:

    .venv-oracle/bin/python tools/oracle/generate_division.py

Writes tests/fixtures/division.json (u32 bit patterns).
"""

import json
import os

import numpy as np

import jax

EXPECTED = {"jax": "0.10.2", "jaxlib": "0.10.2"}
OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "division.json")


def bits(x):
    return np.asarray(x, dtype=np.float32).reshape(-1).view(np.uint32).tolist()


def main():
    import jaxlib
    assert jax.__version__ == EXPECTED["jax"], jax.__version__
    assert jaxlib.__version__ == EXPECTED["jaxlib"], jaxlib.__version__
    rs = np.random.RandomState(3)
    n = 1000
    x = (rs.randn(n) * 10.0 ** rs.randint(-3, 3, n)).astype(np.float32)
    y = (rs.randn(n) * 10.0 ** rs.randint(-3, 3, n)).astype(np.float32)
    g = rs.randn(n).astype(np.float32)
    c = 0.8
    out, pull = jax.vjp(lambda x, y: x / y, x, y)
    gx, gy = pull(g)
    cout, cpull = jax.vjp(lambda x: x / c, x)
    (cgx,) = cpull(g)
    data = dict(jax=jax.__version__, x=bits(x), y=bits(y), g=bits(g), out=bits(out),
                gx=bits(gx), gy=bits(gy), c=c, c_out=bits(cout), c_gx=bits(cgx))
    path = os.path.abspath(OUT)
    with open(path, "w") as f:
        json.dump(data, f, separators=(",", ":"))
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main()
