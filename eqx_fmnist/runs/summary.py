"""What a finished run folder reports: the summary's numbers, the TensorBoard writer, the
names of the folder's checkpoint and teacher record, its history read back, and the
errors about run folders."""

import json
import os
import typing
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

CHECKPOINT_NAME = "checkpoint.eqx"
TEACHER_FILE = "teacher.json"
"""Where a distilled run's folder names its teacher, so that a resume finds it."""
TOKENS_PER_EXAMPLE = 16
"""Tokens per image of the summary's projected tokens/sec: 16 patches of 7 x 7 pixels."""


class RunError(Exception):
    """A run folder cannot be used as asked (in use, holding results, a bad option)."""


def summarise(
    result: TrainResult, cm: np.ndarray, calibration: Calibration | None = None
) -> dict[str, Any]:
    """The numbers of `summary.json`: test and validation results (an ensemble's, and
    each member's), throughput, per-class accuracy from the confusion matrix `cm`, the
    config, and the trust flag's settings with a `calibration`."""
    recall = np.asarray(per_class_accuracy(cm))
    test, valid, ensemble = result.test, result.validation, {}
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
        "examples_per_sec": result.examples_per_sec,
        "projected_tokens_per_sec": result.examples_per_sec * TOKENS_PER_EXAMPLE,
        "tokens_per_example": TOKENS_PER_EXAMPLE,
        "compile_seconds": result.compile_seconds,
        "train_seconds": result.train_seconds,
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


def _not_a_record(record: object) -> str | None:
    """Why `record` is not a history record, or `None`: a JSON object with a whole
    `step`, a `loss` and an `accuracy` (or `members`, a list of such records), whose
    other known fields are numbers; an older run's record may lack the others."""
    if not isinstance(record, dict) or type(record.get("step")) is not int:
        return "is not a history record (a JSON object with a whole `step`)"
    missing = [k for k in ("loss", "accuracy") if k not in record and "members" not in record]
    if missing:
        return f"has no `{missing[0]}`"
    for key, value in record.items():
        if key == "members":
            if not isinstance(value, list) or not value:
                return "has `members` that is not a list of records"
            why = next(filter(None, map(_not_a_record, value)), None)
            if why is not None:
                return f"has a member that {why}"
        elif key in History.__annotations__ and (
            isinstance(value, bool) or not isinstance(value, int | float)
        ):
            return f"has `{key}` {json.dumps(value)[:40]}, not a number"
    return None


def read_history(folder: str | os.PathLike) -> list[History]:
    """The records of `folder/history.jsonl` (none if it does not exist).

    **Raises:**

    `RunError` naming the file and line of a record that is not a JSON object with a
    whole `step` and numbers for its other fields.
    """
    path = Path(folder) / "history.jsonl"
    if not path.is_file():
        return []
    records: list[History] = []
    for i, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        why = _not_a_record(record)
        if why is not None:
            raise RunError(
                f"{path}, line {i}, {why}: delete the line, or the file to start the "
                "history afresh."
            )
        records.append(typing.cast(History, record))
    return records
