"""Honest throughput: warm-up excluded, `block_until_ready` before the clock stops,
several repetitions, medians, compile time reported separately.

Throughput is measured in **examples/sec** (training images per second, forward +
backward + AdamW update). It is also shown as **projected tokens/sec**: examples/sec
times `TOKENS_PER_EXAMPLE = 16`, reading a 28 x 28 image as 16 patches of 7 x 7 pixels
the way a vision transformer would. That is a projection, not a measurement: this MLP
has no tokens, and a model that really processed 16 tokens per image would cost more.

The variants compared, all on the same data and the same MLP:

- `python_dispatch`: un-jitted `value_and_grad` and update per step (the codelab's
  "eager" cell);
- `codelab_jit`: the codelab's loop, a `jax.jit` AdamW step on a dict of arrays,
  called once per batch from Python;
- `library_step`: [`train_step`][eqx_fmnist.train.train_step] once per batch;
- `library_fused`: [`train_epoch`][eqx_fmnist.train.train_epoch], one compiled
  `lax.scan` per epoch.
"""

import dataclasses
import math
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import jax.random as jr
import optax

from .dataset import ArrayDataset, epoch_indices, normalize, steps_per_epoch
from .train import TrainConfig, init_state, train_epoch, train_step

TOKENS_PER_EXAMPLE = 16
"""Tokens per image for the tokens/sec projection: 16 patches of 7 x 7 pixels."""


def matmul_flops_per_example(in_size: int = 784, hidden=(256, 128), out_size: int = 10) -> int:
    """Exact matmul FLOPs of one training example (multiply-add = 2 FLOPs).

    Forward: every layer. Backward: the weight gradient of every layer, and the input
    gradient of every layer but the first (nobody needs the gradient of the pixels).
    1,007,104 for the reference 784-256-128-10 MLP.
    """
    sizes = (in_size, *hidden, out_size)
    pairs = list(zip(sizes[:-1], sizes[1:], strict=True))
    forward = sum(2 * a * b for a, b in pairs)
    weight_grads = forward
    input_grads = sum(2 * a * b for a, b in pairs[1:])
    return forward + weight_grads + input_grads


@dataclasses.dataclass(frozen=True)
class Throughput:
    """One measured variant: median examples/sec over `runs`, and its compile time."""

    name: str
    examples_per_sec: float
    runs: tuple[float, ...]
    compile_seconds: float
    batch_size: int

    @property
    def tokens_per_sec(self) -> float:
        """A projection: examples/sec x `TOKENS_PER_EXAMPLE`."""
        return self.examples_per_sec * TOKENS_PER_EXAMPLE


def measure(
    name: str,
    run: Callable[[], Any],
    *,
    examples: int,
    batch_size: int,
    repeats: int = 5,
    warmup: int = 1,
) -> Throughput:
    """Time `run()` (which must return what it computed) `repeats` times after `warmup`.

    The first warm-up call's time is reported as compile time; the clock stops only
    after `jax.block_until_ready` on the result.
    """
    compile_seconds = 0.0
    for i in range(warmup):
        t = time.perf_counter()
        jax.block_until_ready(run())
        if i == 0:
            compile_seconds = time.perf_counter() - t
    rates = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(run())
        rates.append(examples / (time.perf_counter() - t))
    return Throughput(name, statistics.median(rates), tuple(rates), compile_seconds, batch_size)


# --------------------------------------------------------------------------- codelab


def _codelab_params(hidden, key) -> dict[str, jax.Array]:
    sizes = (784, *hidden, 10)
    params = {}
    for i, (k, a, b) in enumerate(
        zip(jr.split(key, len(sizes) - 1), sizes[:-1], sizes[1:], strict=True)
    ):
        params[f"w{i}"] = jr.normal(k, (a, b)) * math.sqrt(2.0 / a)
        params[f"b{i}"] = jnp.zeros((b,))
    return params


def _codelab_loss(params, x, y):
    n = len(params) // 2
    for i in range(n):
        x = x @ params[f"w{i}"] + params[f"b{i}"]
        if i < n - 1:
            x = jax.nn.gelu(x)
    logp = jax.nn.log_softmax(x)
    return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))


def codelab_trainer(dataset: ArrayDataset, config: TrainConfig, *, jit: bool = True):
    """The codelab's hand-written loop, for comparison: returns `run_epoch()`.

    Images are converted to float32 once, up front, as the codelab does; each epoch is
    shuffled on the device and cut into fixed-shape batches; one step (jitted or not)
    is dispatched from Python per batch.
    """
    tx = optax.adamw(config.learning_rate, weight_decay=config.weight_decay)
    params = _codelab_params(config.hidden_sizes, jr.PRNGKey(config.seed))
    state = {"params": params, "opt": tx.init(params), "epoch": 0}
    images = normalize(dataset.images)
    labels = dataset.labels
    batch = config.batch_size
    steps = steps_per_epoch(len(dataset), batch)

    def step(params, opt, x, y):
        loss, grads = jax.value_and_grad(_codelab_loss)(params, x, y)
        updates, opt = tx.update(grads, opt, params)
        return optax.apply_updates(params, updates), opt, loss

    step = jax.jit(step, donate_argnums=(0, 1)) if jit else step

    def run_epoch():
        idx = epoch_indices(jr.fold_in(jr.PRNGKey(1), state["epoch"]), len(dataset), batch)
        xs, ys = images[idx], labels[idx]
        params, opt = state["params"], state["opt"]
        for i in range(steps):
            params, opt, loss = step(params, opt, xs[i], ys[i])
        state.update(params=params, opt=opt, epoch=state["epoch"] + 1)
        return loss

    return run_epoch


def library_step_trainer(dataset: ArrayDataset, config: TrainConfig):
    """The library's `train_step`, called once per batch from Python."""
    holder = {"state": init_state(config, len(dataset)), "epoch": 0}
    batch = config.batch_size

    def run_epoch():
        st = holder["state"]
        idx = epoch_indices(jr.fold_in(st.key, holder["epoch"]), len(dataset), batch)
        xs, ys = dataset.images[idx], dataset.labels[idx]
        for i in range(idx.shape[0]):
            st, metrics = train_step(st, xs[i], ys[i])
        holder.update(state=st, epoch=holder["epoch"] + 1)
        return metrics["loss"]

    return run_epoch


def library_fused_trainer(dataset: ArrayDataset, config: TrainConfig):
    """The library's fast path: [`train_epoch`][eqx_fmnist.train.train_epoch]."""
    holder = {"state": init_state(config, len(dataset))}

    def run_epoch():
        st, metrics = train_epoch(holder["state"], dataset, batch_size=config.batch_size)
        holder["state"] = st
        return metrics["loss"]

    return run_epoch


def compare_training(
    dataset: ArrayDataset,
    config: TrainConfig | None = None,
    *,
    repeats: int = 5,
    variants: tuple[str, ...] = ("codelab_jit", "library_step", "library_fused"),
    progress: Callable[[str], None] | None = None,
) -> list[Throughput]:
    """Measure training variants in this process, one epoch per repetition.

    **Arguments:**

    - `dataset`: the training set.
    - `config`: batch size, hidden sizes, optimiser. Defaults to `TrainConfig()`.
    - `repeats`: timed epochs per variant (after one warm-up epoch). Defaults to `5`.
    - `variants`: names from `python_dispatch`, `codelab_jit`, `library_step`,
        `library_fused`.
    - `progress`: called with each variant's name before it is measured.

    **Returns:**

    One [`Throughput`][eqx_fmnist.bench.Throughput] per variant, in order.
    """
    config = TrainConfig() if config is None else config
    makers = {
        "python_dispatch": lambda: codelab_trainer(dataset, config, jit=False),
        "codelab_jit": lambda: codelab_trainer(dataset, config),
        "library_step": lambda: library_step_trainer(dataset, config),
        "library_fused": lambda: library_fused_trainer(dataset, config),
    }
    unknown = set(variants) - set(makers)
    if unknown:
        raise ValueError(f"unknown variants {sorted(unknown)}; choose from {sorted(makers)}.")
    examples = steps_per_epoch(len(dataset), config.batch_size) * config.batch_size
    results = []
    for name in variants:
        if progress is not None:
            progress(name)
        # Python dispatch is ~7x slower: fewer repeats keep the comparison affordable.
        reps = max(1, repeats // 3) if name == "python_dispatch" else repeats
        results.append(
            measure(
                name, makers[name](), examples=examples, batch_size=config.batch_size, repeats=reps
            )
        )
    return results
