"""The test report of a trained model (one run or an ensemble): what a run folder
writes when training ends and what `eqx-fmnist evaluate` prints and draws again later,
computed and drawn in one place.

[`run_report`][eqx_fmnist.runs.report.run_report] runs the model once over the test
images (logits, confusion matrix, calibration metrics raw and scaled) and once over
them moved and mirrored (robustness); [`RunReport.figures`][eqx_fmnist.runs.report.RunReport.figures]
draws the confusion matrix, the reliability diagram and the robustness curve.
"""

import dataclasses
from typing import Any

import jax.numpy as jnp
import numpy as np
from matplotlib.figure import Figure

from ..calibration import Calibration, calibration_report
from ..dataset import ArrayDataset
from ..evaluation import Robustness, confusion_matrix, evaluate_robustness, predict_logits
from ..model import MLP
from ..plots import plot_confusion_matrix, plot_robustness
from ..precision import Policy


@dataclasses.dataclass(frozen=True)
class RunReport:
    """What a model does on the test images.

    **Fields:** `logits` (`(n, 10)` float32; an ensemble's log mean probabilities),
    `confusion` (the `10 x 10` confusion matrix, rows the true class),
    `calibration` (NLL, Brier score and ECE, `raw` and, for a calibrated run,
    `calibrated`), `robustness` (accuracy on the images moved and mirrored), and the
    reliability diagram, drawn with the metrics.
    """

    logits: np.ndarray
    confusion: np.ndarray
    calibration: dict[str, Any]
    robustness: Robustness
    reliability: Figure

    @property
    def predictions(self) -> np.ndarray:
        """The predicted class of every test image."""
        return self.logits.argmax(axis=-1)

    def figures(self) -> dict[str, Figure]:
        """`{file name: figure}`: `confusion_matrix.png`, `reliability.png` and
        `robustness.png`."""
        robust = self.robustness
        return {
            "confusion_matrix.png": plot_confusion_matrix(self.confusion),
            "reliability.png": self.reliability,
            "robustness.png": plot_robustness(
                (0, *robust.shifted), (robust.clean, *robust.shifted.values()),
                mirrored=robust.mirrored,
            ),
        }  # fmt: skip


def run_report(
    model: MLP,
    policy: Policy,
    images: np.ndarray,
    labels: np.ndarray,
    calibration: Calibration | None = None,
) -> RunReport:
    """The [`RunReport`][eqx_fmnist.runs.report.RunReport] of `model` (or a stack of
    members) on `uint8` test images `(n, 784)` and their labels, with the run's
    `calibration` if it has one."""
    x = jnp.asarray(np.asarray(images).reshape(len(images), -1))
    logits = np.asarray(predict_logits(model, x, policy=policy), np.float32)
    cm = np.asarray(confusion_matrix(labels, logits.argmax(axis=-1)))
    summary, reliability = calibration_report(logits, labels, calibration)
    robust = evaluate_robustness(model, ArrayDataset(x, jnp.asarray(labels)), policy=policy)
    return RunReport(logits, cm, summary, robust, reliability)

