"""Median and best per-iteration time of criterion's samples, for comparing
with tools/bench/jax_train_step.py on a shared machine. Run after
`cargo bench --bench autodiff`, from the repository root:

    python3 tools/bench/criterion_best.py [target/criterion/train_step]
"""

import json
import os
import sys


def fmt(ns):
    return f"{ns / 1e3:.2f} µs" if ns < 1e6 else f"{ns / 1e6:.3f} ms"


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join("target", "criterion", "train_step")
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name, "new", "sample.json")
        if not os.path.exists(path):
            continue
        with open(path) as f:
            sample = json.load(f)
        per_iter = sorted(t / i for t, i in zip(sample["times"], sample["iters"]))
        median = per_iter[len(per_iter) // 2]
        print(f"{os.path.basename(root)}/{name}: median {fmt(median)}, best {fmt(per_iter[0])}")


if __name__ == "__main__":
    main()
