"""Members: many runs stacked on a leading axis and trained as one compiled program.

[`fit_members`][eqx_fmnist.ensemble.fit_members] is the engine;
[`fit_ensemble`][eqx_fmnist.ensemble.fit_ensemble] trains one member per seed.
"""

import dataclasses
import logging
import os
import time
from collections.abc import Sequence

import jax
import numpy as np

from ..config import TrainConfig
from ..data import FashionMNIST
from ..dataset import ArrayDataset
from ..evaluate import EvalResult, evaluate_ensemble
from ..model import MLP
from ..state import PER_MEMBER, TrainState, check_members, init_members, member, state_bytes
from ..train import Callback, History, Plan, check_finite, plan_run, prepare_data, run_chunks

logger = logging.getLogger(__name__)

MEMORY_FRACTION = 0.8
"""Members may use at most this fraction of the device's memory (see
[`check_memory`][eqx_fmnist.ensemble.check_memory])."""


def member_seeds(config: TrainConfig, seeds: int | Sequence[int]) -> tuple[int, ...]:
    """`seeds` as a tuple: a count `n` means `config.seed, ..., config.seed + n - 1`."""
    if isinstance(seeds, int) and not isinstance(seeds, bool):
        if seeds <= 0:
            raise ValueError(f"`seeds` must be a positive count or a list of seeds, got {seeds}.")
        return tuple(range(config.seed, config.seed + seeds))
    seeds = tuple(seeds)
    if not seeds or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        raise ValueError(f"`seeds` must be a positive count or a list of ints, got {seeds!r}.")
    if len(set(seeds)) < len(seeds):
        raise ValueError(f"`seeds` repeats a seed ({seeds}): repeated members are identical.")
    return seeds


def _device_memory(device: jax.Device) -> tuple[int, str]:
    stats = device.memory_stats() or {}
    if "bytes_limit" in stats:
        return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0)), "free"
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")  # XLA:CPU: host RAM
    return int(pages), "of host memory"


def check_memory(
    configs: Sequence[TrainConfig],
    num_train: int,
    *,
    data_bytes: int = 0,
    device: jax.Device | None = None,
) -> int:
    """Estimate the device memory the members need and raise before anything is
    allocated or compiled if it exceeds `MEMORY_FRACTION` of what the device has.

    The estimate counts, per member, four copies of the state (the state, its
    successor, the gradients and Adam's update) and the forward and backward
    activations of one batch; plus the data set once.

    **Returns:**

    The estimate in bytes.

    **Raises:**

    `ValueError` naming the estimate, the device and how many members would fit.
    """
    config = configs[0]
    per_member = 4 * state_bytes(config, num_train)
    per_member += 2 * 4 * config.batch_size * (784 + 3 * (sum(config.hidden_sizes) + 10))
    need = len(configs) * per_member + data_bytes
    device = device or jax.devices()[0]
    have, kind = _device_memory(device)
    if need > MEMORY_FRACTION * have:
        fits = max(0, int((MEMORY_FRACTION * have - data_bytes) // per_member))
        raise ValueError(
            f"{len(configs):,} members need about {need / 2**30:.1f} GiB on {device}, more "
            f"than {MEMORY_FRACTION:.0%} of its {have / 2**30:.1f} GiB {kind}; train at most "
            f"{fits:,} members at once (fewer seeds or grid points per call)."
        )
    return need


@dataclasses.dataclass
class EnsembleResult:
    """What [`fit_ensemble`][eqx_fmnist.ensemble.fit_ensemble] returns.

    **Fields:**

    - `state`: the members' final states, stacked on a leading axis.
    - `configs`: each member's config (they differ only in `seed` and the
        [`BATCHED`][eqx_fmnist.state.BATCHED] numbers).
    - `history`: `history[i]` is member `i`'s [`History`][eqx_fmnist.train.History].
    - `members`: each member's test [`EvalResult`][eqx_fmnist.evaluate.EvalResult]
        (empty when the test set was not evaluated, as in a sweep).
    - `ensemble`: the ensemble's test result (the mean of the members' probabilities),
        or `None` likewise.
    - `validation`, `validation_ensemble`: the same on the validation split, or
        `None` without one.
    - `compile_seconds`, `train_seconds`, `load_seconds`: as in
        [`TrainResult`][eqx_fmnist.train.TrainResult], for all members together.
    """

    state: TrainState
    configs: tuple[TrainConfig, ...]
    history: list[list[History]]
    members: list[EvalResult]
    ensemble: EvalResult | None
    validation: list[EvalResult] | None
    validation_ensemble: EvalResult | None
    compile_seconds: float
    train_seconds: float
    load_seconds: float

    @property
    def config(self) -> TrainConfig:
        """Member 0's config: the settings all members share."""
        return self.configs[0]

    def member_model(self, i: int) -> MLP:
        """Member `i`'s trained model."""
        return member(self.state, i).model

    @property
    def accuracy_mean(self) -> float:
        """Mean test accuracy of the members."""
        return float(np.mean([m.accuracy for m in self.members]))

    @property
    def accuracy_std(self) -> float:
        """Standard deviation (n - 1) of the members' test accuracies; 0 for one member."""
        accs = [m.accuracy for m in self.members]
        return float(np.std(accs, ddof=1)) if len(accs) > 1 else 0.0

    @property
    def examples_per_sec(self) -> float:
        """Model-examples per second over the run (members x examples), compile excluded."""
        steps = sum(h["steps"] for h in self.history[0]) if self.history else 0
        k = len(self.configs)
        return k * steps * self.config.batch_size / max(self.train_seconds, 1e-9)


def _interval_record(member_records: list[History], seconds: float) -> History:
    """The record callbacks see for all members: their means, and each member's own."""
    first = member_records[0]
    mean = {
        key: float(np.mean([r[key] for r in member_records]))
        for key in ("loss", "accuracy", "grad_norm", "valid_loss", "valid_accuracy")
        if key in first
    }
    return History(
        step=first["step"],
        epoch=first["epoch"],
        steps=first["steps"],
        skipped=sum(r["skipped"] for r in member_records),
        learning_rate=first["learning_rate"],
        seconds=seconds,
        examples_per_sec=len(member_records) * first["examples_per_sec"],
        members=[dict(r) for r in member_records],
        **mean,
    )


def fit_members(
    configs: Sequence[TrainConfig],
    data: FashionMNIST | tuple[ArrayDataset, ArrayDataset] | None = None,
    *,
    state: TrainState | None = None,
    callback: Callback | Sequence[Callback] | None = None,
    eval_batch_size: int = 1000,
    evaluate_test: bool = True,
) -> EnsembleResult:
    """Train one member per config in one compiled program; the engine of
    [`fit_ensemble`][eqx_fmnist.ensemble.fit_ensemble] and
    [`sweep`][eqx_fmnist.ensemble.sweep].

    **Arguments:**

    - `configs`: one per member; see [`check_members`][eqx_fmnist.state.check_members].
    - `data`: as for [`fit`][eqx_fmnist.train.fit].
    - `state`: stacked states to continue from (from a checkpoint of these members).
        Defaults to [`init_members`][eqx_fmnist.state.init_members]`(configs, ...)`.
    - `callback`: called as `callback(record, state)` after each interval, where
        `record` holds the members' means and, under `"members"`, each member's record.
    - `eval_batch_size`: batch size of the evaluations. Defaults to `1000`.
    - `evaluate_test`: evaluate every member and the ensemble on the test set at the
        end. Defaults to `True`.

    **Raises:**

    `ValueError` for configs that cannot share a program, members that would not fit
    in memory, or a state that is not a stack of `len(configs)` members;
    [`NonFiniteError`][eqx_fmnist.train.NonFiniteError] naming the member.
    """
    configs = tuple(configs)
    check_members(configs)
    start = time.perf_counter()
    train, valid, test = prepare_data(configs[0], data)
    data_bytes = sum(ds.images.nbytes + ds.labels.nbytes for ds in (train, valid, test) if ds)
    check_memory(configs, len(train), data_bytes=data_bytes)
    if state is None:
        state = init_members(configs, len(train))
    elif state.step.shape != (len(configs),):
        raise ValueError(
            f"`state` holds {state.step.shape[0] if state.step.ndim else 'one run, not'} "
            f"members, but {len(configs)} configs were given; pass the configs it was "
            "trained with (a checkpoint's `members`)."
        )
    state = jax.block_until_ready(state)
    load_seconds = time.perf_counter() - start
    plans: dict[float, Plan] = {}
    for c in configs:  # members differ in their learning rates at most
        if c.learning_rate not in plans:
            plans[c.learning_rate] = plan_run(c, len(train))
    plan = plans[configs[0].learning_rate]
    callbacks = [callback] if callable(callback) else list(callback or ())
    history: list[list[History]] = [[] for _ in configs]
    seconds = {"compile": 0.0, "train": 0.0}
    chunks = run_chunks(state, train, plan, seconds, members=True)
    for state, step, metrics, elapsed in chunks:  # noqa: B020  (the state moves on)
        records = []
        for i, c in enumerate(configs):
            mine = {name: values[i] for name, values in metrics.items()}
            if c.on_nonfinite == "raise":
                _check_member(mine, i, c, first_step=step - len(mine["loss"]) + 1)
            records.append(plans[c.learning_rate].record(step, mine, elapsed))
        if valid is not None:
            v, _ = evaluate_ensemble(
                state.model, valid, policy=configs[0].policy, batch_size=eval_batch_size
            )
            for r, m in zip(records, v, strict=True):
                r["valid_loss"], r["valid_accuracy"] = m.loss, m.accuracy
        for h, r in zip(history, records, strict=True):
            h.append(r)
        record = _interval_record(records, elapsed)
        logger.info("step %d/%d mean loss %.4f", step, plan.total_steps, record["loss"])
        for cb in callbacks:
            cb(record, state)
    evals = []
    for ds, wanted in ((test, evaluate_test), (valid, True)):
        if ds is None or not wanted:
            evals += [[], None] if ds is test else [None, None]
            continue
        evals += evaluate_ensemble(
            state.model, ds, policy=configs[0].policy, batch_size=eval_batch_size
        )
    return EnsembleResult(
        state, configs, history, *evals, seconds["compile"], seconds["train"], load_seconds
    )


def _check_member(metrics, i: int, config: TrainConfig, *, first_step: int) -> None:
    try:
        check_finite(metrics, first_step=first_step)
    except FloatingPointError as e:
        shown = ", ".join(f"{k}={getattr(config, k)}" for k in PER_MEMBER)
        e.args = (f"member {i} ({shown}): {e}",)
        raise


def fit_ensemble(
    config: TrainConfig = TrainConfig(),
    seeds: int | Sequence[int] = (0, 1, 2, 3, 4),
    data: FashionMNIST | tuple[ArrayDataset, ArrayDataset] | None = None,
    *,
    state: TrainState | None = None,
    callback: Callback | Sequence[Callback] | None = None,
    eval_batch_size: int = 1000,
) -> EnsembleResult:
    """Train one member per seed, all in one compiled program, and evaluate each member
    and their ensemble (the mean of their probabilities) on the whole test set.

    **Arguments:**

    - `config`: the run every member makes. Defaults to the recommended recipe.
    - `seeds`: the members' seeds, or how many (`n`: `config.seed` to
        `config.seed + n - 1`). Defaults to `(0, 1, 2, 3, 4)`.
    - `data`, `state`, `callback`, `eval_batch_size`: as for
        [`fit_members`][eqx_fmnist.ensemble.fit_members].

    **Returns:**

    An [`EnsembleResult`][eqx_fmnist.ensemble.EnsembleResult]. Member `i` is the run
    `fit(config.with_changes(seed=seeds[i]))` would have made: the same batches, and
    the same parameters up to the rounding of batched matrix products.

    !!! example

        ```python
        result = ef.fit_ensemble(ef.TrainConfig(), seeds=5)
        result.accuracy_mean, result.ensemble.accuracy
        ```
    """
    configs = [config.with_changes(seed=s) for s in member_seeds(config, seeds)]
    return fit_members(
        configs, data, state=state, callback=callback, eval_batch_size=eval_batch_size
    )


def _is_array(x) -> bool:
    return isinstance(x, jax.Array)


def select_members(state: TrainState, indices: Sequence[int]) -> TrainState:
    """The members `indices` of a stacked state, still stacked (e.g. a sweep's
    [`top_members`][eqx_fmnist.ensemble.sweep.SweepResult.top_members])."""
    index = np.asarray(indices)
    return jax.tree.map(lambda x: x[index] if _is_array(x) else x, state)
