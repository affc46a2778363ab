"""The `eqx-fmnist` command: data, train, evaluate, predict, bench. The only module that prints.

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
import jax.numpy as jnp
import numpy as np
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from . import data as data_mod
from .bench.profile import IntervalProfiler
from .cache import COMPILE_CACHE_ENV, compile_cache_dir, enable_compile_cache
from .checkpoint import CheckpointError, load_checkpoint
from .dataset import to_datasets
from .evaluate import (
    confusion_matrix,
    evaluate,
    most_confused,
    per_class_accuracy,
    predict,
    predict_proba,
)
from .flags import add_config_flags, config_from_args, given_flags
from .plots import plot_confusion_matrix, save_figure
from .runs import (
    CHECKPOINT_NAME,
    TOKENS_PER_EXAMPLE,
    CheckpointEvery,
    Interrupted,
    RunError,
    RunFolder,
    default_folder,
)
from .train import NonFiniteError, fit

console = Console()
err_console = Console(stderr=True)


class UsageError(Exception):
    """Bad input from the command line: one line on stderr, exit status 2."""


# --------------------------------------------------------------------------- data


def _add_data_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", help="the folder with the four IDX files (no other is searched)")
    p.add_argument("--no-download", action="store_true", help="fail instead of downloading")


def _load_data(args: argparse.Namespace) -> data_mod.FashionMNIST:
    """Load the data, showing a download progress bar if a download happens."""
    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn())
    with Progress(*columns, TimeRemainingColumn(), console=err_console, transient=True) as bar:
        tasks: dict[str, int] = {}

        def report(name: str, done: int, total: int | None) -> None:
            if name not in tasks:
                tasks[name] = bar.add_task(f"downloading {name}", total=total)
            bar.update(tasks[name], completed=done)

        return data_mod.load_fashion_mnist(
            args.data_dir, download=not args.no_download, progress=report
        )


def cmd_data(args: argparse.Namespace) -> int:
    fm = _load_data(args)
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
    table = _table("Fashion-MNIST splits", ("", "train", "test"), rows)
    console.print(table)
    return 0


# --------------------------------------------------------------------------- train


def _checkpoint_path(arg: str) -> Path:
    path = Path(arg)
    path = path / CHECKPOINT_NAME if path.is_dir() else path
    if not path.is_file():
        raise UsageError(f"no checkpoint at {path}; give a run folder or a {CHECKPOINT_NAME} file.")
    return path


def cmd_train(args: argparse.Namespace) -> int:
    every = CheckpointEvery.parse(args.checkpoint_every)
    resume = None
    if args.resume:
        if given_flags(args):
            raise UsageError(
                "--resume continues the saved run with its saved config; "
                f"drop {' '.join(given_flags(args))}."
            )
        resume = load_checkpoint(_checkpoint_path(args.resume))
        config, out = resume.config, args.out or _checkpoint_path(args.resume).parent
    else:
        config, out = config_from_args(args), args.out or default_folder()
    fm = _load_data(args)
    # In a multi-process run every process trains; only process 0 keeps the run folder.
    scratch = None if jax.process_index() == 0 else tempfile.TemporaryDirectory()
    if scratch is not None:
        out, args.overwrite, console.quiet = Path(scratch.name), True, True
    num_train, start = len(fm.train_images) - config.validation_size, resume.step if resume else 0
    total = config.total_steps(num_train)
    folder = RunFolder(out, config, num_train=num_train, start_step=start, overwrite=args.overwrite,
                       checkpoint_every=every, tensorboard=args.tensorboard)  # fmt: skip
    with folder as run, run.stop_on_signals():
        length = (
            f"{config.epochs} epochs ({total:,} steps)" if config.epochs else f"{total:,} steps"
        )
        console.print(
            f"run folder [bold]{out}[/]: {length}, {config.precision}, seed "
            f"{config.seed}, checkpoint every {every}\ndata: {fm.source} ({fm.origin})"
            + (f"\nresuming at step {start:,} of {total:,}" if start else ""),
            highlight=False,
        )
        columns = (TextColumn("[bold]train[/]"), BarColumn(), TextColumn("step {task.completed:,.0f}/{task.total:,.0f}"))  # fmt: skip
        with Progress(*columns, TextColumn("{task.fields[m]}"), console=console) as bar:
            task = bar.add_task("train", total=total, completed=start, m="compiling ...")

            def show(r, _):
                m = f"loss {r['loss']:.4f}  acc {r['accuracy']:.3f}  {r['examples_per_sec']:,.0f} ex/s"
                m += f"  valid {r['valid_accuracy']:.4f}" if "valid_accuracy" in r else ""
                bar.update(task, completed=r["step"], m=m)

            callbacks = [show, run.callback]
            if args.profile:
                intervals = -(-total // (config.log_every or num_train // config.batch_size))
                callbacks.append(profiler := IntervalProfiler(run.folder / "profile", intervals))
            try:
                result = fit(
                    config, to_datasets(fm), state=resume and resume.state, callback=callbacks
                )
            except (Interrupted, KeyboardInterrupt, NonFiniteError) as e:
                bar.stop()
                return _stopped(e, run)
            finally:
                if args.profile and profiler.stop() is not None:
                    console.print(f"profile: {profiler.trace} (open it at https://ui.perfetto.dev)")
        run.finish(result, fm)
    _print_results(result, out)
    return 0


def _stopped(e: BaseException, run: RunFolder) -> int:
    """Say why training stopped and what was kept; the exit status."""
    if isinstance(e, NonFiniteError):
        kept = "no checkpoint was written"
        if run.saved_step:
            kept = f"the last checkpoint (step {run.saved_step:,}) is {run.checkpoint}"
        print(f"eqx-fmnist train: error: {e} No result was written; {kept}.", file=sys.stderr)
        return 1
    if run.saved_step:
        how = f"continue with `eqx-fmnist train --resume {run.checkpoint}`"
        print(f"eqx-fmnist train: {e or 'interrupted'}; {how}.", file=sys.stderr)
    else:
        print("eqx-fmnist train: interrupted before the first checkpoint.", file=sys.stderr)
    return 130


def _table(title: str, columns: Sequence[str], rows) -> Table:
    table = Table(title=title)
    for i, name in enumerate(columns):
        table.add_column(name, justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*row)
    return table


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
    console.print(_table("Results", ("metric", "value"), rows))
    console.print(
        f"tokens/sec is a projection: {TOKENS_PER_EXAMPLE} tokens (7 x 7 patches) per image."
    )
    console.print(
        f"wrote {out}/: config.json, history.jsonl, summary.json, {CHECKPOINT_NAME}, figures"
    )


# --------------------------------------------------------------------------- evaluate, predict, bench


def cmd_evaluate(args: argparse.Namespace) -> int:
    path = _checkpoint_path(args.run)
    ckpt, fm = load_checkpoint(path), _load_data(args)
    (_, test), model, policy = to_datasets(fm), ckpt.state.model, ckpt.state.policy
    result = evaluate(model, test, policy=policy)
    cm = np.asarray(confusion_matrix(fm.test_labels, predict(model, test.images, policy=policy)))
    console.print(
        f"checkpoint {path} (step {ckpt.step:,}): test accuracy [bold]{result.accuracy:.4f}[/], "
        f"loss {result.loss:.4f} on {result.count:,} images"
    )
    names, (other, share) = data_mod.CLASS_NAMES, most_confused(cm)
    rows = [
        (f"{c} {names[c]}", f"{recall:.3f}", f"{names[other[c]]} ({share[c]:.1%})")
        for c, recall in enumerate(np.asarray(per_class_accuracy(cm)))
    ]
    console.print(_table("Per-class accuracy", ("class", "accuracy", "most confused with"), rows))
    out = args.out or path.parent
    out.mkdir(parents=True, exist_ok=True)
    console.print(f"wrote {save_figure(plot_confusion_matrix(cm), out / 'confusion_matrix.png')}")
    return 0


def cmd_predict(args: argparse.Namespace) -> int:
    ckpt = load_checkpoint(_checkpoint_path(args.checkpoint))
    images = np.stack([data_mod.load_image(p, invert=args.invert) for p in args.images])
    flat = jnp.asarray(images.reshape(len(images), -1))
    probs = np.asarray(predict_proba(ckpt.state.model, flat, policy=ckpt.state.policy))
    for path, p in zip(args.images, probs, strict=True):
        top = np.argsort(p)[::-1][: args.top]
        guesses = ", ".join(f"{data_mod.CLASS_NAMES[c]} {p[c]:.1%}" for c in top)
        console.print(f"{path}: {guesses}", markup=False, highlight=False)
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from .bench import run_benchmark

    data = to_datasets(_load_data(args))
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
    _add_data_args(p)

    p = sub.add_parser("train", help="train, evaluate, and write a run folder with figures")
    p.set_defaults(func=cmd_train)
    add_config_flags(p)
    r = p.add_argument_group("run folder")
    r.add_argument("--out", type=Path, help="run folder (default: runs/<timestamp>)")
    r.add_argument("--overwrite", action="store_true", help="reuse a run folder that has results")
    r.add_argument("--resume", metavar="CHECKPOINT", help="continue a run from its checkpoint")
    every = "checkpoint cadence: 60s, 5m or 500steps; and at the end, and on Ctrl-C (60s)"
    r.add_argument("--checkpoint-every", default="60s", help=every)
    r.add_argument(
        "--tensorboard", action="store_true", help="TensorBoard scalars in RUN/tensorboard"
    )
    r.add_argument(
        "--profile", action="store_true", help="Perfetto trace of intervals 2-3 in RUN/profile"
    )
    _add_data_args(p)

    p = sub.add_parser("evaluate", help="test metrics, per-class table, confusion matrix")
    p.set_defaults(func=cmd_evaluate)
    p.add_argument("run", metavar="RUN_DIR_OR_CHECKPOINT")
    p.add_argument("--out", type=Path, help="folder for the figure (default: the run folder)")
    _add_data_args(p)

    p = sub.add_parser("predict", help="classify your own images (PNG or JPEG)")
    p.set_defaults(func=cmd_predict)
    p.add_argument("checkpoint", metavar="RUN_DIR_OR_CHECKPOINT")
    p.add_argument("images", metavar="IMAGE", nargs="+")
    p.add_argument("--invert", action="store_true", help="for dark items on a light background")
    p.add_argument("--top", type=int, default=3, help="classes to show per image (3)")

    p = sub.add_parser("bench", help="measure training throughput (a short run by default)")
    p.set_defaults(func=cmd_bench)
    p.add_argument("--quick", action="store_true", help="tiny sizes, seconds not minutes")
    p.add_argument("--repeats", type=int, default=3, help="timed repetitions per variant (3)")
    p.add_argument("--out", type=Path, help="also write throughput.md and throughput.png here")
    _add_data_args(p)
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
