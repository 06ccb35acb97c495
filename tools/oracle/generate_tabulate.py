"""`nn.tabulate`'s table for flaxen's tests/tabulate.rs, ANSI styling
stripped: Dense(8) -> BatchNorm -> relu -> Dense(3) on a (6, 4) input.

Pinned: jax==0.10.2, jaxlib==0.10.2, flax==0.12.8 (CPU). From the
repository root:

    .venv-oracle/bin/python tools/oracle/generate_tabulate.py
"""

import os
import re
import sys

# Flax orders the collection columns as a Python set of their names, so
# the order depends on the string hash seed; seed 0 gives init's order
# (params, batch_stats), which flaxen uses.
if os.environ.get("PYTHONHASHSEED") != "0":
    os.execve(sys.executable, [sys.executable] + sys.argv, {**os.environ, "PYTHONHASHSEED": "0"})

import jax  # noqa: E402
import flax  # noqa: E402
import flax.linen as nn  # noqa: E402

assert jax.__version__ == "0.10.2", jax.__version__
assert flax.__version__ == "0.12.8", flax.__version__

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "tabulate_net.txt")


class Net(nn.Module):
    train: bool

    @nn.compact
    def __call__(self, x):
        x = nn.Dense(8)(x)
        x = nn.relu(nn.BatchNorm(use_running_average=not self.train)(x))
        return nn.Dense(3)(x)


def main():
    x = jax.random.normal(jax.random.key(1), (6, 4))
    table = nn.tabulate(Net(train=False), jax.random.key(0), console_kwargs={"width": 200})(x)
    plain = re.sub(r"\x1b\[[0-9;]*m", "", table)
    lines = [line.rstrip() for line in plain.strip("\n").split("\n")]
    with open(OUT, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
