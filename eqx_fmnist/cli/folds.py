"""`eqx-fmnist cv` (K-fold cross-validation, the folds as members of one program) and
`eqx-fmnist audit` (the labels that look wrong, from out-of-sample probabilities)."""

import argparse
import io
import json
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from .. import data as data_mod
from ..audit import audit_labels, require_cleanlab
from ..checkpoint import load_checkpoint
from ..ensemble import check_memory, cross_validate, member_seeds
from ..evaluation import predict_proba
from ..fileio import atomic_write
from ..intervals import plan_run
from ..plots import plot_folds, plot_predictions, save_figure
from ..runs import CheckpointEvery, RunFolder, default_folder, read_history, run_splits
from ..subsets import kfold
from .common import (
    UsageError,
    add_data_args,
    checkpoint_path,
    console,
    load_data,
    table,
    train_with_progress,
)
from .flags import add_config_flags, config_from_args, given_flags

OUT_OF_FOLD = "out_of_fold.npz"
"""A cv folder's out-of-fold probabilities (`probabilities`, `labels`, `fold`)."""


def add_cv_parser(sub) -> None:
    p = sub.add_parser(
        "cv", help="K-fold cross-validation, the folds as members of one program",
        description="Member i trains on every fold but fold i and is validated on fold i; "
        "all K train as one compiled program. Writes a run folder with each fold's "
        "curve, the folds' accuracy (mean ± sd), and the out-of-fold probabilities of "
        "every training image (for `eqx-fmnist audit`).")  # fmt: skip
    p.set_defaults(func=cmd_cv)
    add_config_flags(p)
    p.add_argument("--folds", type=int, default=5, help="K (5)")
    p.add_argument("--out", type=Path, help="run folder (default: runs/<timestamp>)")
    p.add_argument("--overwrite", action="store_true", help="reuse a folder that has results")
    p.add_argument("--checkpoint-every", default="60s", help="checkpoint cadence (60s)")
    p.add_argument("--resume", metavar="CHECKPOINT", help="continue a cv run from its checkpoint")
    add_data_args(p)


def add_audit_parser(sub) -> None:
    p = sub.add_parser(
        "audit", help="rank the labels that look wrong (confident learning, cleanlab)",
        description="The training set's suspects from a cv folder's out-of-fold "
        "probabilities; the test set's from the folds' ensemble (or --test-model), which "
        "never trained on it. Needs pip install 'eqx_fmnist[audit]'.")  # fmt: skip
    p.set_defaults(func=cmd_audit)
    p.add_argument("cv_run", metavar="CV_RUN_DIR")
    p.add_argument("--test-model", metavar="RUN_DIR", help="the model for the test set "
                   "(default: the folds' ensemble)")  # fmt: skip
    p.add_argument("--top", type=int, default=20, help="suspects drawn per set (20)")
    p.add_argument("--out", type=Path, help="folder for the files (default: CV_RUN_DIR)")
    add_data_args(p)


def _resumed(args: argparse.Namespace):
    """The cv checkpoint `--resume` names (its folds and folder into `args`), or `None`."""
    if not args.resume:
        return None
    if given_flags(args):
        raise UsageError(f"--resume continues the saved cv run; drop {' '.join(given_flags(args))}.")
    resume = load_checkpoint(checkpoint_path(args.resume))
    if resume.members is None:
        raise UsageError(f"{args.resume} is not a cv run's checkpoint (it holds one model).")
    args.folds, args.out = len(resume.members), args.out or checkpoint_path(args.resume).parent
    return resume


def _write_cv(out: Path, cv, folds: int) -> None:
    """`out_of_fold.npz`, `cv.json` and `folds.png` beside the run folder's files."""
    fold = np.empty(len(cv.labels), np.int16)
    for i, rows in enumerate(cv.subsets.held_out or ()):
        fold[rows] = i
    buffer = io.BytesIO()
    np.savez_compressed(buffer, probabilities=cv.probabilities, labels=cv.labels, fold=fold)
    with atomic_write(out / OUT_OF_FOLD) as f:
        f.write(buffer.getvalue())
    summary = {"folds": folds, "fold_accuracy": cv.fold_accuracy.tolist(),
               "fold_loss": cv.fold_loss.tolist(), "accuracy_mean": cv.accuracy_mean,
               "accuracy_std": cv.accuracy_std,
               "out_of_fold_accuracy": float((cv.probabilities.argmax(1) == cv.labels).mean())}  # fmt: skip
    with atomic_write(out / "cv.json", "w") as f:
        f.write(json.dumps(summary, indent=2) + "\n")
    history = [h for h in read_history(out) if "members" in h]
    curves = [[m.get("valid_accuracy", np.nan) for m in h["members"]] for h in history]
    losses = [[m["loss"] for m in h["members"]] for h in history]
    save_figure(plot_folds([h["step"] for h in history], np.asarray(curves).T,
                           np.asarray(losses).T, title=f"{folds}-fold cross-validation"),
                out / "folds.png")  # fmt: skip


def cmd_cv(args: argparse.Namespace) -> int:
    resume = _resumed(args)
    config = resume.config if resume else config_from_args(args)
    if args.folds < 2:
        raise UsageError(f"--folds {args.folds}: cross-validation needs at least 2 folds.")
    if config.validation_size:
        raise UsageError("cv validates each member on its own fold: drop --validation-size.")
    out = args.out or default_folder()
    fm = load_data(args)
    splits = run_splits(config, fm)
    subsets = kfold(len(splits.train), args.folds, seed=config.seed)  # checks the sizes
    plan_run(config, subsets.size)  # a fold too small for a batch: one line, nothing written
    members = [config.with_changes(seed=s) for s in member_seeds(config, args.folds)]
    if resume and (resume.num_train != subsets.size or list(resume.members or ()) != members):
        raise UsageError(f"{args.resume} was not written by `eqx-fmnist cv` on this data.")
    check_memory(members, subsets.size)
    total, start = plan_run(config, subsets.size).total_steps, resume.step if resume else 0
    folder = RunFolder(out, config, num_train=subsets.size, overwrite=args.overwrite,
                       checkpoint_every=CheckpointEvery.parse(args.checkpoint_every),
                       members=members, start_step=start)  # fmt: skip
    with folder as run, run.stop_on_signals():
        console.print(f"cv folder [bold]{out}[/]: {args.folds} folds of "
                      f"{len(splits.train):,} images ({subsets.size:,} to train on each), "
                      f"{total:,} steps, one program", highlight=False)  # fmt: skip
        state = resume.state if resume else None
        cv = train_with_progress(run, lambda cbs: cross_validate(
            config, splits, args.folds, callback=cbs, state=state), total=total, start=start,
            command="cv")  # fmt: skip
        if isinstance(cv, int):
            return cv
        run.finish(cv.result, fm)
        _write_cv(out, cv, args.folds)
    rows = [(f"fold {i}", f"{a:.4f}", f"{loss:.4f}")
            for i, (a, loss) in enumerate(zip(cv.fold_accuracy, cv.fold_loss, strict=True))]  # fmt: skip
    console.print(table("Folds (each on its own held-out fold)", ("", "accuracy", "loss"), rows))
    test = cv.result.test
    console.print(f"cross-validated accuracy [bold]{cv.accuracy_mean:.4f}[/] ± "
                  f"{cv.accuracy_std:.4f} (sd of {args.folds} folds); the folds' ensemble: "
                  f"test {test.accuracy:.4f}" if test else "")  # fmt: skip
    console.print(f"wrote {out}/: {OUT_OF_FOLD} (out-of-fold probabilities), cv.json, "
                  "folds.png, checkpoint.eqx (the folds' members)", highlight=False)
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
    try:
        require_cleanlab()
    except ImportError as e:
        raise UsageError(str(e)) from None
    if args.top < 1:
        raise UsageError(f"--top must be at least 1, but got {args.top}.")
    folder = Path(args.cv_run)
    if not (folder / OUT_OF_FOLD).is_file():
        raise UsageError(f"{folder} has no {OUT_OF_FOLD}: give a folder `eqx-fmnist cv` wrote.")
    oof, cv_run = np.load(folder / OUT_OF_FOLD), load_checkpoint(checkpoint_path(str(folder)))
    state = (load_checkpoint(checkpoint_path(args.test_model)) if args.test_model else cv_run).state
    fm = load_data(args)
    test_x = jnp.asarray(fm.test_images.reshape(len(fm.test_images), -1))
    test_p = np.asarray(predict_proba(state.eval_model, test_x, policy=state.policy))
    splits = run_splits(cv_run.config, fm)
    train_images = np.asarray(splits.train.images).reshape(-1, 28, 28)
    out = args.out or folder
    out.mkdir(parents=True, exist_ok=True)
    sets = {"train": (oof["probabilities"], oof["labels"], train_images),
            "test": (test_p, fm.test_labels, fm.test_images)}
    lines = []
    for name, (probs, labels, images) in sets.items():
        found = audit_labels(probs, labels)
        found.save(out / f"suspects_{name}.csv")
        found.save(out / f"suspects_{name}.json")
        top = slice(0, args.top)
        notes = [f"#{i}, p={s:.3f}" for i, s in zip(found.indices[top], found.score[top], strict=True)]
        figure = plot_predictions(images[found.indices[top]], found.given[top], found.suggested[top],
                                  rows=-(-min(args.top, len(found.indices)) // 5) or 1, cols=5,
                                  notes=notes, title=f"{name}: suggested / given (most suspicious first)")  # fmt: skip
        save_figure(figure, out / f"suspects_{name}.png")
        save_figure(_by_class(found, images), out / f"suspects_{name}_by_class.png")
        lines.append((name, f"{found.examples:,}", f"{len(found.indices):,}",
                      f"{len(found.indices) / found.examples:.2%}"))  # fmt: skip
    console.print(table("Label issues (confident learning)", ("set", "images", "suspects", "share"), lines))
    console.print(f"wrote {out}/: suspects_train.csv/.json/.png, suspects_test.csv/.json/.png "
                  "and the by-class grids", highlight=False)
    return 0


def _by_class(found, images, per_class: int = 5):
    """The most suspicious `per_class` of each given class, one row per class."""
    cells, given, suggested, notes = [], [], [], []
    for c in range(data_mod.NUM_CLASSES):
        picked = np.flatnonzero(found.given == c)[:per_class]
        for j in range(per_class):
            k = picked[j] if j < len(picked) else None
            cells.append(images[found.indices[k]] if k is not None else np.zeros((28, 28), np.uint8))
            given.append(c if k is not None else -1)
            suggested.append(found.suggested[k] if k is not None else 0)
            notes.append("" if k is None else f"#{found.indices[k]}, p={found.score[k]:.3f}")
    return plot_predictions(np.stack(cells), np.asarray(given), np.asarray(suggested),
                            rows=data_mod.NUM_CLASSES, cols=per_class, notes=notes,
                            title="suspects by given class: suggested / given")  # fmt: skip
