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
  `lax.scan` per epoch;
- `pytorch_eager`: the same MLP, initial weights and AdamW in PyTorch on the CPU
  (when `torch` is installed);
- the machine's bound: a large jitted float32 matmul's GFLOP/s divided by the matmul
  FLOPs of one training example
  ([`matmul_flops_per_example`][eqx_fmnist.bench.matmul_flops_per_example]).
"""

import dataclasses
import math
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import jax.random as jr
import optax

from .dataset import ArrayDataset, epoch_indices, normalize, steps_per_epoch
from .evaluate import evaluate
from .train import TrainConfig, fit, init_state, train_epoch, train_step

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


def pytorch_trainer(dataset: ArrayDataset, config: TrainConfig):
    """The same MLP, the same initial weights and AdamW in PyTorch eager on the CPU.

    Raises `ImportError` when `torch` is not installed (`pip install torch`).
    """
    import numpy as np
    import torch

    torch.set_num_threads(_cpu_count())
    model = init_state(config, len(dataset)).model
    layers = []
    for i, lin in enumerate(model.layers):
        t = torch.nn.Linear(lin.in_features, lin.out_features)
        with torch.no_grad():
            t.weight.copy_(torch.from_numpy(np.array(lin.weight)))
            t.bias.copy_(torch.from_numpy(np.array(lin.bias)))
        layers.append(t)
        if i < len(model.layers) - 1:
            layers.append(torch.nn.GELU(approximate="tanh"))
    net = torch.nn.Sequential(*layers)
    opt = torch.optim.AdamW(
        net.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay
    )
    images = torch.from_numpy(np.array(dataset.images)).float().div_(255.0)
    labels = torch.from_numpy(np.array(dataset.labels)).long()
    batch = config.batch_size
    steps = steps_per_epoch(len(dataset), batch)
    gen = torch.Generator().manual_seed(config.seed)
    loss_fn = torch.nn.CrossEntropyLoss()

    def run_epoch():
        perm = torch.randperm(len(labels), generator=gen)[: steps * batch].view(steps, batch)
        for idx in perm:
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(net(images[idx]), labels[idx])
            loss.backward()
            opt.step()
        return float(loss.detach())

    return run_epoch


def _cpu_count() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def matmul_peak_gflops(size: int = 2048, *, repeats: int = 10, dtype=jnp.float32) -> float:
    """GFLOP/s of a jitted `size x size` matmul on the default device (median)."""
    a = jr.normal(jr.PRNGKey(0), (size, size), dtype)
    f = jax.jit(lambda x: x @ x)
    t = measure("matmul", lambda: f(a), examples=1, batch_size=1, repeats=repeats)
    return 2 * size**3 * t.examples_per_sec / 1e9


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
        "pytorch_eager": lambda: pytorch_trainer(dataset, config),
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


def time_to_accuracy(
    config: TrainConfig | None = None,
    targets: Sequence[float] = (0.88, 0.90),
) -> tuple[dict[float, float | None], float]:
    """Wall seconds from the start of a run (loading the data, compiling and evaluating
    included) to the first end-of-interval evaluation on all 10,000 test images at or
    above each target.

    **Arguments:**

    - `config`: the run. Defaults to the recommended recipe.
    - `targets`: test accuracies to time. Defaults to `(0.88, 0.90)`.

    **Returns:**

    `({target: seconds or None if never reached}, final test accuracy)`.
    """
    from .data import load_fashion_mnist
    from .dataset import to_datasets

    config = TrainConfig() if config is None else config
    reached: dict[float, float | None] = {t: None for t in targets}
    start = time.perf_counter()
    train, test = to_datasets(load_fashion_mnist())

    def callback(entry, state):
        acc = evaluate(state.model, test, policy=state.policy).accuracy
        now = time.perf_counter() - start
        for t in targets:
            if reached[t] is None and acc >= t:
                reached[t] = now

    result = fit(config, (train, test), callback=callback)
    return reached, result.test.accuracy


@dataclasses.dataclass
class BenchmarkReport:
    """Everything one benchmark run measured, and how to show it."""

    device: str
    matmul_gflops: float
    flops_per_example: int
    main: list[Throughput]
    precision: list[Throughput]
    batch_sizes: list[Throughput]
    hidden: list[tuple[tuple[int, ...], Throughput]]
    matmul_size: int = 2048
    time_to_accuracy: dict[float, float | None] | None = None
    final_accuracy: float | None = None
    skipped: list[str] = dataclasses.field(default_factory=list)

    @property
    def bound(self) -> float:
        """Examples/sec if every FLOP ran at the measured matmul peak."""
        return self.matmul_gflops * 1e9 / self.flops_per_example

    def to_markdown(self) -> str:
        base = next((t for t in self.main if t.name == "codelab_jit"), self.main[0])
        lines = [
            f"Device: {self.device}. Matmul peak {self.matmul_gflops:,.1f} GFLOP/s "
            f"(jitted {self.matmul_size} x {self.matmul_size} float32); {self.flops_per_example:,} matmul FLOPs per "
            f"training example; bound {self.bound:,.0f} examples/sec.",
            "",
            "| variant (batch 512, float32) | examples/sec | x codelab_jit | % of bound "
            "| projected tokens/sec | compile s |",
            "|---|---|---|---|---|---|",
        ]
        for t in self.main:
            lines.append(
                f"| {t.name} | {t.examples_per_sec:,.0f} | "
                f"{t.examples_per_sec / base.examples_per_sec:.2f} | "
                f"{100 * t.examples_per_sec / self.bound:.0f}% | {t.tokens_per_sec:,.0f} | "
                f"{t.compile_seconds:.2f} |"
            )
        lines += ["", "| fused path, precision | examples/sec | x float32 |", "|---|---|---|"]
        f32 = self.precision[0].examples_per_sec
        lines += [
            f"| {t.name} | {t.examples_per_sec:,.0f} | {t.examples_per_sec / f32:.2f} |"
            for t in self.precision
        ]
        lines += ["", "| fused path, batch size | examples/sec | % of bound |", "|---|---|---|"]
        lines += [
            f"| {t.batch_size} | {t.examples_per_sec:,.0f} | "
            f"{100 * t.examples_per_sec / self.bound:.0f}% |"
            for t in self.batch_sizes
        ]
        lines += [
            "",
            "| fused path, hidden sizes | examples/sec | matmul FLOPs/example | % of its bound |",
            "|---|---|---|---|",
        ]
        for hidden, t in self.hidden:
            flops = matmul_flops_per_example(hidden=hidden)
            bound = self.matmul_gflops * 1e9 / flops
            lines.append(
                f"| {hidden} | {t.examples_per_sec:,.0f} | {flops:,} | "
                f"{100 * t.examples_per_sec / bound:.0f}% |"
            )
        if self.time_to_accuracy is not None:
            lines += [
                "",
                "| recommended recipe, test accuracy reached | wall seconds (load + compile "
                "included) |",
                "|---|---|",
            ]
            for target, secs in self.time_to_accuracy.items():
                lines.append(
                    f"| {target:.2f} | {'not reached' if secs is None else f'{secs:.1f}'} |"
                )
            if self.final_accuracy is not None:
                lines.append(f"| final ({self.final_accuracy:.4f}) | |")
        if self.skipped:
            lines += ["", *(f"- skipped: {s}" for s in self.skipped)]
        lines += [
            "",
            f"Tokens/sec is a projection: examples/sec x {TOKENS_PER_EXAMPLE} (7 x 7 patches "
            "per image), not a measurement.",
        ]
        return "\n".join(lines) + "\n"

    def figure(self):
        from .plots import plot_throughput

        return plot_throughput(
            [t.name for t in self.main],
            [t.examples_per_sec for t in self.main],
            title=f"Training throughput, batch 512, float32 ({self.device})",
            bound=self.bound,
        )


def run_benchmark(
    dataset: ArrayDataset,
    *,
    quick: bool = False,
    repeats: int = 5,
    with_time_to_accuracy: bool = True,
    progress: Callable[[str], None] | None = None,
) -> BenchmarkReport:
    """Measure every row of the benchmark in this process.

    **Arguments:**

    - `dataset`: the training set (60,000 images for the real benchmark).
    - `quick`: a smoke-sized run: 4,096 examples, 2 repeats, small batches, no
        time-to-accuracy. Defaults to `False`.
    - `repeats`: timed epochs per variant. Defaults to `5`.
    - `with_time_to_accuracy`: also time the recommended recipe to 0.88 and 0.90.
    - `progress`: called with a description before each measurement.

    **Returns:**

    A [`BenchmarkReport`][eqx_fmnist.bench.BenchmarkReport].
    """
    say = progress or (lambda _: None)
    if quick:
        dataset = dataset.take(jnp.arange(min(len(dataset), 4096)))
        repeats = 2
    batch_sizes = (128, 512, 1024) if quick else (128, 512, 2048, 8192)
    say("matmul peak")
    matmul_size = 1024 if quick else 2048
    peak = matmul_peak_gflops(matmul_size)
    config = TrainConfig(batch_size=512, hidden_sizes=(256, 128))
    variants = ["python_dispatch", "codelab_jit", "library_step", "library_fused"]
    skipped = []
    try:
        import torch  # noqa: F401

        variants.append("pytorch_eager")
    except ImportError:
        skipped.append("pytorch_eager: torch is not installed (pip install torch)")
    main = compare_training(
        dataset, config, repeats=repeats, variants=tuple(variants), progress=say
    )

    def fused(name: str, cfg: TrainConfig) -> Throughput:
        say(name)
        spe = steps_per_epoch(len(dataset), cfg.batch_size)
        return dataclasses.replace(
            measure(
                name,
                library_fused_trainer(dataset, cfg),
                examples=spe * cfg.batch_size,
                batch_size=cfg.batch_size,
                repeats=repeats,
            ),
            name=name,
        )

    precision = [
        fused(name, dataclasses.replace(config, precision=spec))
        for name, spec in [
            ("float32", "p=f32,c=f32,o=f32"),
            ("bfloat16 compute", "p=f32,c=bf16,o=f32"),
            ("float16 compute + loss scale", "p=f32,c=f16,o=f32"),
        ]
    ]
    sizes = [fused(f"batch {b}", dataclasses.replace(config, batch_size=b)) for b in batch_sizes]
    hidden = [
        (h, fused(f"hidden {h}", dataclasses.replace(config, hidden_sizes=h)))
        for h in ((256, 128), (1024, 512))
    ]
    tta = final = None
    if with_time_to_accuracy and not quick:
        say("time to accuracy (recommended recipe)")
        tta, final = time_to_accuracy()
    device = jax.devices()[0]
    return BenchmarkReport(
        device=f"{len(jax.devices())} x {device.platform} ({device.device_kind})",
        matmul_gflops=peak,
        matmul_size=matmul_size,
        flops_per_example=matmul_flops_per_example(),
        main=main,
        precision=precision,
        batch_sizes=sizes,
        hidden=hidden,
        time_to_accuracy=tta,
        final_accuracy=final,
        skipped=skipped,
    )
