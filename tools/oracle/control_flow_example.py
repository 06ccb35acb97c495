"""Prints what examples/control_flow.rs prints, computed by flax 0.12.8:
    .venv-oracle/bin/python tools/oracle/control_flow_example.py \
        > examples/expected/control_flow.txt
CI runs the Rust example and diffs its output against that file, so the
example's numbers are Flax's, bit for bit (every float is printed with the
shortest digits that identify its f32).

The model: an embedding, a fixed-point refinement `h = tanh(0.5 core(h) + h0)`
run by `nn.while_loop` until it settles (its step count carried in the
`stats` collection), `nn.cond` keeping the refined `h` if it settled and
falling back to `h0` if not (a counter per branch, as Flax's test_cond),
and `nn.switch` picking one of two heads of different structure by task
(all heads run at init first, as `nn.switch`'s docstring does).
"""

import jax
import jax.numpy as jnp
import numpy as np
import flax.linen as nn


def fmt(a):
    a = np.asarray(a)
    if a.dtype == np.int32 or a.ndim == 0:
        return str(a.item()) if a.dtype == np.int32 else fmt_float(a)
    rows = a.reshape(-1, a.shape[-1])
    return "[" + ", ".join("[" + ", ".join(fmt_float(v) for v in r) + "]" for r in rows) + "]"


def fmt_float(v):
    return np.format_float_positional(np.float32(v), unique=True, trim="-")


class Mlp(nn.Module):
    hidden: int
    out: int

    @nn.compact
    def __call__(self, x):
        h = nn.relu(nn.Dense(self.hidden)(x))
        return nn.Dense(self.out)(h)


class Adaptive(nn.Module):
    features: int = 4
    tol: float = 1e-4
    max_steps: int = 50

    def setup(self):
        self.embed = nn.Dense(self.features)
        self.core = nn.Dense(self.features)
        self.heads = [nn.Dense(3), Mlp(8, 3)]

    @nn.compact
    def __call__(self, x, task):
        zero = lambda: jnp.zeros((), jnp.int32)
        steps = self.variable("stats", "steps", zero)
        self.variable("stats", "settled", zero)
        self.variable("stats", "fallbacks", zero)
        steps.value = jnp.zeros((), jnp.int32)

        h0 = self.embed(x)
        # One step outside the loop creates core's parameters: a loop body
        # may not create variables.
        h = jnp.tanh(0.5 * self.core(h0) + h0)

        def cond_fn(mdl, carry):
            _, delta = carry
            return (delta > self.tol) & (mdl.get_variable("stats", "steps") < self.max_steps)

        def body_fn(mdl, carry):
            h, _ = carry
            new = jnp.tanh(0.5 * mdl.core(h) + h0)
            mdl.put_variable("stats", "steps", mdl.get_variable("stats", "steps") + 1)
            return new, jnp.max(jnp.abs(new - h))

        h, delta = nn.while_loop(
            cond_fn, body_fn, self, (h, jnp.array(jnp.inf, jnp.float32)), carry_variables="stats"
        )

        def settled(mdl, h, h0):
            mdl.variable("stats", "settled").value += 1
            return h

        def fallback(mdl, h, h0):
            mdl.variable("stats", "fallbacks").value += 1
            return h0

        h = nn.cond(delta <= self.tol, settled, fallback, self, h, h0)

        branches = [lambda mdl, h, i=i: mdl.heads[i](h) for i in range(len(self.heads))]
        if self.is_mutable_collection("params"):
            for branch in branches:
                branch(self, h)
        return nn.switch(task, branches, self, h)


def main():
    x = jax.random.normal(jax.random.key(1), (2, 5), jnp.float32)
    model = Adaptive()
    variables = model.init(jax.random.key(0), x, 0)
    params = {"params": variables["params"]}
    shapes = jax.tree_util.tree_map(lambda a: a.shape, params["params"])
    for path, shape in sorted(
        ("/".join(k.key for k in p), s) for p, s in jax.tree_util.tree_leaves_with_path(
            shapes, is_leaf=lambda t: isinstance(t, tuple))
    ):
        print(f"params/{path}: {list(shape)}")
    for task in (0, 1):
        y, state = model.apply(params, x, task, mutable=["stats"])
        s = state["stats"]
        print(f"task {task}: {fmt(y)}")
        print(f"  steps {fmt(s['steps'])}, settled {fmt(s['settled'])}, fallbacks {fmt(s['fallbacks'])}")
    y, state = Adaptive(max_steps=3).apply(params, x, 1, mutable=["stats"])
    s = state["stats"]
    print(f"at most 3 steps, task 1: {fmt(y)}")
    print(f"  steps {fmt(s['steps'])}, settled {fmt(s['settled'])}, fallbacks {fmt(s['fallbacks'])}")


if __name__ == "__main__":
    main()
