"""A run's logging intervals: the plan (how long, where the intervals end), the record
of each ([`History`][eqx_fmnist.intervals.History]: one run's, or the members' means with
each member's), the check that a chunk's numbers are finite, and the callbacks' type.
[`fit`][eqx_fmnist.train.fit] uses them once per interval, on the host.
"""

import dataclasses
import os
import resource
import typing
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import NotRequired, TypedDict

import jax
import numpy as np

from .config import MAX_STEPS, STEP_COUNTER, TrainConfig
from .dataset import steps_per_epoch
from .state import PER_MEMBER, TrainState, state_bytes


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
    """The learning rate of the interval's last step, as the step used it."""
    seconds: float
    """Wall seconds from the previous interval's host read to this one's (the first:
    from its compiled call): the pace at which the run's chunks finish."""
    examples_per_sec: float
    """Training examples per second over the interval (members x examples for a stack)."""
    valid_loss: NotRequired[float]
    """Validation loss at the interval's end, when a validation split is given."""
    valid_accuracy: NotRequired[float]
    """Validation accuracy at the interval's end, likewise."""
    members: NotRequired[list[dict]]
    """Each member's own record, when many members train as one program (the other
    fields are then their means, their sum for `skipped`)."""


Callback = Callable[[History, TrainState], None]
"""`callback(record, state)`, called after each logging interval. It may add keys to
`record` (later callbacks and the history see them); `state` is the state at the
interval's end, while the next interval already trains on the device."""

_MEANS = ("loss", "accuracy", "grad_norm", "learning_rate", "valid_loss", "valid_accuracy")
_STEP_METRICS = ("loss", "accuracy", "grad_norm", "skipped", "learning_rate")
"""What every step reports; a loss of your own's other `aux` scalars are recorded as their
means over the interval, under their own names."""


@dataclasses.dataclass(frozen=True)
class Plan:
    """What a run will do, computed once: its length and its intervals.

    Intervals end on multiples of `interval` (and at `total_steps`), so a resumed run
    logs at the same steps as one that never stopped.
    """

    total_steps: int
    steps_per_epoch: int
    interval: int
    batch_size: int

    def chunks(self, start: int = 0) -> Iterator[int]:
        """The sizes of the compiled chunks from global step `start` to the end."""
        step = start
        while step < self.total_steps:
            k = min(self.interval - step % self.interval, self.total_steps - step)
            yield k
            step += k

    def intervals(self, start: int = 0) -> int:
        """How many logging intervals (compiled calls) remain from step `start`, counted
        without listing them."""
        if start >= self.total_steps:
            return 0
        return -(-self.total_steps // self.interval) - start // self.interval

    def lengths(self, start: int = 0) -> list[int]:
        """The distinct chunk lengths from step `start`, in the order they first come
        (at most three: the rest of the first interval, whole intervals, the last one's
        remainder), found without listing every interval."""
        firsts = [start, start + self.interval - start % self.interval]
        firsts.append(max(firsts[1], self.total_steps - self.total_steps % self.interval))
        seen = [next(self.chunks(s)) for s in firsts if s < self.total_steps]
        return list(dict.fromkeys(seen))

    def records(self, step: int, metrics: dict[str, np.ndarray], seconds: float) -> list[History]:
        """One record per member (one for a single run) of the interval that ended at
        global step `step`; `metrics` have shape `(members, steps)`."""
        k = metrics["loss"].shape[-1]
        rows = [
            History(
                step=step,
                epoch=step / self.steps_per_epoch,
                steps=k,
                loss=float(np.mean(metrics["loss"][i])),
                accuracy=float(np.mean(metrics["accuracy"][i])),
                grad_norm=float(np.mean(metrics["grad_norm"][i])),
                skipped=int(np.sum(metrics["skipped"][i])),
                learning_rate=float(metrics["learning_rate"][i][-1]),
                seconds=seconds,
                examples_per_sec=k * self.batch_size / seconds,
            )
            for i in range(len(metrics["loss"]))
        ]
        for i, row in enumerate(rows):  # a loss's own aux scalars, under their own names
            own = {m: float(np.mean(metrics[m][i])) for m in metrics if m not in _STEP_METRICS}
            typing.cast(dict, row).update(own)
        return rows


MEMORY_FRACTION = 0.8
"""Members may use at most this fraction of the device's memory (see
[`check_memory`][eqx_fmnist.intervals.check_memory])."""


def _device_memory(device: jax.Device) -> tuple[int, str]:  # pyright: ignore[reportInvalidTypeForm]
    stats = device.memory_stats() or {}
    if "bytes_limit" in stats:
        return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0)), "free"
    return process_memory()  # XLA:CPU: what this process may use of the host's


CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")
"""Where a container's memory limit is read (cgroup v2, then v1)."""


def process_memory() -> tuple[int, str]:
    """The memory this process may use, and what bounds it: the least of the host's RAM,
    its cgroup's limit (a container's) and its address-space limit (`RLIMIT_AS`, as
    `ulimit -v` sets it); a run past it is killed, or fails deep in XLA, instead of
    being refused."""
    limits = [(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "of host memory")]
    for path in CGROUP_LIMITS:
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            limits.append((int(text), "its cgroup allows"))
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        limits.append((soft, "its address-space limit (RLIMIT_AS) allows"))
    have, kind = min(limits)
    return int(have), kind


def check_memory(
    configs: Sequence[TrainConfig],
    num_train: int,
    *,
    data_bytes: int = 0,
    device: jax.Device | None = None,  # pyright: ignore[reportInvalidTypeForm]
) -> int:
    """Estimate the device memory the members need and raise before anything is
    allocated or compiled if it exceeds `MEMORY_FRACTION` of what the device has.

    The estimate counts, per member, four copies of the state (the state, its
    successor, the gradients and Adam's update) and the forward and backward
    activations of one batch; plus the data set once. Members split over devices
    (`devices > 1`) count on each device only its own.

    **Returns:**

    The estimate in bytes.

    **Raises:**

    `ValueError` naming the estimate, the device and how many members would fit.
    """
    config = configs[0]
    per_member = 4 * state_bytes(config, num_train)
    per_member += 2 * 4 * config.batch_size * (784 + 3 * (sum(config.hidden_sizes) + 10))
    spread = len(configs) > 1 and config.devices > 1
    on_each = len(configs) // config.devices if spread else len(configs)
    need = on_each * per_member + data_bytes
    device = device or jax.local_devices()[0]
    have, kind = _device_memory(device)
    if need > MEMORY_FRACTION * have:
        fits = max(0, int((MEMORY_FRACTION * have - data_bytes) // per_member))
        if len(configs) == 1:
            raise ValueError(
                f"the model needs about {need / 2**30:.1f} GiB on {device}, more than "
                f"{MEMORY_FRACTION:.0%} of its {have / 2**30:.1f} GiB {kind}; make it smaller "
                "(hidden_sizes, batch_size)."
            )
        each = f" ({on_each:,} on each of {config.devices} devices)" if spread else ""
        raise ValueError(
            f"{len(configs):,} members{each} need about {need / 2**30:.1f} GiB on {device}, "
            f"more than {MEMORY_FRACTION:.0%} of its {have / 2**30:.1f} GiB {kind}; train at "
            f"most {fits:,} members on a device (fewer seeds or grid points per call)."
        )
    return need


def plan_run(configs: Sequence[TrainConfig], num_train: int) -> Plan:
    """The [`Plan`][eqx_fmnist.intervals.Plan] of a run's `configs` (one, or its members',
    which share their length and batch) on `num_train` training examples, once they
    are known to fit in the device's memory
    ([`check_memory`][eqx_fmnist.intervals.check_memory]).

    **Raises:**

    `ValueError` from `check_memory`, for more steps than
    [`MAX_STEPS`][eqx_fmnist.config.MAX_STEPS], or for float16 products on a TPU (it has
    no float16 multiplier: its matmuls round float16 operands to bfloat16): before
    anything is allocated or compiled.
    """
    if jax.default_backend() == "tpu" and any(c.policy.compute_dtype == "float16" for c in configs):
        raise ValueError(
            f"precision {configs[0].precision} (float16 products): a TPU has no float16 multiplier (it rounds float16 operands "
            "to bfloat16), so the run would not be what it says: use c=bf16 there."
        )
    check_memory(configs, num_train)
    config = configs[0]
    spe = steps_per_epoch(num_train, config.batch_size)
    total = config.total_steps(num_train)
    if total > MAX_STEPS:
        raise ValueError(
            f"{config.epochs:,} epochs of {spe:,} steps are {total:,} steps, more than "
            f"{MAX_STEPS:,} ({STEP_COUNTER}): train fewer epochs."
        )
    return Plan(
        total_steps=total,
        steps_per_epoch=spe,
        interval=config.log_every or spe,
        batch_size=config.batch_size,
    )


def interval_record(records: list[History]) -> History:
    """The record of an interval: one run's own, or the members' means with each
    member's record under `members`."""
    if len(records) == 1:
        return records[0]
    first = records[0]
    rows = [typing.cast(dict[str, float], r) for r in records]
    extra = [k for k in first if k not in History.__annotations__]  # a loss's own aux
    means = {k: float(np.mean([r[k] for r in rows])) for k in (*_MEANS, *extra) if k in first}
    totals = {
        "skipped": sum(r["skipped"] for r in records),
        "examples_per_sec": len(records) * first["examples_per_sec"],
        "members": [dict(r) for r in records],
    }
    return History(**{**first, **means, **totals})


def check_finite(
    metrics: dict[str, np.ndarray], *, first_step: int, configs: Sequence[TrainConfig]
) -> None:
    """Raise [`NonFiniteError`][eqx_fmnist.intervals.NonFiniteError] for the first step whose
    loss or (unskipped) gradient is NaN or infinite, naming the member when there are
    several. Skipped steps were not applied, so they are not errors, unless the
    interval's last loss is not finite: then the parameters themselves give it and no
    later step could be taken. `metrics` have shape `(members, steps)`."""
    for i, config in enumerate(configs):
        who = ""
        if len(configs) > 1:
            who = f"member {i} ({', '.join(f'{k}={getattr(config, k)}' for k in PER_MEMBER)}): "
        loss = metrics["loss"][i]
        grad = metrics["grad_norm"][i]
        skipped = metrics["skipped"][i]
        if config.on_nonfinite != "raise":
            if not np.isfinite(loss[-1]):  # the parameters themselves give it: no way back
                last = first_step + len(loss) - 1
                raise NonFiniteError(
                    f"{who}step {last}: the loss is {loss[-1]} with on_nonfinite='skip': the "
                    "parameters themselves now give a non-finite loss, so every later step "
                    "would be skipped. Lower the learning rate or clip gradients (grad_clip).",
                    step=last,
                    metric="loss",
                )
            continue
        bad_loss = ~np.isfinite(loss)
        bad_grad = ~np.isfinite(grad) & ~skipped
        bad = bad_loss | bad_grad
        if not bad.any():
            continue
        j = int(np.argmax(bad))
        metric = "loss" if bad_loss[j] else "gradient norm"
        value = loss[j] if bad_loss[j] else grad[j]
        raise NonFiniteError(
            f"{who}step {first_step + j}: the {metric} is {value}; training stopped before "
            "this interval was reported or saved. Lower the learning rate, clip gradients "
            "(grad_clip), or pass on_nonfinite='skip' to skip such steps.",
            step=first_step + j,
            metric=metric,
        )
