"""Median and best per-iteration time of criterion's samples, for comparing
with the JAX scripts under tools/bench/ (which print the same two figures)
on a shared machine. Run after `cargo bench --bench autodiff`, from the
repository root:

    python3 tools/bench/criterion_best.py [target/criterion/train_step]

The table scripts use `criterion_run` instead: it runs one bench with its
own criterion directory and returns the same figures.
"""

import json
import os
import sys
import tempfile


def fmt(ns):
    return f"{ns / 1e3:.2f} µs" if ns < 1e6 else f"{ns / 1e6:.3f} ms"


def samples(root):
    """{benchmark id: (median, best)} per-iteration times in seconds, for
    every `new/sample.json` under `root`; the id is criterion's own
    (`group/function` or `group/function/parameter`), since directory names
    are made file-safe (`sample_2^24` is stored as `sample_2_24`)."""
    out = {}
    for dirpath, _, files in os.walk(root):
        if os.path.basename(dirpath) != "new" or "sample.json" not in files:
            continue
        with open(os.path.join(dirpath, "sample.json")) as f:
            sample = json.load(f)
        per_iter = sorted(t / i for t, i in zip(sample["times"], sample["iters"]))
        name = os.path.relpath(os.path.dirname(dirpath), root).replace(os.sep, "/")
        if "benchmark.json" in files:
            with open(os.path.join(dirpath, "benchmark.json")) as f:
                name = json.load(f)["full_id"]
        out[name] = (per_iter[len(per_iter) // 2] * 1e-9, per_iter[0] * 1e-9)
    return out


def criterion_run(bench, args=(), env=None, prefix=()):
    """Runs `cargo bench --bench <bench> -- <args>` (under the command
    `prefix`, e.g. taskset) with a fresh criterion directory, so that no
    earlier run's samples are read, and returns `samples` of it."""
    from train_step_table import run  # the table scripts' runner

    with tempfile.TemporaryDirectory() as home:
        env = dict(env if env is not None else os.environ, CRITERION_HOME=home)
        run(list(prefix) + ["cargo", "bench", "--bench", bench, "--", *args], env)
        return samples(home)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join("target", "criterion", "train_step")
    for name, (median, best) in sorted(samples(root).items()):
        print(f"{name}: median {fmt(median * 1e9)}, best {fmt(best * 1e9)}")


if __name__ == "__main__":
    main()
