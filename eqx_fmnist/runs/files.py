"""A label audit of a cv folder ([`audit_run`][eqx_fmnist.runs.files.audit_run], what
`eqx-fmnist audit` does) from its out-of-fold probabilities, with what it writes (the
suspects as CSV, JSON and two image grids)."""

import os
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from ..audit import LabelAudit, audit_labels
from ..data import NUM_CLASSES
from ..evaluation import predict_proba
from ..plots import plot_predictions, save_figure
from .layout import OUT_OF_FOLD, RunError
from .reading import DataSource, Run, loaded, run_splits
from .record import refuse_overwriting


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


def suspect_files(folder: Path) -> list[Path]:
    """What an audit writes into `folder`: each set's suspects as CSV, JSON and grids."""
    ends = (".csv", ".json", ".png", "_by_class.png")
    return [folder / f"suspects_{split}{end}" for split in ("train", "test") for end in ends]


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
    overwrite: bool = False,
) -> dict[str, LabelAudit]:
    """The labels that look wrong (`eqx-fmnist audit`): the training set's, from the
    out-of-fold probabilities `cv_run` (a folder `eqx-fmnist cv` wrote) holds; the test
    set's, from the folds' ensemble (or the run `test_model`), which never trained on
    it. `data`: as for `Training.new`, loaded once the runs are read. Writes each set's
    suspects (`write_suspects`, the `top` most suspicious drawn) in `out` (defaults to
    `cv_run`; files there already are replaced only with `overwrite`, and what an audit
    did not write never: see
    [`refuse_overwriting`][eqx_fmnist.runs.record.refuse_overwriting]); returns the
    audits by set, `"train"` and `"test"`.

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
    out = Path(cv_run if out is None else out)
    refuse_overwriting(suspect_files(out), own=folds.folder, overwrite=overwrite, by="audit")
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
    out.mkdir(parents=True, exist_ok=True)
    with folds.writing(suspect_files(out), by="audit", overwrite=overwrite, lock=False):
        for name, (_, _, images) in sets.items():
            write_suspects(out, name, found[name], images, top)
    return found
