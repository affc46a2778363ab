"""The `eqx-fmnist` command: data, train, sweep, evaluate, predict, export, cv, audit.
The only part of the package that prints.

Bad input (a missing file, a checkpoint of the wrong kind, an unreadable image, an
invalid flag value or config file) prints one line to stderr and exits with status 2;
an interrupted run exits with 130 after saving a checkpoint. The training flags are
generated from [`TrainConfig`][eqx_fmnist.config.TrainConfig]'s fields (`cli/flags.py`).
"""

import argparse
import logging
import os
import signal
import sys
import warnings
from collections.abc import Sequence

import jax

from .. import data as data_mod
from ..cache import COMPILE_CACHE_ENV, compile_cache_dir, enable_compile_cache
from ..checkpoint import CheckpointError
from ..fileio import os_error_line
from ..parallel import HEARTBEAT_S, is_lost_process, start_jax
from ..runs import RunError
from ..runs.cadence import why_stopped
from . import evaluate, export, folds, info, predict, train
from .common import UsageError, set_width

EXIT_STATUSES = """exit status:
  0    done
  1    training stopped on a NaN or infinite loss, or on a lost process of a
       multi-process run (--distributed); the last good checkpoint is kept
  2    bad input: a flag, a file, a folder or the data (one line on stderr; nothing written)
  130  interrupted (Ctrl-C, SIGTERM or SIGHUP): once training has begun, after a checkpoint
       (continue with the command it prints); before, nothing to continue
  143  terminated (SIGTERM) while the program was still starting: nothing written"""


ONE_LINE = (UsageError, RunError, CheckpointError, data_mod.DataError, ValueError, ImportError)
"""The library's errors, which name the thing and the fix (an `ImportError`, the extra to
install): one line on stderr, unless `--verbose`. Anything else is a bug and keeps its
traceback."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr (status 2), like every error."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="eqx-fmnist",
        description="Train and inspect an Equinox MLP on Fashion-MNIST.",
        epilog=EXIT_STATUSES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    no_cache = f"do not keep or reuse compiled programs (see ${COMPILE_CACHE_ENV})"
    parser.add_argument("--no-compile-cache", action="store_true", help=no_cache)
    parser.add_argument(
        "--distributed",
        action="store_true",
        help="one process of a multi-process run, started by Slurm (srun) or Open MPI "
        "(mpirun): every process runs the same command with --devices equal to all "
        f"devices; a process silent for {HEARTBEAT_S} s fails the run",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    info.add_data_parser(sub)
    train.add_train_parser(sub)
    train.add_sweep_parser(sub)
    export.add_export_parser(sub)
    evaluate.add_evaluate_parser(sub)
    predict.add_predict_parser(sub)
    folds.add_cv_parser(sub)
    folds.add_audit_parser(sub)
    return parser


def _one_line(message, category, filename, lineno, line=None) -> str:
    """A warning on stderr as one line, as an error is (not a source line under it)."""
    return f"eqx-fmnist: warning: {' '.join(str(message).split())}\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Run `eqx-fmnist` with `argv`, by default this process's own command line: a
    program of its own then, which takes SIGTERM as Ctrl-C (see `EXIT_STATUSES`)."""
    set_width()
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # as typed, for a hint
    # Failures reach the user as the one-line error below; -v shows the story.
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.ERROR,
        format="%(levelname)s %(name)s: %(message)s",
    )
    shown, warnings.formatwarning = warnings.formatwarning, _one_line
    # As a program of its own, SIGTERM raises KeyboardInterrupt, as Ctrl-C does.
    before = signal.signal(signal.SIGTERM, signal.default_int_handler) if argv is None else None
    try:
        status = _run(args)
    finally:
        warnings.formatwarning = shown
        if before is not None:
            signal.signal(signal.SIGTERM, before)
    if status and args.distributed and jax.process_count() > 1:
        # JAX's shutdown waits for every process at a barrier; one that failed alone (or
        # whose peer is gone) would wait there, then abort with a page of log: leave now.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    return status


def _run(args: argparse.Namespace) -> int:
    """The command `args` names, its failures as one line and an exit status."""
    if not args.no_compile_cache:
        enable_compile_cache(compile_cache_dir())
    try:
        alone = "or drop --distributed to train in this process alone"
        start_jax(args.distributed, otherwise=alone)
        return args.func(args)
    except jax.errors.JaxRuntimeError as e:
        if not is_lost_process(e):
            raise
        status, line = why_stopped(e, args.command)
        print(f"eqx-fmnist {args.command}: {line}", file=sys.stderr)
        return status
    except OSError as e:  # the disk, the permissions, a path: the path and what to do
        if args.verbose:
            raise
        line = os_error_line(e, getattr(args, "elsewhere", "--out"))
        print(f"eqx-fmnist {args.command}: error: {line}", file=sys.stderr)
        return 2
    except ONE_LINE as e:
        if args.verbose:
            raise
        print(f"eqx-fmnist {args.command}: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("eqx-fmnist: interrupted", file=sys.stderr)
        return 130
