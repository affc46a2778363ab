"""What a finished run folder reports: the summary's numbers (from the run, or from its
history for a run resumed at its end) and the TensorBoard writer."""

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from ..calibration import Calibration
from ..data import CLASS_NAMES
from ..evaluation import per_class_accuracy
from ..intervals import History
from ..state import PER_MEMBER
from ..train import TrainResult
from .layout import CHECKPOINT_NAME, RunError

TOKENS_PER_EXAMPLE = 16
"""Tokens per image of the summary's projected tokens/sec: 16 patches of 7 x 7 pixels."""


def summarise(
    result: TrainResult,
    cm: np.ndarray,
    calibration: Calibration | None = None,
    history: Sequence[History] = (),
) -> dict[str, Any]:
    """The numbers of `summary.json`: test and validation results (an ensemble's, and
    each member's), throughput, per-class accuracy from the confusion matrix `cm`, the
    config, and the trust flag's settings with a `calibration`. A run that trained
    nothing in this process (resumed at its end) takes its throughput from its folder's
    `history`."""
    recall = np.asarray(per_class_accuracy(cm))
    eps = result.examples_per_sec
    seconds = result.train_seconds
    if not result.history and history:
        eps, seconds = _throughput(history)
    test = result.test
    valid = result.validation
    ensemble = {}
    assert test is not None, "a run folder's run is evaluated on the test split"
    if test.members:
        ensemble = {
            "members": [
                {
                    **{k: getattr(c, k) for k in PER_MEMBER},
                    "test_accuracy": m.accuracy,
                    "test_loss": m.loss,
                }
                for c, m in zip(result.configs, test.members, strict=True)
            ],
            "member_accuracy_mean": test.accuracy_mean,
            "member_accuracy_std": test.accuracy_std,
        }
    return {
        "test_loss": test.loss,
        "test_accuracy": test.accuracy,
        "test_count": test.count,
        "validation_accuracy": valid.accuracy if valid else None,
        **ensemble,
        "steps": result.state.global_step,
        "examples_per_sec": eps,
        "projected_tokens_per_sec": eps * TOKENS_PER_EXAMPLE,
        "tokens_per_example": TOKENS_PER_EXAMPLE,
        "compile_seconds": result.compile_seconds,
        "train_seconds": seconds,
        "load_seconds": result.seconds["load"],
        # What the matmuls multiplied in, where they ran: "float32 (highest)" on a TPU
        # is float32 products, not JAX's default bfloat16 passes.
        "matmul_products": result.policy.products,
        "device": _device(),
        "per_class_accuracy": dict(zip(CLASS_NAMES, map(float, recall), strict=True)),
        "config": result.config.to_dict(),
        "checkpoint": CHECKPOINT_NAME,
        **({} if calibration is None else {"trust": calibration.to_dict()}),
    }


def _throughput(history: Sequence[History]) -> tuple[float, float]:
    """`(examples/sec, seconds)` of the training a folder's history records (its
    intervals with a finite time and rate: a record of an earlier version may lack them)."""
    timed = [
        (float(h["examples_per_sec"]), float(h["seconds"]))
        for h in history
        if all(isinstance(h.get(k), int | float) for k in ("examples_per_sec", "seconds"))
    ]
    timed = [(rate, t) for rate, t in timed if math.isfinite(rate * t) and t > 0]
    seconds = sum(t for _, t in timed)
    return (sum(rate * t for rate, t in timed) / seconds if seconds else 0.0), seconds


def _device() -> str:
    """The device the run trained on, as JAX names its kind: `"cpu"`, `"TPU v5 lite"`."""
    device = jax.devices()[0]
    return device.device_kind if device.platform != "cpu" else "cpu"


def tensorboard_writer(folder: Path):
    try:
        from tensorboardX import SummaryWriter
    except ImportError:
        raise RunError(
            "TensorBoard logging needs tensorboardX: pip install 'eqx_fmnist[tensorboard]'."
        ) from None
    return SummaryWriter(logdir=str(folder))


TIME_SPLIT = (
    "load",
    "compile",
    "steps",
    "host_reads",
    "validation",
    "logging",
    "checkpoints",
    "test",
    "report",
    "figures",
)
"""The parts of a run folder's wall time that `summary.json`'s `seconds` record, in the
order they happen (see [`time_split`][eqx_fmnist.runs.summary.time_split])."""


def time_split(
    fit_seconds: dict[str, float],
    checkpoints_during: float,
    checkpoints: float,
    report: float,
    figures: float,
) -> dict[str, float]:
    """Where a run's wall time went, for `summary.json`: `fit`'s own split
    ([`TrainResult.seconds`][eqx_fmnist.train.TrainResult]) with its callbacks' time cut
    into `checkpoints` (every checkpoint written, the last one included) and `logging`
    (the rest of the callbacks: history lines, the progress bar, TensorBoard), `fit`'s
    `test` (for a run folder, the report's program: the model on the test images as
    they are, mirrored and moved, waited for and read), then the test `report` (what is
    counted from those logits on the host, and the calibration saved) and the
    `figures`, each rounded to milliseconds.

    **Arguments:**

    - `fit_seconds`: `fit`'s split.
    - `checkpoints_during`: seconds of checkpoints written by the callbacks, while
        training (part of `fit`'s `callbacks`).
    - `checkpoints`: seconds of all checkpoints, the final one included.
    - `report`, `figures`: seconds of the test report and of drawing the figures.
    """
    parts = {
        **{k: fit_seconds[k] for k in ("load", "compile", "steps", "host_reads", "validation")},
        "logging": max(fit_seconds["callbacks"] - checkpoints_during, 0.0),
        "checkpoints": checkpoints,
        "test": fit_seconds["test"],
        "report": report,
        "figures": figures,
    }
    return {k: round(parts[k], 3) for k in TIME_SPLIT}
