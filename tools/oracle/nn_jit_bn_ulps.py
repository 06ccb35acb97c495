"""How far Flax's jitted BatchNorm is from eager JAX, in ulps, read from
the `net_bn` case of tests/fixtures/nn_jit.json (written by
generate_nn_jit.py: the same model, keys and inputs run as Flax runs
`nn.jit` — compiled by XLA, which fuses and rewrites BatchNorm — and with
`jax.jit` replaced by the identity, op by op as eager JAX runs it).

flaxen's compiled forward is eager JAX's, bit for bit; this prints what
that choice leaves between flaxen and Flax's compiled numbers. No JAX
needed:

    python3 tools/oracle/nn_jit_bn_ulps.py
"""

import json
import os
import struct

FIXTURE = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "nn_jit.json")


def ordered(bits):
    """The f32 with these bits on a line where adjacent floats differ by 1."""
    return bits if bits < 0x80000000 else 0x80000000 - bits


def ulps(a, b):
    return [abs(ordered(x) - ordered(y)) for x, y in zip(a, b)]


def gap(a, b):
    """The largest absolute difference, and the largest magnitude."""
    diff = max(abs(value(x) - value(y)) for x, y in zip(a, b))
    return diff, max(abs(value(x)) for x in a)


def value(bits):
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def main():
    with open(FIXTURE) as f:
        case = next(c for c in json.load(f)["cases"] if c["name"] == "net_bn")
    jitted, eager = case["jitted"], case["eager"]
    rows = []
    for t, (j, e) in enumerate(zip(jitted["calls"], eager["calls"])):
        rows.append((f"call {t}: output", j["y"], e["y"]))
        for path, leaf in j["batch_stats"].items():
            rows.append((f"call {t}: batch_stats/{path}", leaf["bits"], e["batch_stats"][path]["bits"]))
    for path, leaf in jitted["grads"].items():
        rows.append((f"gradient {path}", leaf["bits"], eager["grads"][path]["bits"]))
    print("| values | elements | differing | max ulps | max abs. difference | max abs. value |")
    print("|---|---|---|---|---|---|")
    for name, a, b in rows:
        d = ulps(a, b)
        diff, size = gap(a, b)
        print(f"| {name} | {len(d)} | {sum(1 for x in d if x)} | {max(d)} | {diff:.2e} | {size:.2e} |")


if __name__ == "__main__":
    main()
