"""The library's own training paths, measured in one process and gathered into a
`BenchmarkReport`: per step against fused,
`fit` at two logging cadences, precision policies, and batch sizes against the step's
bound (its matmuls on a CPU, its roofline elsewhere).

The loops the library replaces (the codelab's, PyTorch's) are not part of the package:
`python benchmarks/throughput.py` passes them in as more `trainers`."""

import dataclasses
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from eqx_fmnist.config import TrainConfig
from eqx_fmnist.dataset import ArrayDataset, Splits, epoch_indices, steps_per_epoch
from eqx_fmnist.state import init_state
from eqx_fmnist.step import compile_steps, train_step, train_steps
from eqx_fmnist.train import fit

from .report import BenchmarkReport, Cadence
from .roofline import DevicePeaks, Roofline, measure_peaks, step_roofline
from .timing import (
    MatmulBound,
    Throughput,
    machine_facts,
    made_by,
    matmul_bound,
    matmul_flops_per_example,
    measure_interleaved,
)

Trainer = Callable[[int], float]
"""`run(num_steps) -> last loss read`: trains `num_steps` more steps, reading the loss
back to the host every `read_every` steps (as a loop that logs does)."""
TrainerFactory = Callable[[ArrayDataset, TrainConfig, int], Trainer]
"""`factory(dataset, config, read_every) -> Trainer`."""

CODELAB_READ_EVERY = 25
"""Every training path reads its loss back to the host every 25 steps: a loop that logs
often (the codelab itself logs every 50, `TrainConfig.codelab().log_every`), so that the
per-step paths and the fused one pay the same host reads."""


def library_fused_trainer(
    dataset: ArrayDataset, config: TrainConfig, *, read_every: int = CODELAB_READ_EVERY
) -> Trainer:
    """The library's fast path: [`train_steps`][eqx_fmnist.step.train_steps] in chunks
    of `read_every` steps, the metrics read back after each chunk."""
    holder = {"state": init_state(config, len(dataset))}

    def run(num_steps: int) -> float:
        last = math.nan
        while num_steps > 0:
            k = min(read_every, num_steps)
            holder["state"], metrics = train_steps(
                holder["state"], dataset, batch_size=config.batch_size, num_steps=k
            )
            last = float(np.asarray(metrics["loss"])[-1])
            num_steps -= k
        return last

    return run


def library_step_trainer(
    dataset: ArrayDataset, config: TrainConfig, *, read_every: int = CODELAB_READ_EVERY
) -> Trainer:
    """The library's [`train_step`][eqx_fmnist.step.train_step], dispatched from Python
    once per batch, with each epoch's batches gathered up front as the codelab does."""
    batch = config.batch_size
    spe = steps_per_epoch(len(dataset), batch)
    holder = {"state": init_state(config, len(dataset)), "step": 0, "batches": None}
    key = jnp.array(np.asarray(holder["state"].key))  # a copy: the state is donated

    def run(num_steps: int) -> float:
        last, state = math.nan, holder["state"]
        for _ in range(num_steps):
            s = holder["step"]
            if s % spe == 0:
                idx = epoch_indices(jax.random.fold_in(key, s // spe), len(dataset), batch)
                holder["batches"] = (dataset.images[idx], dataset.labels[idx])
            xs, ys = holder["batches"]
            state, metrics = train_step(state, xs[s % spe], ys[s % spe])
            holder["step"] = s + 1
            if holder["step"] % read_every == 0:
                last = float(metrics["loss"])
        holder["state"] = state
        return last

    return run


TRAINERS: dict[str, TrainerFactory] = {
    "library_step": lambda ds, c, read_every: library_step_trainer(ds, c, read_every=read_every),
    "library_fused": lambda ds, c, read_every: library_fused_trainer(ds, c, read_every=read_every),
}
"""The library's training paths, by name."""


def compare_training(
    dataset: ArrayDataset,
    config: TrainConfig | None = None,
    *,
    trainers: Mapping[str, TrainerFactory] = TRAINERS,
    read_every: int = CODELAB_READ_EVERY,
    steps: int | Mapping[str, int] = 6 * CODELAB_READ_EVERY,
    repeats: int = 5,
) -> list[Throughput]:
    """Measure training paths in this process, interleaved, at one host-read cadence.

    **Arguments:**

    - `dataset`: the training set.
    - `config`: batch size, hidden sizes, optimiser, precision, augmentation. Defaults
        to `TrainConfig()`.
    - `trainers`: `{name: factory}`. Defaults to the library's
        `TRAINERS`.
    - `read_every`: steps between host reads of the loss, for every trainer. Defaults
        to `25`.
    - `steps`: steps per timed repetition, one number or one per name. Defaults to
        `150`.
    - `repeats`: timed repetitions of each, after one warm-up. Defaults to `5`.

    **Returns:**

    One `Throughput` per trainer, in order.
    """
    config = TrainConfig() if config is None else config
    runs, examples = {}, {}
    for name, factory in trainers.items():
        n = steps if isinstance(steps, int) else steps[name]
        trainer = factory(dataset, config, read_every)
        runs[name] = lambda trainer=trainer, n=n: trainer(n)
        examples[name] = n * config.batch_size
    return measure_interleaved(
        runs, examples=examples, batch_size=config.batch_size, repeats=repeats
    )


def fit_cadence(
    data: Splits,
    config: TrainConfig,
    log_every: Sequence[int | None] = (CODELAB_READ_EVERY, None),
    *,
    repeats: int = 5,
) -> list[Cadence]:
    """Examples/sec of whole [`fit`][eqx_fmnist.train.fit] runs at several logging
    cadences, interleaved: repetition `r` of each before repetition `r + 1` of any.

    `None` in `log_every` is one interval per epoch. Each figure is `fit`'s own
    `examples_per_sec` (training calls and their host reads; compiling and the final
    evaluation excluded), median over `repeats`.
    """
    rates: dict[int | None, list[float]] = {every: [] for every in log_every}
    for _ in range(repeats):
        for every in log_every:
            result = fit(dataclasses.replace(config, log_every=every), data)
            rates[every].append(result.examples_per_sec)
    spe = steps_per_epoch(len(data.train), config.batch_size)
    return [Cadence(every or spe, statistics.median(r), tuple(r)) for every, r in rates.items()]


AUGMENTATION_OFF = {"shift": 0, "mirror": False, "erase": 0.0}
"""The config changes that turn the default recipe's augmentation off."""


def main_job_rows(data: Splits, *, epochs: int = 2, repeats: int = 5) -> list[Throughput]:
    """The run a user starts against the path it is built on, in this process,
    interleaved: [`fit`][eqx_fmnist.train.fit] of the default recipe (`TrainConfig()`,
    `epochs` long), the same recipe without augmentation, and the plain fused epoch
    ([`train_epoch`][eqx_fmnist.step.train_epoch] of the recipe without augmentation,
    one host read per epoch).

    Each `fit` figure is its own `examples_per_sec` (its training calls and their host
    reads; compiling, loading and the final evaluation excluded); the fused epoch is
    timed around the call and its read. Medians over `repeats`, after one untimed
    repetition of each.
    """
    config = TrainConfig(epochs=epochs)
    plain = config.with_changes(**AUGMENTATION_OFF)
    spe = steps_per_epoch(len(data.train), config.batch_size)
    fused = library_fused_trainer(data.train, plain, read_every=spe)
    fits = {"fit, default recipe": config, "fit, no augmentation": plain}
    rates: dict[str, list[float]] = {name: [] for name in [*fits, "fused epoch, no augmentation"]}
    compile_seconds = dict.fromkeys(rates, 0.0)
    for r in range(repeats + 1):  # the first repetition warms up and is not counted
        for name, c in fits.items():
            result = fit(c, data)
            compile_seconds[name] = compile_seconds[name] or result.compile_seconds
            if r:
                rates[name].append(result.examples_per_sec)
        t = time.perf_counter()
        fused(spe * epochs)
        if r:
            rates["fused epoch, no augmentation"].append(
                spe * epochs * config.batch_size / (time.perf_counter() - t)
            )
    return [
        Throughput(name, statistics.median(r), tuple(r), compile_seconds[name], config.batch_size)
        for name, r in rates.items()
    ]


def xla_flops_per_example(dataset: ArrayDataset, config: TrainConfig) -> float:
    """XLA's own FLOP count (`cost_analysis()`) of a compiled one-step chunk, per example.

    It counts every floating-point operation XLA emits (the elementwise work too, not
    just the matmuls), as XLA estimates it; compare it with
    `matmul_flops_per_example`.
    One step, because XLA counts a loop's body once, however many times it runs.
    """
    state = init_state(config, len(dataset))
    run = compile_steps(state, dataset, batch_size=config.batch_size, num_steps=1)
    cost = run.compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list | tuple) else cost
    assert cost is not None, "XLA gave no cost analysis for the chunk"
    return float(cost["flops"]) / config.batch_size


def bf16_matmul_speedup(size: int = 1024, repeats: int = 7) -> float:
    """How much faster XLA runs a `size`-cubed matmul with bfloat16 inputs and float32
    accumulation than in float32 on the default device: the ceiling of what a bfloat16
    policy can gain here (1.0 or less means XLA does not use bfloat16 hardware)."""
    a = jax.random.normal(jax.random.PRNGKey(0), (size, size), jnp.float32)
    f32 = jax.jit(lambda x: x @ x)
    bf16 = jax.jit(lambda x: jnp.matmul(x, x, preferred_element_type=jnp.float32))
    a16 = a.astype(jnp.bfloat16)
    times = measure_interleaved(
        {"f32": lambda: f32(a), "bf16": lambda: bf16(a16)},
        examples=1,
        batch_size=1,
        repeats=repeats,
    )
    return times[1].examples_per_sec / times[0].examples_per_sec


PRECISION_ROWS = ("p=f32,c=f32,o=f32", "p=f32,c=bf16,o=f32", "p=f32,c=f16,o=f32")
"""The policies the benchmark compares. Each asks for its own matmul precision
([`Policy.matmul_precision`][eqx_fmnist.precision.Policy.matmul_precision]): float32
products at `highest` on every backend, bfloat16 and float16 at the default. A TPU has
no float16 multiplier (a run there refuses `c=f16`): its row is left out there."""


def precision_specs(backend: str) -> tuple[str, ...]:
    """The rows of `PRECISION_ROWS` a run on `backend` accepts."""
    if backend == "tpu":
        return tuple(s for s in PRECISION_ROWS if "c=f16" not in s)
    return PRECISION_ROWS


def precision_rows(
    dataset: ArrayDataset,
    config: TrainConfig,
    specs: Sequence[str] = PRECISION_ROWS,
    *,
    repeats: int = 5,
) -> list[Throughput]:
    """The fused path, one epoch per repetition, under each precision policy,
    interleaved."""
    spe = steps_per_epoch(len(dataset), config.batch_size)
    runs = {}
    for spec in specs:
        trainer = library_fused_trainer(
            dataset, dataclasses.replace(config, precision=spec), read_every=spe
        )
        runs[spec] = lambda trainer=trainer: trainer(spe)
    return measure_interleaved(
        runs, examples=spe * config.batch_size, batch_size=config.batch_size, repeats=repeats
    )


def batch_rows(
    dataset: ArrayDataset,
    config: TrainConfig,
    batch_sizes: Sequence[int],
    *,
    examples: int,
    repeats: int = 5,
) -> list[Throughput]:
    """The fused path at each batch size, about `examples` examples (at least 4 steps)
    per repetition, interleaved."""
    steps = {b: max(4, examples // b) for b in batch_sizes}
    runs = {}
    for b in batch_sizes:
        trainer = library_fused_trainer(
            dataset, dataclasses.replace(config, batch_size=b), read_every=steps[b]
        )
        runs[f"batch {b}"] = lambda trainer=trainer, k=steps[b]: trainer(k)
    return measure_interleaved(
        runs,
        examples={f"batch {b}": steps[b] * b for b in batch_sizes},
        batch_size={f"batch {b}": b for b in batch_sizes},
        repeats=repeats,
    )


def step_bounds(
    batch_sizes: Sequence[int], *, quick: bool = False
) -> tuple[DevicePeaks, list[MatmulBound | Roofline]]:
    """The device's peaks, and each batch size's bound: on a CPU the step's own matmuls
    timed one by one with numpy and PyTorch (tighter than the peaks there), elsewhere,
    where a small dispatch times the dispatch, the step's roofline."""
    peaks = measure_peaks(quick=quick, repeats=2 if quick else 5)
    cpu = jax.default_backend() == "cpu"
    bounds: list[MatmulBound | Roofline] = [
        matmul_bound(b, min_seconds=0.01 if quick else 0.2) if cpu else step_roofline(b, peaks)
        for b in batch_sizes
    ]
    return peaks, bounds


def run_benchmark(
    data: tuple[ArrayDataset, ArrayDataset],
    *,
    quick: bool = False,
    repeats: int = 5,
    progress: Callable[[str], None] | None = None,
    trainers: Mapping[str, TrainerFactory] = TRAINERS,
    steps: Mapping[str, int] | None = None,
    skipped: Sequence[str] = (),
) -> BenchmarkReport:
    """Measure every table of the benchmark in this process (`eqx-fmnist bench`).

    **Arguments:**

    - `data`: `(train, test)` (60,000 training images for the real benchmark).
    - `quick`: a smoke-sized run: 4,096 training examples, one timed repetition of
        each variant, one host read's worth of steps, matmuls sampled briefly: it checks
        that every table is made, not how fast. Defaults to `False`.
    - `repeats`: timed repetitions of each variant. Defaults to `5`.
    - `progress`: called with a description before each measurement.
    - `trainers`: the training paths of the first table. Defaults to the library's
        own, `TRAINERS`; `benchmarks/throughput.py`
        adds the codelab's and PyTorch's loops.
    - `steps`: `{name: steps}` per timed repetition for some trainers (a slow loop runs
        fewer). Defaults to the same for all.
    - `skipped`: lines saying which trainers were left out and why, for the report.

    **Returns:**

    A `BenchmarkReport`.
    """
    say = progress or (lambda _: None)
    train, test = data
    if quick:
        train = train.take(jnp.arange(min(len(train), 4096)))
        test = test.take(jnp.arange(min(len(test), 1024)))
        repeats = 1
    # Without augmentation: the loops of benchmarks/throughput.py (the codelab's and
    # PyTorch's) do none, and the library's paths do the same work as they do.
    config = TrainConfig(batch_size=512, shift=0, mirror=False)
    say("machine facts and the bfloat16 matmul ceiling")
    facts = {**machine_facts(), "made_by": made_by()}
    bf16_ceiling = bf16_matmul_speedup(256 if quick else 1024)
    say(f"training paths, a host read every {CODELAB_READ_EVERY} steps: {', '.join(trainers)}")
    n = CODELAB_READ_EVERY if quick else 6 * CODELAB_READ_EVERY
    per_trainer = {name: (steps or {}).get(name, n) for name in trainers}
    main = compare_training(train, config, trainers=trainers, steps=per_trainer, repeats=repeats)
    say("fit at two logging cadences")
    cadence_config = TrainConfig.codelab(
        steps=steps_per_epoch(len(train), 512) * (2 if quick else 10)
    )
    cadence = fit_cadence(Splits(train, test), cadence_config, repeats=repeats)
    say("precision policies")
    precision = precision_rows(
        train, config, precision_specs(jax.default_backend()), repeats=repeats
    )
    batch_sizes = (128, 512) if quick else (128, 512, 2048)
    say(f"batch sizes {batch_sizes}, the device's peaks and the step's bounds")
    by_batch = batch_rows(train, config, batch_sizes, examples=n * 512, repeats=repeats)
    peaks, bounds = step_bounds(batch_sizes, quick=quick)
    say("the main job: fit of the default recipe, without augmentation, the fused epoch")
    main_job = main_job_rows(Splits(train, test), epochs=1 if quick else 2, repeats=repeats)
    say("XLA's FLOP count")
    xla_flops = xla_flops_per_example(train, config)
    return BenchmarkReport(
        facts=facts,
        bf16_matmul_speedup=bf16_ceiling,
        flops_per_example=matmul_flops_per_example(),
        xla_flops_per_example=xla_flops,
        main=main,
        read_every=CODELAB_READ_EVERY,
        cadence=cadence,
        precision=precision,
        batch_sizes=list(zip(by_batch, bounds, strict=True)),
        peaks=peaks,
        main_job=main_job,
        skipped=list(skipped),
    )
