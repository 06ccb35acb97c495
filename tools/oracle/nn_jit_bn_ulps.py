"""How far flaxen's `Jit` with BatchNorm inside is from Flax's jitted
numbers, in ulps, on the `net_bn` case of tests/fixtures/nn_jit.json
(written by generate_nn_jit.py: two jitted Dense -> relu -> Dropout ->
BatchNorm blocks, the same model, keys and inputs run as Flax runs
`nn.jit` — compiled by XLA, which fuses and rewrites BatchNorm — and with
`jax.jit` replaced by the identity, op by op as eager JAX runs it).

flaxen's numbers come from the ignored test `print_net_with_batch_norm_numbers`
of tests/nn_jit.rs (run by this script with cargo); eager JAX's distance
is printed alongside, for what emulating XLA's fusion changes. No JAX
needed. From the repository root:

    python3 tools/oracle/nn_jit_bn_ulps.py

Writes book/src/generated/nn_jit_bn_ulps.md.
"""

import json
import os
import struct
import subprocess

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "nn_jit.json")
OUT = os.path.join(ROOT, "book", "src", "generated", "nn_jit_bn_ulps.md")


def ordered(bits):
    """The f32 with these bits on a line where adjacent floats differ by 1."""
    return bits if bits < 0x80000000 else 0x80000000 - bits


def ulps(a, b):
    return [abs(ordered(x) - ordered(y)) for x, y in zip(a, b)]


def value(bits):
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def flaxen_numbers():
    out = subprocess.run(
        ["cargo", "test", "--release", "--test", "nn_jit", "--",
         "--ignored", "--nocapture", "--exact", "print_net_with_batch_norm_numbers"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout
    line = next(ln for ln in out.splitlines() if ln.startswith("NET_BN "))
    return json.loads(line[len("NET_BN "):])


def rows(flaxen, jitted, eager):
    """(name, Flax's jitted bits, flaxen's, eager JAX's) for every value."""
    for t, (j, f, e) in enumerate(zip(jitted["calls"], flaxen["calls"], eager["calls"])):
        yield f"call {t}: output", j["y"], f["y"], e["y"]
        for path, leaf in j["batch_stats"].items():
            yield (f"call {t}: batch_stats/{path}", leaf["bits"],
                   f["batch_stats"][path]["bits"], e["batch_stats"][path]["bits"])
    for path, leaf in jitted["grads"].items():
        yield (f"gradient {path}", leaf["bits"], flaxen["grads"][path]["bits"],
               eager["grads"][path]["bits"])


def main():
    with open(FIXTURE) as f:
        case = next(c for c in json.load(f)["cases"] if c["name"] == "net_bn")
    flaxen = flaxen_numbers()
    lines = [
        "<!-- Written by `python3 tools/oracle/nn_jit_bn_ulps.py` from tests/fixtures/nn_jit.json"
        " and flaxen's numbers; do not edit. -->",
        "",
        "| values | elements | flaxen: differing | flaxen: max ulps | flaxen: max abs. difference"
        " | eager JAX: max ulps | max abs. value |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, want, got, eager in rows(flaxen, case["jitted"], case["eager"]):
        d = ulps(got, want)
        diff = max(abs(value(x) - value(y)) for x, y in zip(got, want))
        size = max(abs(value(x)) for x in want)
        lines.append(
            f"| {name} | {len(d)} | {sum(1 for x in d if x)} | {max(d)} | {diff:.2e}"
            f" | {max(ulps(eager, want))} | {size:.2e} |"
        )
    with open(OUT, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
