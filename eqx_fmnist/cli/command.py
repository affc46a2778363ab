"""The `eqx-fmnist` command: data, train, sweep, evaluate, predict, export, cv, audit,
bench. The only part of the package that prints.

Bad input (a missing file, a checkpoint of the wrong kind, an unreadable image, an
invalid flag value or config file) prints one line to stderr and exits with status 2;
an interrupted run exits with 130 after saving a checkpoint. The training flags are
generated from [`TrainConfig`][eqx_fmnist.config.TrainConfig]'s fields (`cli/flags.py`).
"""

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .. import data as data_mod
from ..cache import COMPILE_CACHE_ENV, compile_cache_dir, enable_compile_cache
from ..checkpoint import CheckpointError
from ..dataset import to_datasets
from ..fileio import atomic_write
from ..plots import save_figure
from ..runs import RunError
from .common import UsageError, add_data_args, console, load_data, table
from .evaluate import add_evaluate_parser
from .export import add_export_parser
from .folds import add_audit_parser, add_cv_parser
from .predict import add_predict_parser
from .train import add_sweep_parser, add_train_parser

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


def cmd_bench(args: argparse.Namespace) -> int:
    from ..bench import run_benchmark  # imported on use: it brings in the baselines

    data = to_datasets(load_data(args))
    with console.status("benchmarking ...") as status:
        report = run_benchmark(
            data, quick=args.quick, repeats=args.repeats,
            progress=lambda what: status.update(f"measuring {what} ..."),
        )  # fmt: skip
    console.print(report.to_markdown(), markup=False, highlight=False, soft_wrap=True)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        with atomic_write(args.out / "throughput.md", "w") as f:
            f.write(report.to_markdown())
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

    add_train_parser(sub)
    add_sweep_parser(sub)
    add_export_parser(sub)
    add_evaluate_parser(sub)
    add_predict_parser(sub)
    add_cv_parser(sub)
    add_audit_parser(sub)

    p = sub.add_parser(
        "bench", help="training throughput of every path, in one process (--quick: a smoke run)"
    )
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
