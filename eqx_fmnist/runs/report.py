"""The test report of a trained model (one run or an ensemble): what a run folder
writes when training ends and what `eqx-fmnist evaluate` prints and draws again later,
computed and drawn in one place.

[`report_program`][eqx_fmnist.runs.report.report_program] is the report's program as
[`fit`][eqx_fmnist.train.fit] takes it (a [`TestProgram`][eqx_fmnist.hooks.TestProgram]):
the model once over the test images as they are, mirrored and moved, in one compiled
program that also scores the test loss and accuracy.
[`run_report`][eqx_fmnist.runs.report.run_report] counts the rest from those logits
(confusion matrix, calibration metrics raw and scaled, prediction sets, robustness);
[`RunReport.figures`][eqx_fmnist.runs.report.RunReport.figures] draws the confusion
matrix, the reliability diagram and the robustness curve.
"""

import dataclasses
import os
import time
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import numpy as np
from jaxtyping import Array, Integer, UInt8
from matplotlib.figure import Figure

from ..answers import calibrated
from ..augment import Move
from ..calibration import Calibration, CalibrationResult, calibration_report
from ..conformal import SetReport, set_report
from ..dataset import ArrayDataset
from ..evaluation import EvalResult, confusion_matrix, dataset_scores, eval_result
from ..hooks import Evaluation, TestRun
from ..model import Model
from ..plots import (
    plot_confusion_matrix,
    plot_reliability,
    plot_robustness,
    plot_sets,
    save_figure,
)
from ..precision import Policy
from ..robustness import Robustness, logits_of_moves, robustness_moves

REPORT_FIGURES = (
    "confusion_matrix.png",
    "reliability.png",
    "robustness.png",
    "prediction_sets.png",
)
"""The figures a report draws (the last only for a calibration with prediction sets)."""


@dataclasses.dataclass(frozen=True)
class RunReport:
    """What a model does on the test images.

    **Fields:** `logits` (`(n, 10)` float32; an ensemble's log mean probabilities),
    `confusion` (the `10 x 10` confusion matrix, rows the true class),
    `calibration` (NLL, Brier score and ECE, `raw` and, for a calibrated run,
    `calibrated`), `robustness` (accuracy on the images moved and mirrored), the
    `reliability` diagram, drawn with the metrics, `test` (the test loss and accuracy,
    as [`evaluate`][eqx_fmnist.evaluation.evaluate] gives them, with an ensemble's
    members' own), `sets` (the conformal prediction sets' coverage and sizes, for a
    calibration that has them; else `None`) with `set_sizes` (the mean set size per
    true class) and `target_coverage`, and `seconds` (the report's wall time: its
    program, its counts, the reliability diagram).
    """

    logits: np.ndarray
    confusion: np.ndarray
    calibration: dict[str, Any]
    robustness: Robustness
    reliability: Figure
    test: EvalResult
    sets: SetReport | None = None
    set_sizes: tuple[float, ...] | None = None
    target_coverage: float | None = None
    seconds: float = 0.0

    @property
    def predictions(self) -> np.ndarray:
        """The predicted class of every test image."""
        return self.logits.argmax(axis=-1)

    def save_figures(self, folder: str | os.PathLike) -> list[Path]:
        """Draw [`figures`][eqx_fmnist.runs.report.RunReport.figures] into `folder`
        (created if needed), each written atomically; the paths."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        return [save_figure(figure, folder / name) for name, figure in self.figures().items()]

    def figures(self) -> dict[str, Figure]:
        """`{file name: figure}`: `confusion_matrix.png`, `reliability.png`,
        `robustness.png` and, with sets, `prediction_sets.png`."""
        robust = self.robustness
        sets = (
            {}
            if self.sets is None or self.set_sizes is None
            else {
                "prediction_sets.png": plot_sets(
                    self.sets.class_coverage, self.set_sizes, self.target_coverage or 0.0
                ),
            }
        )
        return sets | {
            "confusion_matrix.png": plot_confusion_matrix(self.confusion),
            "reliability.png": self.reliability,
            "robustness.png": plot_robustness(
                (0, *robust.shifted),
                (robust.clean, *robust.shifted.values()),
                mirrored=robust.mirrored,
            ),
        }


def reliability_figure(results: dict[str, CalibrationResult]) -> Figure:
    """The reliability diagram of [`calibration_report`][eqx_fmnist.calibration.calibration_report]'s
    metrics: the raw probabilities' curve and, if there, the calibrated one's."""
    curves = {
        (
            f"raw, ECE {r.ece:.3f}"
            if name == "raw"
            else f"T = {r.temperature:.2f}, ECE {r.ece:.3f}"
        ): (
            r.bin_confidence,
            r.bin_accuracy,
            r.bin_count,
        )
        for name, r in results.items()
    }
    return plot_reliability(curves, title=f"Reliability on {results['raw'].count:,} images")


@eqx.filter_jit
def _report_scores(model, test: ArrayDataset, moves, policy: Policy, batch_size: int, tta):
    """The report's one program: the logits of the test images moved by each of `moves`
    ([`logits_of_moves`][eqx_fmnist.robustness.logits_of_moves]; the first move is the
    images as they are), and the test loss and accuracy of the images as they are (each
    member's too: [`dataset_scores`][eqx_fmnist.evaluation.dataset_scores])."""
    logits = logits_of_moves(model, test.images, moves, policy, batch_size, tta)
    return logits, dataset_scores(model, test, policy, batch_size, None, tta)


def report_program(like: Model, test: ArrayDataset, evaluation: Evaluation) -> TestRun:
    """The report's program as [`fit`][eqx_fmnist.train.fit]'s `test_program` takes it
    (a [`TestProgram`][eqx_fmnist.hooks.TestProgram]), compiled ahead of time for
    models shaped like `like`, in the run's precision, views and batch size: its run
    gives the test figures and, beside them, the logits of the test images as they
    are, mirrored and moved, that [`run_report`][eqx_fmnist.runs.report.run_report]
    counts the rest from."""
    moves = robustness_moves()
    args = (test, moves, evaluation.policy, evaluation.batch_size, evaluation.views)
    compiled = _report_scores.lower(like, *args).compile()  # pyright: ignore[reportFunctionMemberAccess]

    def run(model: Model) -> tuple[EvalResult, np.ndarray]:
        logits, metrics = jax.device_get(compiled(model, *args))
        return eval_result(metrics), np.asarray(logits)[:, : len(test)]

    return run


def run_report(
    model: Model,
    policy: Policy,
    images: UInt8[Array | np.ndarray, "n ..."],
    labels: Integer[Array | np.ndarray, " n"],
    calibration: Calibration | None = None,
    *,
    tta: tuple[Move, ...] | None = None,
    scored: tuple[EvalResult, np.ndarray | None] | None = None,
) -> RunReport:
    """The [`RunReport`][eqx_fmnist.runs.report.RunReport] of `model` (or a stack of
    members) on `uint8` test images (`(n, 784)` or `(n, 28, 28)`) and their labels,
    with the run's `calibration` if it has one, averaged over the views `tta` (a calibration's own
    views, the outputs it was fitted on, take their place). `scored`: what
    [`report_program`][eqx_fmnist.runs.report.report_program]'s run gave on this model
    and these images already (`fit`'s `result.test` and `result.tested`), or `None`.

    The model runs once, in one compiled program, over the images as they are, mirrored
    and moved ([`report_program`][eqx_fmnist.runs.report.report_program], which scores
    the test loss and accuracy in the same program); the confusion matrix, the calibration
    metrics, the prediction sets and the robustness are counted from those logits on the
    host."""
    start = time.perf_counter()
    test = ArrayDataset(images, labels)
    labels = np.asarray(labels)
    tta = tta if calibration is None else calibration.tta
    if scored is None or scored[1] is None:
        scored = report_program(model, test, Evaluation(policy, tta, 1000))(model)
    result, logits = scored
    assert logits is not None  # the report's program computes them
    robust = Robustness.of(logits, labels)
    said = calibrated(logits[0], calibration)
    cm = confusion_matrix(labels, said.logits.argmax(axis=-1))
    results = calibration_report(said.logits, labels, calibration)
    summary = {
        name: {"nll": r.nll, "brier": r.brier, "ece": r.ece, "temperature": r.temperature}
        for name, r in results.items()
    }
    reliability = reliability_figure(results)
    found = (said.logits, cm, summary, robust, reliability, result)
    if said.prediction_set is None or said.coverage is None:
        return RunReport(*found, seconds=time.perf_counter() - start)
    sets = said.prediction_set
    y = labels.astype(int)
    sizes = tuple(float(sets[y == k].sum(axis=1).mean()) for k in range(sets.shape[1]))
    report = set_report(sets, y)
    return RunReport(*found, report, sizes, said.coverage, seconds=time.perf_counter() - start)
