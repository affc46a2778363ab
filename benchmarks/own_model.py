"""A model, optimiser and loss of your own under `fit`, against the loop a user writes
for them by hand: a small `eqx.nn.Conv2d` network (two strided convolutions and a
linear layer) and Optax's Adam, trained by `ef.fit(config, splits, model=...,
optimizer=..., loss=...)` and by a plain Python loop of one `eqx.filter_jit` step per
batch (the batch sliced from a permutation on the device), on the same images, in
interleaved repetitions in one process. Each figure is training examples per second
with compiling excluded: `fit`'s own `examples_per_sec` (its training calls' wall
time), and the loop's wall time after a warm-up epoch.

    python benchmarks/own_model.py [--epochs 2] [--repeats 5] [--batch 128]
        [--train 12000] [--out benchmarks/results/own_model.md]

On a CPU XLA runs a convolution's gradient many times slower inside a loop's body
(jax-ml/jax#12868); `fit` writes such a model's steps out a few per call there
(`eqx_fmnist.chunk.UNROLLED_STEPS`) instead of scanning them.
"""

import argparse
import statistics
import time
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import optax

import eqx_fmnist as ef
from eqx_fmnist.precision import optax_promotion

from harness import machine_line, write_results


class ConvNet(eqx.Module):
    """Two 3 x 3 convolutions of stride 2 (8 and 16 channels) and a linear layer: one
    flat 28 x 28 image in, ten logits out."""

    conv1: eqx.nn.Conv2d
    conv2: eqx.nn.Conv2d
    linear: eqx.nn.Linear

    def __init__(self, *, key):
        k1, k2, k3 = jr.split(key, 3)
        self.conv1 = eqx.nn.Conv2d(1, 8, 3, stride=2, padding=1, key=k1)
        self.conv2 = eqx.nn.Conv2d(8, 16, 3, stride=2, padding=1, key=k2)
        self.linear = eqx.nn.Linear(16 * 7 * 7, 10, key=k3)

    def __call__(self, x):
        x = jax.nn.relu(self.conv1(x.reshape(1, 28, 28)))
        x = jax.nn.relu(self.conv2(x))
        return self.linear(x.reshape(-1))


def cross_entropy(model, x, y, *, key):
    """The loss a user writes: softmax cross-entropy of the vmapped model."""
    logits = jax.vmap(model)(x)
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
    return loss, {"accuracy": jnp.mean(jnp.argmax(logits, -1) == y)}


def plain_loop(train: ef.ArrayDataset, batch: int, epochs: int, seed: int):
    """The hand-written loop: one compiled step per batch, called from Python."""
    optimizer = optax.adam(1e-3)

    @eqx.filter_jit(donate="all")
    def step(model, opt_state, x, y):
        x = x.astype(jnp.float32) / 255.0
        grads, _ = eqx.filter_grad(cross_entropy, has_aux=True)(model, x, y, key=None)
        with optax_promotion():  # Adam's bias correction: float ** int32 count
            updates, opt_state = optimizer.update(grads, opt_state, model)
        return eqx.apply_updates(model, updates), opt_state

    @jax.jit
    def order(key):
        return jr.permutation(key, len(train))

    def run():
        model = ConvNet(key=jr.key(seed))
        opt_state = optimizer.init(eqx.filter(model, eqx.is_inexact_array))
        steps = len(train) // batch
        for epoch in range(epochs):
            idx = order(jr.fold_in(jr.key(seed), epoch))
            for i in range(steps):
                rows = idx[i * batch : (i + 1) * batch]
                model, opt_state = step(model, opt_state, train.images[rows], train.labels[rows])
        return jax.block_until_ready(model)

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--train", type=int, default=12_000, help="training images used")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/own_model.md"))
    args = parser.parse_args()
    data = ef.load_fashion_mnist()
    train = ef.ArrayDataset(data.train_images[: args.train], data.train_labels[: args.train])
    splits = ef.Splits(train)
    config = ef.TrainConfig.codelab(batch_size=args.batch, epochs=args.epochs)
    steps = args.epochs * (len(train) // args.batch)

    def under_fit():
        result = ef.fit(
            config, splits, model=ConvNet, optimizer=optax.adam(1e-3), loss=cross_entropy
        )
        return result.examples_per_sec

    loop = plain_loop(train, args.batch, args.epochs, seed=0)

    def plain():
        t = time.perf_counter()
        loop()
        return steps * args.batch / (time.perf_counter() - t)

    under_fit()  # compiles (and fills the caches) for both
    plain()
    rates: dict[str, list[float]] = {"fit": [], "plain": []}
    for _ in range(args.repeats):
        rates["fit"].append(under_fit())
        rates["plain"].append(plain())
    fit_rate, plain_rate = (statistics.median(rates[k]) for k in ("fit", "plain"))
    lines = [
        machine_line(),
        "",
        f"`ConvNet` (conv 1->8->16, stride 2, then linear; {ef.count_params(ConvNet(key=jr.key(0))):,} "
        f"parameters) with `optax.adam(1e-3)`, batch {args.batch}, {args.epochs} epochs of "
        f"{len(train):,} images, median of {args.repeats} interleaved repetitions, compiling "
        "excluded.",
        "",
        "| loop | examples/sec (median) | vs plain loop |",
        "|---|---|---|",
        f"| `ef.fit(..., model=, optimizer=, loss=)` | {fit_rate:,.0f} | {fit_rate / plain_rate:.2f}x |",
        f"| plain per-step `eqx.filter_jit` loop | {plain_rate:,.0f} | 1.00x |",
    ]
    text = "\n".join(lines) + "\n"
    write_results(args.out, text)


if __name__ == "__main__":
    main()
