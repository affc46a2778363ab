"""`eqx-fmnist cv` (K-fold cross-validation, the folds as members of one program) and
`eqx-fmnist audit` (the labels that look wrong, from out-of-sample probabilities)."""

import argparse
from pathlib import Path

from ..audit import require_cleanlab
from ..ensemble import CrossValidation, Folds
from ..runs import CV_FILES, MAX_TOP, Training, audit_run, default_folder, suspect_files
from . import flags
from .common import console, load_data, table, train_in_folder


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
    flags.add_config_flags(p)
    p.add_argument("--folds", type=int, default=5, help="K (5)")
    flags.add_run_folder_flags(p, what="cv run")
    flags.add_data_args(p)


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
    p.add_argument("--top", type=int, default=20, help=f"suspects drawn (20, {MAX_TOP} at most)")
    p.add_argument("--out", type=flags.out_path, help="folder for the files (default: CV_RUN_DIR)")
    p.add_argument("--overwrite", action="store_true", help="replace an earlier audit's files")
    flags.add_data_args(p)


def cmd_cv(args: argparse.Namespace) -> int:
    if (training := flags.resumed(args, "cv")) is None:
        config = flags.config_from_args(args)
        options = flags.folder_options(args)
        options |= {"members": Folds(args.folds), "data": load_data(args)}
        training = Training.new(args.out or default_folder(), config, **options)
    done = train_in_folder(training)
    if isinstance(done, int):
        return done
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
    console.print(f"wrote {out}/: {', '.join(CV_FILES)}, checkpoint.eqx, ...")


def cmd_audit(args: argparse.Namespace) -> int:
    require_cleanlab()  # before anything is read: one line naming the extra to install
    options = {name: getattr(args, name) for name in ("out", "top", "test_model", "overwrite")}
    found = audit_run(args.cv_run, lambda: load_data(args), **options)
    lines = [
        (name, f"{a.examples:,}", f"{len(a.indices):,}", f"{len(a.indices) / a.examples:.2%}")
        for name, a in found.items()
    ]
    columns = ("set", "images", "suspects", "share")
    console.print(table("Label issues (confident learning)", columns, lines))
    written = suspect_files(Path(args.out or args.cv_run))
    console.print(f"wrote {written[0].parent}/: {', '.join(p.name for p in written)}")
    return 0
