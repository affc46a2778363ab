"""`eqx-fmnist cv` (K-fold cross-validation, the folds as members of one program) and
`eqx-fmnist audit` (the labels that look wrong, from out-of-sample probabilities)."""

import argparse
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from ..audit import audit_labels, require_cleanlab
from ..ensemble import CrossValidation, Folds
from ..evaluation import predict_proba
from ..runs import (
    OUT_OF_FOLD,
    Run,
    default_folder,
    read_out_of_fold,
    run_splits,
    write_suspects,
)
from .common import UsageError, console, load_data, table, train_in_folder
from .flags import (
    add_config_flags,
    add_data_args,
    add_run_folder_flags,
    config_from_args,
    folder_options,
    out_path,
    resumed,
)


def add_cv_parser(sub) -> None:
    p = sub.add_parser(
        "cv",
        help="K-fold cross-validation, the folds as members of one program",
        description="Member i trains on every fold but fold i and is validated on fold i; "
        "all K train as one compiled program. Writes a run folder with each fold's "
        "curve, the folds' accuracy (mean ± sd), and the out-of-fold probabilities of "
        "every training image (for `eqx-fmnist audit`).",
    )
    p.set_defaults(func=cmd_cv)
    add_config_flags(p)
    p.add_argument("--folds", type=int, default=5, help="K (5)")
    add_run_folder_flags(p, what="cv run")
    add_data_args(p)


def add_audit_parser(sub) -> None:
    p = sub.add_parser(
        "audit",
        help="rank the labels that look wrong (confident learning, cleanlab)",
        description="The training set's suspects from a cv folder's out-of-fold "
        "probabilities; the test set's from the folds' ensemble (or --test-model), which "
        "never trained on it. Needs pip install 'eqx_fmnist[audit]'.",
    )
    p.set_defaults(func=cmd_audit)
    p.add_argument("cv_run", metavar="CV_RUN_DIR")
    p.add_argument(
        "--test-model",
        metavar="RUN_DIR",
        help="the model for the test set (default: the folds' ensemble)",
    )
    p.add_argument("--top", type=int, default=20, help="suspects drawn per set (20)")
    p.add_argument("--out", type=out_path, help="folder for the files (default: CV_RUN_DIR)")
    add_data_args(p)


def cmd_cv(args: argparse.Namespace) -> int:
    options = folder_options(args)
    training = resumed(args, "cv", options)
    if training is None:
        try:
            folds = Folds(args.folds)
        except ValueError as e:
            raise UsageError(f"--folds {args.folds}: {e}") from None
        out, config = args.out or default_folder(), config_from_args(args)
        training = Run.new(out, config, members=folds, data=load_data(args), **options)
    assert training.members is not None
    k, train = len(training.members.configs(training.config)), len(training.splits.train)
    describe = (
        f"{k} folds of {train:,} images ({training.folder.num_train:,} to train on each), "
        f"{training.total_steps:,} steps, one program"
    )
    done = train_in_folder(training, describe, command="cv")
    if isinstance(done, int):
        return done
    assert isinstance(done.outcome, CrossValidation)
    _print_cv(done.outcome, training.folder.folder)
    return 0


def _print_cv(cv: CrossValidation, out: Path) -> None:
    """Each fold's accuracy on its own held-out fold, their mean and the files."""
    folds = len(cv.fold_accuracy)
    rows = [
        (f"fold {i}", f"{a:.4f}", f"{loss:.4f}")
        for i, (a, loss) in enumerate(zip(cv.fold_accuracy, cv.fold_loss, strict=True))
    ]
    console.print(table("Folds (each on its own held-out fold)", ("", "accuracy", "loss"), rows))
    line = f"cross-validated accuracy [bold]{cv.accuracy_mean:.4f}[/] ± {cv.accuracy_std:.4f}"
    if (test := cv.result.test) is not None:
        line += f" (sd of {folds} folds); the folds' ensemble: test {test.accuracy:.4f}"
    console.print(line)
    console.print(
        f"wrote {out}/: {OUT_OF_FOLD} (out-of-fold probabilities), cv.json, folds.png, "
        "checkpoint.eqx (the folds' members)",
        highlight=False,
    )


def cmd_audit(args: argparse.Namespace) -> int:
    try:
        require_cleanlab()
    except ImportError as e:
        raise UsageError(str(e)) from None
    if args.top < 1:
        raise UsageError(f"--top must be at least 1, but got {args.top}.")
    folder = Path(args.cv_run)
    oof, cv_run = read_out_of_fold(folder), Run.open(folder)
    tested = Run.open(args.test_model) if args.test_model else cv_run
    fm = load_data(args)
    test_x = jnp.asarray(fm.test_images.reshape(len(fm.test_images), -1))
    test_p = np.asarray(predict_proba(tested.model, test_x, policy=tested.policy))
    splits = run_splits(cv_run.config, fm)
    train_images = np.asarray(splits.train.images).reshape(-1, 28, 28)
    out = args.out or folder
    out.mkdir(parents=True, exist_ok=True)
    sets = {
        "train": (oof["probabilities"], oof["labels"], train_images),
        "test": (test_p, fm.test_labels, fm.test_images),
    }
    lines = []
    for name, (probs, labels, images) in sets.items():
        found = audit_labels(probs, labels)
        write_suspects(out, name, found, images, args.top)
        share = len(found.indices) / found.examples
        lines.append((name, f"{found.examples:,}", f"{len(found.indices):,}", f"{share:.2%}"))
    columns = ("set", "images", "suspects", "share")
    console.print(table("Label issues (confident learning)", columns, lines))
    console.print(
        f"wrote {out}/: suspects_train.csv/.json/.png, suspects_test.csv/.json/.png "
        "and the by-class grids",
        highlight=False,
    )
    return 0
