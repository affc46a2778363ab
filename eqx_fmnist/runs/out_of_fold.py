"""What a cross-validation run writes beside its run folder's files (the out-of-fold
probabilities, `cv.json`, the folds' curves) and what a label audit writes from them
(the suspects as CSV, JSON and two image grids)."""

import io
import json
import os
from pathlib import Path

import numpy as np

from ..audit import LabelAudit
from ..data import NUM_CLASSES
from ..ensemble import CrossValidation
from ..fileio import atomic_write
from ..plots import plot_folds, plot_predictions, save_figure
from .folder import read_history
from .summary import RunError

OUT_OF_FOLD = "out_of_fold.npz"
"""A cv folder's out-of-fold probabilities (`probabilities`, `labels`, `fold`)."""
CV_FILES = (OUT_OF_FOLD, "cv.json", "folds.png")


def write_cross_validation(folder: str | os.PathLike, cv: CrossValidation) -> list[Path]:
    """`out_of_fold.npz`, `cv.json` and `folds.png` (each fold's held-out accuracy and
    training loss, from the folder's history) in `folder`; the paths written."""
    folder, folds = Path(folder), len(cv.fold_accuracy)
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
    return [folder / name for name in CV_FILES]


def read_out_of_fold(folder: str | os.PathLike) -> dict[str, np.ndarray]:
    """The out-of-fold probabilities `eqx-fmnist cv` wrote in `folder`: `probabilities`,
    `labels` and `fold`.

    **Raises:**

    `RunError` for a folder without them.
    """
    path = Path(folder) / OUT_OF_FOLD
    if not path.is_file():
        raise RunError(f"{folder} has no {OUT_OF_FOLD}: give a folder `eqx-fmnist cv` wrote.")
    with np.load(path) as saved:
        return {name: saved[name] for name in ("probabilities", "labels", "fold")}


def write_suspects(
    folder: str | os.PathLike, name: str, found: LabelAudit, images: np.ndarray, top: int
) -> list[Path]:
    """`suspects_NAME.csv`, `.json`, `.png` (the `top` most suspicious) and
    `_by_class.png` (the most suspicious five of each given class) in `folder`."""
    folder = Path(folder)
    paths = [found.save(folder / f"suspects_{name}.csv")]
    paths.append(found.save(folder / f"suspects_{name}.json"))
    first = slice(0, top)
    notes = [
        f"#{i}, p={s:.3f}" for i, s in zip(found.indices[first], found.score[first], strict=True)
    ]
    figure = plot_predictions(
        images[found.indices[first]],
        found.given[first],
        found.suggested[first],
        rows=-(-min(top, len(found.indices)) // 5) or 1,
        cols=5,
        notes=notes,
        title=f"{name}: suggested / given (most suspicious first)",
    )
    paths.append(save_figure(figure, folder / f"suspects_{name}.png"))
    by_class = _by_class(found, images)
    paths.append(save_figure(by_class, folder / f"suspects_{name}_by_class.png"))
    return paths


def _by_class(found: LabelAudit, images: np.ndarray, per_class: int = 5):
    """The most suspicious `per_class` of each given class, one row per class."""
    cells, given, suggested, notes = [], [], [], []
    for c in range(NUM_CLASSES):
        picked = np.flatnonzero(found.given == c)[:per_class]
        for j in range(per_class):
            k = picked[j] if j < len(picked) else None
            blank = np.zeros((28, 28), np.uint8)
            cells.append(images[found.indices[k]] if k is not None else blank)
            given.append(c if k is not None else -1)
            suggested.append(found.suggested[k] if k is not None else 0)
            notes.append("" if k is None else f"#{found.indices[k]}, p={found.score[k]:.3f}")
    return plot_predictions(
        np.stack(cells),
        np.asarray(given),
        np.asarray(suggested),
        rows=NUM_CLASSES,
        cols=per_class,
        notes=notes,
        title="suspects by given class: suggested / given",
    )
