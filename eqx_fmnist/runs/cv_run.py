"""The kind of run `eqx-fmnist cv` makes: K-fold cross-validation, the folds as members
of one program, with the out-of-fold probabilities of every training image written for
`eqx-fmnist audit`."""

import io
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np

from ..ensemble import CrossValidation, Folds, cross_validate
from ..fileio import atomic_write
from ..intervals import Callback
from ..plots import plot_folds, save_figure
from .kind import Job, RunKind
from .layout import FIGURES, OUT_OF_FOLD, read_history
from .report import report_program, run_report


def write_cross_validation(folder: str | os.PathLike, cv: CrossValidation) -> list[Path]:
    """`out_of_fold.npz`, `cv.json` and `folds.png` (each fold's held-out accuracy and
    training loss, from the folder's history) in `folder`; the paths written."""
    folder = Path(folder)
    folds = len(cv.fold_accuracy)
    fold = np.empty(len(cv.labels), np.int16)
    for i, rows in enumerate(cv.subsets.held_out or ()):
        fold[rows] = i
    buffer = io.BytesIO()
    np.savez_compressed(buffer, probabilities=cv.probabilities, labels=cv.labels, fold=fold)
    with atomic_write(folder / OUT_OF_FOLD) as f:
        f.write(buffer.getvalue())
    right = cv.probabilities.argmax(1) == cv.labels
    summary = {
        "folds": folds,
        "fold_accuracy": cv.fold_accuracy.tolist(),
        "fold_loss": cv.fold_loss.tolist(),
        "accuracy_mean": cv.accuracy_mean,
        "accuracy_std": cv.accuracy_std,
        "out_of_fold_accuracy": float(right.mean()),
    }
    with atomic_write(folder / "cv.json", "w") as f:
        f.write(json.dumps(summary, indent=2) + "\n")
    history = [h for h in read_history(folder) if "members" in h]
    curves = [[m.get("valid_accuracy", np.nan) for m in h["members"]] for h in history]
    losses = [[m["loss"] for m in h["members"]] for h in history]
    steps = [h["step"] for h in history]
    title = f"{folds}-fold cross-validation"
    figure = plot_folds(steps, np.asarray(curves).T, np.asarray(losses).T, title=title)
    save_figure(figure, folder / "folds.png")
    return [folder / name for name in (OUT_OF_FOLD, "cv.json", "folds.png")]


def _train(job: Job, callbacks: Sequence[Callback]) -> CrossValidation:
    folds = cast(Folds, job.members)  # the registry gives this kind only folds
    return cross_validate(
        job.config,
        job.splits,
        folds.k,
        callback=callbacks,
        state=job.state,
        test_program=report_program,
    )


def _finish(job: Job, outcome: CrossValidation) -> dict[str, Any]:
    """The folds' ensemble's test report (from the program `fit` ran), the folder's
    files, and the out-of-fold file and the folds' figures."""
    result = outcome.result
    test = job.splits.test
    assert result.test is not None and test is not None, "a cv folder's run is tested"
    report = run_report(
        result.model,
        result.policy,
        test.images,
        test.labels,
        tta=job.config.views,
        scored=(result.test, result.tested),
    )
    summary = job.folder.finish(result, job.data, report)
    write_cross_validation(job.folder.folder, outcome)
    return summary


def _what(job: Job) -> str:
    folds = len(cast(Folds, job.members).configs(job.config))
    return (
        f"{folds} folds of {len(job.splits.train):,} images ({job.folder.num_train:,} "
        f"to train on each), {job.total_steps:,} steps, one program{job.spread()}"
    )


CV_FILES = (OUT_OF_FOLD, "cv.json", "folds.png")
"""What cross-validation writes besides a run's files."""
CV_RUN = RunKind("cv", "cv", frozenset({Folds.kind}), _train, _finish, _what, (*FIGURES, *CV_FILES))
"""K-fold cross-validation."""
