"""`fit`: a thin loop over compiled chunks that reports through callbacks.

`fit` computes the run's plan once ([`plan_run`][eqx_fmnist.train.plan_run]: total
steps, interval ends, the learning rate of every step), runs one compiled chunk per
logging interval ([`compile_steps`][eqx_fmnist.step.compile_steps]), reads its metrics
once, appends a [`History`][eqx_fmnist.train.History] record and calls the callbacks.
Loading files, checkpoint cadence and run folders are the caller's
([`eqx_fmnist.runs`](runs.md), the command line).
"""

import dataclasses
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import NotRequired, TypedDict

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from .calibration import Calibration, dataset_logits, fit_temperature, fit_trust
from .config import CALIBRATION_SEED, VALIDATION_SEED, TrainConfig, make_schedule, optax_promotion
from .data import FashionMNIST, load_fashion_mnist
from .dataset import ArrayDataset, steps_per_epoch, to_datasets
from .evaluate import EvalResult, evaluate
from .model import MLP
from .parallel import check_divisible, make_mesh, replicate, to_local
from .state import TrainState, init_state
from .step import compile_steps

logger = logging.getLogger(__name__)


class NonFiniteError(FloatingPointError):
    """Training produced a NaN or infinite loss or gradient.

    `step` is the first bad step (1-based, as in the history) and `metric` the metric
    that was not finite. The state of the last completed interval before it is the last
    good one.
    """

    def __init__(self, message: str, *, step: int, metric: str):
        super().__init__(message)
        self.step = step
        self.metric = metric


class History(TypedDict):
    """One logging interval of a run, as [`fit`][eqx_fmnist.train.fit] records it."""

    step: int
    """The global step at the interval's end (1-based count of steps done)."""
    epoch: float
    """`step / steps_per_epoch`."""
    steps: int
    """Steps in the interval."""
    loss: float
    """Mean training objective over the interval's steps (label-smoothed if smoothing)."""
    accuracy: float
    """Mean training-batch accuracy over the interval."""
    grad_norm: float
    """Mean global gradient norm over the interval."""
    skipped: int
    """Steps not applied (float16 overflow, or `on_nonfinite="skip"`)."""
    learning_rate: float
    """The learning rate of the interval's last step."""
    seconds: float
    """Wall seconds of the interval's compiled call and its one host read."""
    examples_per_sec: float
    """Training examples per second over the interval."""
    valid_loss: NotRequired[float]
    """Validation loss at the interval's end, when a validation split is held out."""
    valid_accuracy: NotRequired[float]
    """Validation accuracy at the interval's end, likewise."""
    members: NotRequired[list[dict]]
    """Each member's own record, when many members train as one program (the other
    fields are then their means, their sum for `skipped`, and model-examples/sec)."""


Callback = Callable[[History, TrainState], None]
"""`callback(record, state)`, called after each logging interval. It may add keys to
`record` (later callbacks and the history see them); `state` is valid until the next
interval starts (its buffers are then donated)."""


@dataclasses.dataclass(frozen=True)
class Plan:
    """What a run will do, computed once: its length, its intervals, its learning rates.

    Intervals end on multiples of `interval` (and at `total_steps`), so a resumed run
    logs at the same steps as one that never stopped.
    """

    total_steps: int
    steps_per_epoch: int
    interval: int
    batch_size: int
    learning_rates: np.ndarray

    def chunks(self, start: int) -> Iterator[int]:
        """The sizes of the compiled chunks from global step `start` to the end."""
        step = start
        while step < self.total_steps:
            k = min(self.interval - step % self.interval, self.total_steps - step)
            yield k
            step += k

    def record(self, step: int, metrics: dict[str, np.ndarray], seconds: float) -> History:
        """The history record of the interval that ended at global step `step`."""
        k = len(metrics["loss"])
        return History(
            step=step,
            epoch=step / self.steps_per_epoch,
            steps=k,
            loss=float(np.mean(metrics["loss"])),
            accuracy=float(np.mean(metrics["accuracy"])),
            grad_norm=float(np.mean(metrics["grad_norm"])),
            skipped=int(np.sum(metrics["skipped"])),
            learning_rate=float(self.learning_rates[step - 1]),
            seconds=seconds,
            examples_per_sec=k * self.batch_size / seconds,
        )


def plan_run(config: TrainConfig, num_train: int) -> Plan:
    """The [`Plan`][eqx_fmnist.train.Plan] of `config` on `num_train` training examples."""
    total = config.total_steps(num_train)
    spe = steps_per_epoch(num_train, config.batch_size)
    with optax_promotion():
        schedule = jax.jit(jax.vmap(make_schedule(config, total)))
        rates = np.asarray(schedule(jnp.arange(max(total, 1))))
    return Plan(
        total_steps=total,
        steps_per_epoch=spe,
        interval=config.log_every or spe,
        batch_size=config.batch_size,
        learning_rates=rates,
    )


@dataclasses.dataclass
class TrainResult:
    """What [`fit`][eqx_fmnist.train.fit] returns.

    **Fields:**

    - `state`: the final [`TrainState`][eqx_fmnist.state.TrainState].
    - `config`: the run's config.
    - `history`: one [`History`][eqx_fmnist.train.History] record per logging interval.
    - `test`: [`EvalResult`][eqx_fmnist.evaluate.EvalResult] on all test images.
    - `validation`: the same on the held-out validation set, or `None`.
    - `compile_seconds`: time spent compiling the training calls.
    - `train_seconds`: time spent running them.
    - `load_seconds`: time spent moving data to the device and building the state.
    - `calibration`: with a `calibration_size`, the
        [`Calibration`][eqx_fmnist.calibration.Calibration] (temperature and trust flag)
        fitted on the held-out images after training; otherwise `None`.
    """

    state: TrainState
    config: TrainConfig
    history: list[History]
    test: EvalResult
    validation: EvalResult | None
    compile_seconds: float
    train_seconds: float
    load_seconds: float
    calibration: Calibration | None = None

    @property
    def model(self) -> MLP:
        """The trained model."""
        return self.state.model

    @property
    def examples_per_sec(self) -> float:
        """Training throughput over the whole run, compile excluded."""
        steps = sum(h["steps"] for h in self.history)
        return steps * self.config.batch_size / max(self.train_seconds, 1e-9)


def check_finite(metrics: dict[str, np.ndarray], *, first_step: int) -> None:
    """Raise [`NonFiniteError`][eqx_fmnist.train.NonFiniteError] for the first step whose
    loss or (unskipped) gradient is NaN or infinite. Skipped steps were not applied, so
    they are not errors."""
    bad_loss = ~np.isfinite(metrics["loss"])
    bad_grad = ~np.isfinite(metrics["grad_norm"]) & ~metrics["skipped"]
    bad = bad_loss | bad_grad
    if bad.any():
        i = int(np.argmax(bad))
        metric = "loss" if bad_loss[i] else "gradient norm"
        value = metrics["loss"][i] if bad_loss[i] else metrics["grad_norm"][i]
        raise NonFiniteError(
            f"step {first_step + i}: the {metric} is {value}; training stopped before this "
            "interval was reported or saved. Lower the learning rate, clip gradients "
            "(grad_clip), or pass on_nonfinite='skip' to skip such steps.",
            step=first_step + i,
            metric=metric,
        )


def validate_every_interval(
    valid: ArrayDataset, *, batch_size: int = 1000, mesh: jax.sharding.Mesh | None = None
) -> Callback:
    """A callback that evaluates on `valid` after each interval and adds `valid_loss`
    and `valid_accuracy` to the record."""

    def callback(record: History, state: TrainState) -> None:
        v = evaluate(state.model, valid, policy=state.policy, batch_size=batch_size, mesh=mesh)
        record["valid_loss"], record["valid_accuracy"] = v.loss, v.accuracy

    return callback


def prepare_data(
    config: TrainConfig, data: FashionMNIST | tuple[ArrayDataset, ArrayDataset] | None
) -> tuple[ArrayDataset, ArrayDataset | None, ArrayDataset]:
    """`(train, valid, test)` on the device: `data` (loaded when `None`), with the
    config's validation split held out of the training set."""
    if data is None:
        data = load_fashion_mnist()
    train, test = to_datasets(data) if isinstance(data, FashionMNIST) else data
    valid = None
    if config.validation_size:
        train, valid = train.split(config.validation_size, key=jr.PRNGKey(VALIDATION_SEED))
    return train, valid, test


def calibration_split(
    config: TrainConfig, train: ArrayDataset
) -> tuple[ArrayDataset, ArrayDataset]:
    """`(train, held_out)`: the config's calibration split of a training set (from which
    any validation split is already out)."""
    return train.split(config.calibration_size, key=jr.PRNGKey(CALIBRATION_SEED))


def calibrate(
    state: TrainState, train: ArrayDataset, held_out: ArrayDataset, *, batch_size: int = 1000
) -> Calibration:
    """Fit the temperature (on `held_out`) and the trust flag (means and covariance on
    `train`, threshold on `held_out`) of a trained `state`."""
    model = to_local(state.model)
    logits, labels, mask = dataset_logits(
        model, held_out, policy=state.policy, batch_size=batch_size
    )
    temperature = fit_temperature(logits, labels, mask)
    trust = fit_trust(model, train, held_out, policy=state.policy)
    return Calibration(temperature, trust, len(held_out))


def _place(config: TrainConfig, trees):
    """`(mesh, trees)`: the trees replicated over the config's devices (and processes),
    or left where they are on one device; returned once they are in place."""
    mesh = None
    if config.devices > 1 or jax.process_count() > 1:
        mesh = make_mesh(config.devices)
        check_divisible(config.batch_size, mesh)
        trees = replicate(trees, mesh)
    return mesh, jax.block_until_ready(trees)


def run_chunks(
    state: TrainState,
    train: ArrayDataset,
    plan: Plan,
    seconds: dict[str, float],
    *,
    mesh: jax.sharding.Mesh | None = None,
    members: bool = False,
) -> Iterator[tuple[TrainState, int, dict[str, np.ndarray], float]]:
    """The loop of [`fit`][eqx_fmnist.train.fit] and
    [`fit_ensemble`][eqx_fmnist.ensemble.fit_ensemble]: run the plan's chunks from
    the state's step, one compiled call and one host read each.

    Yields `(state, step, metrics, seconds)` after each chunk: the new state (valid
    until the next chunk runs: its buffers are then donated), the global step reached,
    the chunk's metrics as numpy, and the wall seconds of the call and its read. Each
    distinct chunk length is compiled ahead of time, once; `seconds["compile"]` and
    `seconds["train"]` accumulate the two.

    **Raises:**

    `ValueError` for a state past the plan's end.
    """
    step = int(state.step.reshape(-1)[0])
    if step > plan.total_steps:
        raise ValueError(
            f"the state is at step {step}, past this config's {plan.total_steps} steps."
        )
    compiled = {}
    for k in plan.chunks(step):
        if k not in compiled:  # compiled ahead of time, so compiling is timed on its own
            t = time.perf_counter()
            compiled[k] = compile_steps(
                state, train, batch_size=plan.batch_size, num_steps=k, mesh=mesh, members=members
            )
            seconds["compile"] += time.perf_counter() - t
        t = time.perf_counter()
        state, metrics = compiled[k](state)
        metrics = jax.device_get(metrics)  # the one host sync of the interval
        seconds["train"] += (elapsed := time.perf_counter() - t)
        step += k
        yield state, step, metrics, elapsed


def fit(
    config: TrainConfig = TrainConfig(),
    data: FashionMNIST | tuple[ArrayDataset, ArrayDataset] | None = None,
    *,
    state: TrainState | None = None,
    callback: Callback | Sequence[Callback] | None = None,
    eval_batch_size: int = 1000,
) -> TrainResult:
    """Train the MLP with the fast path and evaluate it on the whole test set.

    **Arguments:**

    - `config`: the run. Defaults to the recommended recipe.
    - `data`: a [`FashionMNIST`][eqx_fmnist.data.FashionMNIST] or `(train, test)`
        [`ArrayDataset`][eqx_fmnist.dataset.ArrayDataset]s. Defaults to
        `load_fashion_mnist()`.
    - `state`: a state to continue from, e.g. from
        [`load_checkpoint`][eqx_fmnist.checkpoint.load_checkpoint]; training resumes
        at `state.step` and stops at the config's total steps. Its buffers are donated.
        Defaults to a fresh [`init_state`][eqx_fmnist.state.init_state].
    - `callback`: one or more [`Callback`][eqx_fmnist.train.Callback]s, called as
        `callback(record, state)` after each logging interval, e.g. to draw a progress
        bar or keep a run folder. With a validation split, a
        [`validate_every_interval`][eqx_fmnist.train.validate_every_interval] callback
        runs first. Defaults to `None`: none.
    - `eval_batch_size`: batch size of the evaluations. Defaults to `1000`.

    **Returns:**

    A [`TrainResult`][eqx_fmnist.train.TrainResult].

    **Raises:**

    [`NonFiniteError`][eqx_fmnist.train.NonFiniteError] (with `on_nonfinite="raise"`),
    before the bad interval is recorded; `ValueError` for a `state` past the run's end.

    !!! example

        ```python
        import eqx_fmnist as ef

        result = ef.fit(ef.TrainConfig(epochs=5))
        result.test.accuracy  # 0.88 here, on all 10,000 test images
        ```
    """
    start = time.perf_counter()
    train, valid, test = prepare_data(config, data)
    held_out = None
    if config.calibration_size:
        train, held_out = calibration_split(config, train)
    state = init_state(config, len(train)) if state is None else state
    mesh, (train, valid, test, held_out, state) = _place(
        config, (train, valid, test, held_out, state)
    )
    load_seconds = time.perf_counter() - start
    plan = plan_run(config, len(train))
    callbacks = [callback] if callable(callback) else list(callback or ())
    if valid is not None:
        callbacks.insert(0, validate_every_interval(valid, batch_size=eval_batch_size, mesh=mesh))
    history, seconds = [], {"compile": 0.0, "train": 0.0}
    chunks = run_chunks(state, train, plan, seconds, mesh=mesh)
    for state, step, metrics, elapsed in chunks:  # noqa: B020  (the state moves on)
        if config.on_nonfinite == "raise":
            check_finite(metrics, first_step=step - len(metrics["loss"]) + 1)
        history.append(record := plan.record(step, metrics, elapsed))
        logger.info("step %d/%d loss %.4f", step, plan.total_steps, record["loss"])
        for cb in callbacks:
            cb(record, state)
    evals = [
        None
        if ds is None
        else evaluate(state.model, ds, policy=state.policy, batch_size=eval_batch_size, mesh=mesh)
        for ds in (test, valid)
    ]
    calibration = None
    if held_out is not None:
        calibration = calibrate(state, train, held_out, batch_size=eval_batch_size)
    return TrainResult(
        state, config, history, *evals, seconds["compile"], seconds["train"], load_seconds,
        calibration,
    )  # fmt: skip
