"""The work of benches/nn_jit_grad.rs, timed in JAX (CPU), for a
side-by-side ratio. Run on the same machine in the same session as
`cargo bench --bench nn_jit_grad`:

    .venv-oracle/bin/python tools/bench/jax_nn_jit_grad.py

`jax.value_and_grad` of `sum(y * w)` over the parameters, for
Dense(64) -> relu -> Dropout(0.1) -> BatchNorm -> Dense(64) -> relu ->
Dense(10) on a batch of 32 and a lone BatchNorm on [32, 64], the module
applied eagerly (`Block.apply`) and as `nn.jit(Block).apply` (not
`jax.jit` around the whole: the loss and the differentiation eager, as
flaxen's `value_and_grad`); a fresh dropout key each call, results
blocked on. Timed in batches of about 10 ms (median and best per call).
Pinned like the oracle: jax==0.10.2, jaxlib==0.10.2, flax==0.12.8.
"""

import itertools

import jax
import jax.numpy as jnp
import flax.linen as nn

from jax_nn_jit import batch_times, fmt


class Block(nn.Module):
    bn_only: bool = False

    @nn.compact
    def __call__(self, x):
        if self.bn_only:
            return nn.BatchNorm(use_running_average=False, momentum=0.9)(x)
        h = nn.relu(nn.Dense(64)(x))
        h = nn.Dropout(0.1, deterministic=False)(h)
        h = nn.BatchNorm(use_running_average=False, momentum=0.9)(h)
        h = nn.relu(nn.Dense(64)(h))
        return nn.Dense(10)(h)


def main():
    for name, bn_only in [("mlp_bn_64_64_64_10_b32", False), ("bn_32x64", True)]:
        x = jax.random.normal(jax.random.key(1), (32, 64))
        w = jax.random.normal(jax.random.key(3), (32, 64 if bn_only else 10))
        v = Block(bn_only).init({"params": jax.random.key(0), "dropout": jax.random.key(1)}, x)
        keys = itertools.cycle(list(jax.random.split(jax.random.key(2), 4096)))
        for label, module in [("eager", Block(bn_only)), ("jit", nn.jit(Block)(bn_only))]:
            def loss(p, module=module):
                y, _ = module.apply(
                    {"params": p, "batch_stats": v["batch_stats"]}, x,
                    rngs={"dropout": next(keys)}, mutable=["batch_stats"],
                )
                return jnp.sum(y * w)

            vg = jax.value_and_grad(loss)
            median, best = batch_times(lambda: vg(v["params"]))
            print(f"jax nn_jit_grad/{name}/{label}: median {fmt(median)}, best {fmt(best)}")


if __name__ == "__main__":
    main()
