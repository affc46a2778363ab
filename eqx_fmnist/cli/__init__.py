"""The `eqx-fmnist` command: data, train, sweep, evaluate, predict, export, bench. The
only module that prints.

Bad input (a missing file, a checkpoint of the wrong kind, an unreadable image, an
invalid flag value or config file) prints one line to stderr and exits with status 2;
an interrupted run exits with 130 after saving a checkpoint. The training flags are
generated from [`TrainConfig`][eqx_fmnist.config.TrainConfig]'s fields.
"""

import argparse
import logging
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import jax
import numpy as np

from .. import data as data_mod
from ..cache import COMPILE_CACHE_ENV, compile_cache_dir, enable_compile_cache
from ..calibration import CALIBRATION_FILE, Calibration, calibration_report
from ..checkpoint import CheckpointError, load_checkpoint
from ..dataset import to_datasets
from ..ensemble import fit_members
from ..evaluate import (
    confusion_matrix,
    evaluate,
    most_confused,
    per_class_accuracy,
    predict_logits,
)
from ..flags import add_config_flags, config_from_args, given_flags
from ..plots import plot_confusion_matrix, save_figure
from ..runs import (
    CHECKPOINT_NAME,
    TOKENS_PER_EXAMPLE,
    CheckpointEvery,
    RunError,
    RunFolder,
    default_folder,
)
from ..train import fit
from .common import (
    UsageError,
    add_data_args,
    checkpoint_path,
    console,
    load_data,
    table,
    train_with_progress,
)
from .export import add_export_parser
from .members import (
    add_sweep_parser,
    describe_seeds,
    evaluate_members,
    print_ensemble,
    seed_members,
)
from .predict import add_predict_parser

# --------------------------------------------------------------------------- data


def cmd_data(args: argparse.Namespace) -> int:
    fm = load_data(args)
    console.print(f"Fashion-MNIST from [bold]{fm.source}[/] ({fm.origin}); checksums verified.")
    splits = ((fm.train_images, fm.train_labels), (fm.test_images, fm.test_labels))
    counts = [np.bincount(labels, minlength=data_mod.NUM_CLASSES) for _, labels in splits]
    rows = [
        ("images", *(f"{len(images):,}" for images, _ in splits)),
        ("image shape", *(" x ".join(map(str, im.shape[1:])) for im, _ in splits)),
        ("labels", *(f"{len(labels):,}" for _, labels in splits)),
        *(
            (f"{c} {name}", *(f"{k[c]:,}" for k in counts))
            for c, name in enumerate(data_mod.CLASS_NAMES)
        ),
    ]
    console.print(table("Fashion-MNIST splits", ("", "train", "test"), rows))
    return 0


# --------------------------------------------------------------------------- train


def cmd_train(args: argparse.Namespace) -> int:
    every = CheckpointEvery.parse(args.checkpoint_every)
    resume = None
    if args.resume:
        given = given_flags(args) + ["--seeds"] * (args.seeds is not None)
        if given:
            raise UsageError(
                f"--resume continues the saved run with its saved config; drop {' '.join(given)}."
            )
        resume = load_checkpoint(checkpoint_path(args.resume))
        config, members = resume.config, resume.members
        out = args.out or checkpoint_path(args.resume).parent
    else:
        config, out = config_from_args(args), args.out or default_folder()
        members = None if args.seeds is None else seed_members(config, args.seeds)
    fm = load_data(args)
    # In a multi-process run every process trains; only process 0 keeps the run folder.
    scratch = None if jax.process_index() == 0 else tempfile.TemporaryDirectory()
    if scratch is not None:
        out, args.overwrite, console.quiet = Path(scratch.name), True, True
    num_train, start = config.num_train(len(fm.train_images)), resume.step if resume else 0
    total = config.total_steps(num_train)
    folder = RunFolder(out, config, num_train=num_train, start_step=start, overwrite=args.overwrite,
                       checkpoint_every=every, tensorboard=args.tensorboard, members=members)  # fmt: skip
    with folder as run, run.stop_on_signals():
        length = (
            f"{config.epochs} epochs ({total:,} steps)" if config.epochs else f"{total:,} steps"
        )
        who = f"seed {config.seed}"
        if members:
            who = f"{len(members)} members in one program (seeds {describe_seeds(members)})"
        console.print(
            f"run folder [bold]{out}[/]: {length}, {config.precision}, {who}, checkpoint "
            f"every {every}\ndata: {fm.source} ({fm.origin})"
            + (f"\nresuming at step {start:,} of {total:,}" if start else ""),
            highlight=False,
        )
        intervals = -(-total // (config.log_every or num_train // config.batch_size))

        def train(callbacks):
            state = resume and resume.state
            if members:
                return fit_members(members, to_datasets(fm), state=state, callback=callbacks)
            return fit(config, to_datasets(fm), state=state, callback=callbacks)

        result = train_with_progress(
            run, train, total=total, start=start,
            profile_intervals=intervals if args.profile else None,
        )  # fmt: skip
        if isinstance(result, int):
            return result
        run.finish(result, fm)
    if members:
        print_ensemble(result, out)
    else:
        _print_results(result, out)
    return 0


def _print_results(result, out: Path) -> None:
    eps = result.examples_per_sec
    rows = [
        ("test accuracy", f"{result.test.accuracy:.4f}"),
        ("test loss", f"{result.test.loss:.4f}"),
        ("test images", f"{result.test.count:,}"),
        ("examples/sec", f"{eps:,.0f}"),
        ("tokens/sec (projected)", f"{eps * TOKENS_PER_EXAMPLE:,.0f}"),
        ("compile seconds", f"{result.compile_seconds:.2f}"),
        ("train seconds", f"{result.train_seconds:.2f}"),
    ]
    console.print(table("Results", ("metric", "value"), rows))
    console.print(
        f"tokens/sec is a projection: {TOKENS_PER_EXAMPLE} tokens (7 x 7 patches) per image."
    )
    console.print(
        f"wrote {out}/: config.json, history.jsonl, summary.json, {CHECKPOINT_NAME}, figures"
    )


# --------------------------------------------------------------------------- evaluate, predict, bench


def cmd_evaluate(args: argparse.Namespace) -> int:
    path = checkpoint_path(args.run)
    ckpt, fm = load_checkpoint(path), load_data(args)
    (_, test), model, policy = to_datasets(fm), ckpt.state.model, ckpt.state.policy
    calibration = None
    if ckpt.members is not None:
        console.print(f"checkpoint {path} (step {ckpt.step:,})")
        logits = evaluate_members(ckpt, test, show_members=args.members)
    else:
        result = evaluate(model, test, policy=policy)
        logits = np.asarray(predict_logits(model, test.images, policy=policy), np.float32)
        console.print(
            f"checkpoint {path} (step {ckpt.step:,}): test accuracy "
            f"[bold]{result.accuracy:.4f}[/], loss {result.loss:.4f} on {result.count:,} images"
        )
        if (path.parent / CALIBRATION_FILE).is_file():
            calibration = Calibration.load(path.parent / CALIBRATION_FILE)
    cm = np.asarray(confusion_matrix(fm.test_labels, logits.argmax(-1)))
    names, (other, share) = data_mod.CLASS_NAMES, most_confused(cm)
    rows = [
        (f"{c} {names[c]}", f"{recall:.3f}", f"{names[other[c]]} ({share[c]:.1%})")
        for c, recall in enumerate(np.asarray(per_class_accuracy(cm)))
    ]
    console.print(table("Per-class accuracy", ("class", "accuracy", "most confused with"), rows))
    report, reliability = calibration_report(logits, fm.test_labels, calibration)
    rows = [
        (name + (f" (T = {r['temperature']:.3f})" if name != "raw" else ""),
         f"{r['nll']:.4f}", f"{r['brier']:.4f}", f"{r['ece']:.4f}")
        for name, r in report.items()
    ]  # fmt: skip
    console.print(table("Calibration", ("probabilities", "NLL", "Brier", "ECE (15 bins)"), rows))
    if calibration is None and ckpt.members is None:
        console.print("(not calibrated: train with --calibrate 5000 to fit a temperature)")
    out = args.out or path.parent
    out.mkdir(parents=True, exist_ok=True)
    for name, figure in (("confusion_matrix.png", plot_confusion_matrix(cm)),
                         ("reliability.png", reliability)):  # fmt: skip
        console.print(f"wrote {save_figure(figure, out / name)}")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from .bench import run_benchmark

    data = to_datasets(load_data(args))
    with console.status("benchmarking ...") as status:
        report = run_benchmark(
            data, quick=args.quick, repeats=args.repeats,
            progress=lambda what: status.update(f"measuring {what} ..."),
        )  # fmt: skip
    console.print(report.to_markdown(), markup=False, highlight=False)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "throughput.md").write_text(report.to_markdown())
        save_figure(report.figure(), args.out / "throughput.png")
        console.print(f"wrote {args.out}/throughput.md and throughput.png")
    return 0


# --------------------------------------------------------------------------- main


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr (status 2), like every error."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="eqx-fmnist", description="Train and inspect an Equinox MLP on Fashion-MNIST."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    no_cache = f"do not keep or reuse compiled programs (see ${COMPILE_CACHE_ENV})"
    parser.add_argument("--no-compile-cache", action="store_true", help=no_cache)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("data", help="find or download the data, verify it, show the splits")
    p.set_defaults(func=cmd_data)
    add_data_args(p)

    p = sub.add_parser("train", help="train, evaluate, and write a run folder with figures")
    p.set_defaults(func=cmd_train)
    add_config_flags(p)
    r = p.add_argument_group("run folder")
    r.add_argument("--out", type=Path, help="run folder (default: runs/<timestamp>)")
    r.add_argument("--overwrite", action="store_true", help="reuse a run folder that has results")
    r.add_argument("--resume", metavar="CHECKPOINT", help="continue a run from its checkpoint")
    seeds = "train N members (seeds SEED to SEED+N-1) as one program: an ensemble"
    r.add_argument("--seeds", type=int, metavar="N", help=seeds)
    every = "checkpoint cadence: 60s, 5m or 500steps; and at the end, and on Ctrl-C (60s)"
    r.add_argument("--checkpoint-every", default="60s", help=every)
    r.add_argument(
        "--tensorboard", action="store_true", help="TensorBoard scalars in RUN/tensorboard"
    )
    r.add_argument(
        "--profile", action="store_true", help="Perfetto trace of intervals 2-3 in RUN/profile"
    )
    add_data_args(p)

    add_sweep_parser(sub)
    add_export_parser(sub)

    p = sub.add_parser("evaluate", help="test metrics, per-class table, confusion matrix")
    p.set_defaults(func=cmd_evaluate)
    p.add_argument("run", metavar="RUN_DIR_OR_CHECKPOINT")
    p.add_argument("--out", type=Path, help="folder for the figure (default: the run folder)")
    p.add_argument("--members", action="store_true", help="an ensemble's: report each member")
    add_data_args(p)

    add_predict_parser(sub)

    p = sub.add_parser("bench", help="measure training throughput (a short run by default)")
    p.set_defaults(func=cmd_bench)
    p.add_argument("--quick", action="store_true", help="tiny sizes, seconds not minutes")
    p.add_argument("--repeats", type=int, default=3, help="timed repetitions per variant (3)")
    p.add_argument("--out", type=Path, help="also write throughput.md and throughput.png here")
    add_data_args(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Failures reach the user as the one-line error below; -v shows the story.
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.ERROR,
        format="%(levelname)s %(name)s: %(message)s",
    )
    if not args.no_compile_cache:
        enable_compile_cache(compile_cache_dir())
    try:
        return args.func(args)
    except (UsageError, RunError, CheckpointError, data_mod.DataError, ValueError, OSError) as e:
        # Library errors name the thing and the fix; a traceback adds nothing (unless
        # asked for with --verbose). Anything else is a bug and keeps its traceback.
        if args.verbose:
            raise
        print(f"eqx-fmnist {args.command}: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("eqx-fmnist: interrupted", file=sys.stderr)
        return 130
