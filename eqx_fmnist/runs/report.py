"""The test report of a trained model (one run or an ensemble): what a run folder
writes when training ends and what `eqx-fmnist evaluate` prints and draws again later,
computed and drawn in one place; and [`train_run`][eqx_fmnist.runs.train_run], a run
trained, calibrated and reported, its test figures read from the report's program.

[`run_report`][eqx_fmnist.runs.report.run_report] runs the model once, in one compiled
program, over the test images as they are, mirrored and moved, which also scores the
test loss and accuracy, and counts the rest from those logits (confusion matrix,
calibration metrics raw and scaled, prediction sets, robustness); [`RunReport.figures`][eqx_fmnist.runs.report.RunReport.figures]
draws the confusion matrix, the reliability diagram and the robustness curve.
"""

import dataclasses
import functools
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jaxtyping import Array, Integer, UInt8
from matplotlib.figure import Figure

from ..answers import calibrated
from ..augment import Move
from ..calibration import Calibration, CalibrationResult, calibrate, calibration_report
from ..config import TrainConfig
from ..conformal import SetReport, set_report
from ..dataset import ArrayDataset, Splits
from ..evaluation import EvalResult, confusion_matrix
from ..intervals import Callback
from ..model import Model
from ..plots import (
    plot_confusion_matrix,
    plot_reliability,
    plot_robustness,
    plot_sets,
    save_figure,
)
from ..precision import Policy
from ..robustness import Robustness, compile_scored_moves, robustness_moves, scored_moves
from ..state import TrainState, starting_state
from ..train import Members, TrainResult, fit

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


def run_report(
    model: Model,
    policy: Policy,
    images: UInt8[Array | np.ndarray, "n ..."],
    labels: Integer[Array | np.ndarray, " n"],
    calibration: Calibration | None = None,
    *,
    tta: tuple[Move, ...] | None = None,
    program: Callable | None = None,
) -> RunReport:
    """The [`RunReport`][eqx_fmnist.runs.report.RunReport] of `model` (or a stack of
    members) on `uint8` test images (`(n, 784)` or `(n, 28, 28)`) and their labels,
    with the run's `calibration` if it has one, averaged over the views `tta` (a calibration's own
    views, the outputs it was fitted on, take their place). `program`: the report's
    program compiled already for these images, policy and views
    ([`compile_scored_moves`][eqx_fmnist.robustness.compile_scored_moves]), or `None`.

    The model runs once, in one compiled program, over the images as they are, mirrored
    and moved ([`scored_moves`][eqx_fmnist.robustness.scored_moves], which scores the
    test loss and accuracy in the same program); the confusion matrix, the calibration
    metrics, the prediction sets and the robustness are counted from those logits on the
    host."""
    start = time.perf_counter()
    test = ArrayDataset(images, labels)
    labels = np.asarray(labels)
    tta = tta if calibration is None else calibration.tta
    if program is None:
        logits, result = scored_moves(model, test, robustness_moves(), policy=policy, tta=tta)
    else:
        logits, result = program(model)
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
    sets, y = said.prediction_set, labels.astype(int)
    sizes = tuple(float(sets[y == k].sum(axis=1).mean()) for k in range(sets.shape[1]))
    report = set_report(sets, y)
    return RunReport(*found, report, sizes, said.coverage, seconds=time.perf_counter() - start)


@dataclasses.dataclass
class RunResult:
    """What [`train_run`][eqx_fmnist.runs.train_run] returns: the training's result,
    its calibration when the run held out a calibration split, and its test report
    (`None` without a test set)."""

    result: TrainResult
    calibration: Calibration | None
    report: RunReport | None = None


def train_run(
    config: TrainConfig,
    splits: Splits,
    *,
    members: Members | None = None,
    state: TrainState | None = None,
    callback: Callback | Sequence[Callback] | None = None,
    teacher: Model | None = None,
) -> RunResult:
    """Train on `splits` ([`fit`][eqx_fmnist.train.fit]: one run, or `members`); if the
    splits hold a calibration set, calibrate the model or the ensemble on it
    ([`calibrate`][eqx_fmnist.calibration.calibrate]); then the test report
    ([`run_report`][eqx_fmnist.runs.report.run_report]), whose one compiled program over
    the test images also gives `result.test` (`fit` is not asked to evaluate the test
    set again). A `teacher` is distilled (see `fit`)."""
    test, untested = splits.test, Splits(splits.train, None, splits.validation, splits.calibration)
    aside = _compiled_aside(config, members, splits, state)
    result = fit(config, untested, members=members, state=state, callback=callback, teacher=teacher)
    config, calibration = result.config, None
    if splits.calibration is not None:
        calibration = calibrate(
            result.model,
            splits.train,
            splits.calibration,
            policy=result.policy,
            coverage=config.coverage,
            per_class=config.per_class_sets,
            tta=config.views,
        )
    if test is None:
        return RunResult(result, calibration)
    report = run_report(
        result.model,
        result.policy,
        test.images,
        test.labels,
        calibration,
        tta=config.views,
        program=aside(),
    )
    return RunResult(dataclasses.replace(result, test=report.test), calibration, report)


def _compiled_aside(
    config: TrainConfig, members: Members | None, splits: Splits, state: TrainState | None
) -> Callable[[], Callable | None]:
    """Start compiling the test report's program in a thread of its own, for a model
    shaped like the run's, while `fit` compiles and runs the steps: XLA compiles
    without holding Python's lock (on a TPU v5e the main job compiled its steps for
    10.8 s and then its report for 4.6 s). Returns `wait()`: the program
    ([`compile_scored_moves`][eqx_fmnist.robustness.compile_scored_moves]), or `None`
    where there is none to make (no test set; a model over several devices or
    processes, placed as only training tells) or it failed (the report then compiles
    it in the usual way, and says what is wrong)."""
    found: list[Callable | None] = [None]
    if splits.test is None or config.devices > 1 or jax.process_count() > 1:
        return lambda: None
    test, policy, views = splits.test, config.policy, config.views

    def compile_aside() -> None:
        try:
            if state is not None:
                like = state.eval_model
            else:  # zeros shaped like the model the run will start from
                configs = (config,) if members is None else members.configs(config)
                new = functools.partial(starting_state, configs, members is not None, None)
                shapes = jax.eval_shape(lambda: new(len(splits.train)).eval_model)
                like = jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), shapes)
            moves = robustness_moves()
            found[0] = compile_scored_moves(like, test, moves, policy=policy, tta=views)
        except Exception:  # noqa: BLE001 (the report compiles it again, and raises)
            found[0] = None

    thread = threading.Thread(target=compile_aside, name="report-compile", daemon=True)
    thread.start()

    def wait() -> Callable | None:
        thread.join()
        return found[0]

    return wait


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
order they happen (see [`time_split`][eqx_fmnist.runs.report.time_split])."""


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
    (the rest of the callbacks: history lines, the progress bar, TensorBoard), then the
    test `report` (the model on the test images, moved and mirrored, and its
    calibration saved) and the `figures`, each rounded to milliseconds. A run folder's
    `test` is 0: its report scores the test set in the same program.

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
