"""`eqx-fmnist evaluate`: a run's (or an ensemble's) test metrics, per-class table,
robustness to moved images, calibration and confusion matrix."""

import argparse

import numpy as np

from .. import data as data_mod
from ..calibration import Calibration
from ..evaluation import EvalResult, most_confused, per_class_accuracy
from ..runs import Run, RunReport, run_report
from ..runs.report import REPORT_FIGURES
from ..state import BATCHED
from ..views import tta_name
from .common import console, load_data, table
from .flags import add_data_args, add_tta_arg, out_path


def add_evaluate_parser(sub) -> None:
    p = sub.add_parser("evaluate", help="test metrics, per-class table, confusion matrix")
    p.set_defaults(func=cmd_evaluate)
    p.add_argument("run", metavar="RUN_DIR_OR_CHECKPOINT")
    p.add_argument("--out", type=out_path, help="folder for the figure (default: the run folder)")
    p.add_argument("--overwrite", action="store_true", help="replace figures in another --out")
    p.add_argument("--members", action="store_true", help="an ensemble's: report each member")
    add_tta_arg(p)
    add_data_args(p)


def cmd_evaluate(args: argparse.Namespace) -> int:
    run = Run.open(args.run)
    out = args.out or run.folder  # its own figures drawn again, or in a folder of yours
    own = out.resolve() == run.folder.resolve()
    paths = [out / n for n in REPORT_FIGURES]
    views = run.views(args.tta)
    # Checked and locked before anything is loaded or printed: a refusal does no work.
    with run.writing(paths, by="evaluate", overwrite=args.overwrite or own, lock=False):
        fm = load_data(args)
        report = run_report(
            run.model, run.policy, fm.test_images, fm.test_labels, run.calibration, tta=views
        )
        _print_test(run, report.test, views, each_member=args.members)
        _print_report(report, run.calibration)
        console.print("\n".join(f"wrote {path}" for path in report.save_figures(out)))
    return 0


def _print_test(run: Run, result: EvalResult, views, *, each_member: bool) -> None:
    """The test accuracy and loss; an ensemble's members' mean, or each member's."""
    who = f"{len(result.members)} members: ensemble test" if result.members else "test"
    line = (
        f"checkpoint {run.checkpoint} (step {run.step:,}): {who} accuracy "
        f"[bold]{result.accuracy:.4f}[/], loss {result.loss:.4f} on {result.count:,} images"
        + (f", averaged over {len(views)} views ({tta_name(views)})" if views else "")
    )
    if result.members:
        line += f"; members {result.accuracy_mean:.4f} ± {result.accuracy_std:.4f}"
    console.print(line)
    if result.members and each_member and run.members:
        rows = [
            (
                f"member {i}",
                *(f"{getattr(c, k):g}" for k in ("seed", *BATCHED)),
                f"{m.accuracy:.4f}",
                f"{m.loss:.4f}",
            )
            for i, (c, m) in enumerate(zip(run.members, result.members, strict=True))
        ]
        columns = ("", "seed", "lr", "wd", "smoothing", "accuracy", "loss")
        console.print(table("Members", columns, rows))


def _print_report(report: RunReport, calibration: Calibration | None) -> None:
    """Robustness, per-class accuracy, calibration and the prediction sets."""
    rows = [(name, f"{acc:.4f}") for name, acc in report.robustness.rows()]
    console.print(table("Robustness: the test images moved", ("test images", "accuracy"), rows))
    cm = report.confusion
    names = data_mod.CLASS_NAMES
    other, share = most_confused(cm)
    rows = [
        (f"{c} {names[c]}", f"{recall:.3f}", f"{names[other[c]]} ({share[c]:.1%})")
        for c, recall in enumerate(np.asarray(per_class_accuracy(cm)))
    ]
    console.print(table("Per-class accuracy", ("class", "accuracy", "most confused with"), rows))
    rows = [
        (
            name + (f" (T = {r['temperature']:.3f})" if name != "raw" else ""),
            f"{r['nll']:.4f}",
            f"{r['brier']:.4f}",
            f"{r['ece']:.4f}",
        )
        for name, r in report.calibration.items()
    ]
    console.print(table("Calibration", ("probabilities", "NLL", "Brier", "ECE (15 bins)"), rows))
    if (sets := report.sets) is not None and calibration is not None and calibration.sets:
        kind = "one threshold per class" if calibration.sets.per_class else "one threshold"
        worst = sets.worst_class
        console.print(
            f"Prediction sets ({calibration.sets.coverage:.0%} asked, {kind}): coverage "
            f"{sets.coverage:.4f} on {sets.count:,} test images, worst class "
            f"{names[worst]} {sets.class_coverage[worst]:.4f}; mean size {sets.mean_size:.2f}, "
            f"{sets.singletons:.1%} single classes"
        )
    if calibration is None:
        console.print("(not calibrated: train with --calibrate 5000 to fit a temperature)")
