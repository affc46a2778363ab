"""What a run writes beside its run folder's own files: a sweep's table, JSON and
heatmap; a cross-validation's out-of-fold probabilities, `cv.json` and the folds'
curves; and a label audit of a cv folder ([`audit_run`][eqx_fmnist.runs.files.audit_run],
what `eqx-fmnist audit` does) with what it writes (the suspects as CSV, JSON and two
image grids)."""

import contextlib
import io
import json
import os
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from ..audit import LabelAudit, audit_labels
from ..data import NUM_CLASSES
from ..ensemble import CrossValidation, SweepResult
from ..evaluation import predict_proba
from ..fileio import atomic_write
from ..plots import plot_folds, plot_heatmap, plot_predictions, save_figure
from .layout import CV_FILES, OUT_OF_FOLD, SWEEP_FILES, RunError, read_history
from .reading import DataSource, Run, loaded, run_splits


def sweep_heatmap(result: SweepResult):
    """A figure of a sweep's mean validation accuracy over the two swept fields with the
    most values (the best over any others)."""
    grid = result.grid
    seeds = result.seeds
    rows_name, *rest = sorted(grid, key=lambda n: -len(grid[n]))[:2]
    cols_name = rest[0] if rest else None
    rows = list(grid[rows_name])
    cols: list[float | None] = list(grid[cols_name]) if cols_name else [None]
    table = np.full((len(rows), len(cols)), np.nan)
    accuracy = result.validation_accuracy
    means = accuracy.mean(axis=1)
    for i, p in enumerate(result.points):
        r = rows.index(p[rows_name])
        c = 0 if cols_name is None else cols.index(p[cols_name])
        table[r, c] = np.fmax(table[r, c], means[i])
    # Seed-to-seed spread: differences smaller than it are noise, so the colour scale
    # spans at least four of it (and at least one point of accuracy).
    spread = float(accuracy.std(axis=1, ddof=1).mean()) if len(seeds) > 1 else 0.0
    title = f"Sweep: mean validation accuracy over {len(seeds)} seeds"
    return plot_heatmap(
        table,
        row_labels=[f"{v:g}" for v in rows],
        col_labels=["" if v is None else f"{v:g}" for v in cols],
        row_name=rows_name,
        col_name=cols_name or "",
        title=title + (f" (seed std {spread:.4f})" if spread else ""),
        min_span=max(0.01, 4 * spread),
    )


def write_sweep(folder: str | os.PathLike, result: SweepResult) -> list[Path]:
    """`sweep.md`, `sweep.json` and `sweep_heatmap.png` in `folder` (created if needed,
    each written atomically); their paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    texts = (result.to_markdown(), json.dumps(result.to_dict(), indent=2) + "\n")
    for name, text in zip(SWEEP_FILES, texts, strict=False):
        with atomic_write(folder / name, "w") as f:
            f.write(text)
    save_figure(sweep_heatmap(result), folder / SWEEP_FILES[2])
    return [folder / name for name in SWEEP_FILES]


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
    try:
        with open(path, "rb") as f, np.load(f, allow_pickle=False) as saved:
            found = {name: saved[name] for name in ("probabilities", "labels", "fold")}
    except Exception as e:  # numpy and zipfile raise several kinds for a damaged file
        raise RunError(
            f"{path} cannot be read ({type(e).__name__}: {e}); run `eqx-fmnist cv` again."
        ) from None
    p = found["probabilities"]
    labels = found["labels"]
    if p.ndim != 2 or p.shape != (len(labels), NUM_CLASSES) or labels.ndim != 1:
        raise RunError(
            f"{path} holds probabilities of shape {p.shape} for {labels.shape} labels, not "
            f"(n, {NUM_CLASSES}) for (n,); run `eqx-fmnist cv` again."
        )
    return found


MAX_TOP = 200
"""The most suspects an audit draws per set: 40 rows of 5 images, a figure of a few MB
(each image drawn costs about as much again); the CSV and JSON list every suspect."""


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
    cells = []
    given = []
    suggested = []
    notes = []
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


def audit_run(
    cv_run: str | os.PathLike,
    data: DataSource = None,
    *,
    out: str | os.PathLike | None = None,
    top: int = 20,
    test_model: str | os.PathLike | None = None,
) -> dict[str, LabelAudit]:
    """The labels that look wrong (`eqx-fmnist audit`): the training set's, from the
    out-of-fold probabilities `cv_run` (a folder `eqx-fmnist cv` wrote) holds; the test
    set's, from the folds' ensemble (or the run `test_model`), which never trained on
    it. `data`: as for `Training.new`, loaded once the runs are read. Writes each set's
    suspects (`write_suspects`, the `top` most suspicious drawn) in `out` (defaults to
    `cv_run`); returns the audits by set, `"train"` and `"test"`.

    **Raises:**

    `RunError` for a folder without out-of-fold probabilities; `ValueError` for `top`
    outside `1..MAX_TOP`; `ImportError` without cleanlab.
    """
    if isinstance(top, bool) or not isinstance(top, int) or not 1 <= top <= MAX_TOP:
        raise ValueError(
            f"`top` must be an int in 1..{MAX_TOP} (the suspects drawn per set; the CSV "
            f"lists every one), but got {top!r}."
        )
    oof = read_out_of_fold(cv_run)
    folds = Run.open(cv_run)
    tested = Run.open(test_model) if test_model else folds
    data = loaded(data)
    test_x = jnp.asarray(data.test_images.reshape(len(data.test_images), -1))
    test_p = np.asarray(predict_proba(tested.model, test_x, policy=tested.policy))
    train_images = np.asarray(run_splits(folds.config, data).train.images).reshape(-1, 28, 28)
    sets = {
        "train": (oof["probabilities"], oof["labels"], train_images),
        "test": (test_p, data.test_labels, data.test_images),
    }
    found = {name: audit_labels(probs, labels) for name, (probs, labels, _) in sets.items()}
    out = Path(cv_run if out is None else out)
    out.mkdir(parents=True, exist_ok=True)
    inside = out.resolve() == folds.folder.resolve()
    with folds.locked() if inside else contextlib.nullcontext():
        for name, (_, _, images) in sets.items():
            write_suspects(out, name, found[name], images, top)
    return found
