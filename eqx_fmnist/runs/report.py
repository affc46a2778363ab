"""What a finished run folder reports: the summary's numbers and the TensorBoard writer."""

from pathlib import Path
from typing import Any

import numpy as np

from ..data import CLASS_NAMES
from ..ensemble import EnsembleResult
from ..evaluate import per_class_accuracy
from ..state import PER_MEMBER
from ..train import TrainResult

CHECKPOINT_NAME = "checkpoint.eqx"
TOKENS_PER_EXAMPLE = 16
"""Tokens per image of the summary's projected tokens/sec: 16 patches of 7 x 7 pixels."""


class RunError(Exception):
    """A run folder cannot be used as asked (in use, holding results, a bad option)."""


def summarise(result: TrainResult | EnsembleResult, cm: np.ndarray) -> dict[str, Any]:
    recall = np.asarray(per_class_accuracy(cm))
    ensemble = {}
    if isinstance(result, EnsembleResult):
        test, valid = result.ensemble, result.validation_ensemble
        ensemble = {
            "members": [
                {
                    **{k: getattr(c, k) for k in PER_MEMBER},
                    "test_accuracy": m.accuracy,
                    "test_loss": m.loss,
                }
                for c, m in zip(result.configs, result.members, strict=True)
            ],  # fmt: skip
            "member_accuracy_mean": result.accuracy_mean,
            "member_accuracy_std": result.accuracy_std,
        }
    else:
        test, valid = result.test, result.validation
    return {
        "test_loss": test.loss,
        "test_accuracy": test.accuracy,
        "test_count": test.count,
        "validation_accuracy": valid.accuracy if valid else None,
        **ensemble,
        "steps": int(result.state.step.reshape(-1)[0]),
        "examples_per_sec": result.examples_per_sec,
        "projected_tokens_per_sec": result.examples_per_sec * TOKENS_PER_EXAMPLE,
        "tokens_per_example": TOKENS_PER_EXAMPLE,
        "compile_seconds": result.compile_seconds,
        "train_seconds": result.train_seconds,
        "load_seconds": result.load_seconds,
        "per_class_accuracy": dict(zip(CLASS_NAMES, map(float, recall), strict=True)),
        "config": result.config.to_dict(),
        "checkpoint": CHECKPOINT_NAME,
    }


def tensorboard_writer(folder: Path):
    try:
        from tensorboardX import SummaryWriter
    except ImportError:
        raise RunError(
            "TensorBoard logging needs tensorboardX: pip install 'eqx_fmnist[tensorboard]'."
        ) from None
    return SummaryWriter(logdir=str(folder))
