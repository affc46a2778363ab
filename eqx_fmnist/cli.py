"""The `eqx-fmnist` command: data, train, evaluate, predict, bench. The only module that prints.

Bad input (a missing file, a checkpoint of the wrong kind, an unreadable image, an
invalid flag value) prints one line to stderr and exits with status 2; an interrupted
run exits with 130 after saving what it had.
"""

import argparse
import dataclasses
import datetime
import json
import logging
import os
import signal
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import jax
import numpy as np
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table

from . import data as data_mod
from .bench.measure import TOKENS_PER_EXAMPLE
from .checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from .dataset import to_datasets
from .evaluate import confusion_matrix, evaluate, per_class_accuracy, predict, predict_proba
from .fileio import atomic_write
from .parallel import to_local
from .plots import (
    plot_confusion_matrix,
    plot_examples,
    plot_predictions,
    plot_training_curve,
    save_figure,
)
from .train import SCHEDULES, NonFiniteError, TrainConfig, fit

console = Console()
err_console = Console(stderr=True)


class UsageError(Exception):
    """Bad input from the command line: one line on stderr, exit status 2."""


COMPILE_CACHE_ENV = "EQX_FMNIST_COMPILE_CACHE"


def compile_cache_dir() -> Path | None:
    """Where the command keeps compiled programs: `$EQX_FMNIST_COMPILE_CACHE` if set
    (`off` turns the cache off), else `$XDG_CACHE_HOME/eqx_fmnist/jax-compile`."""
    setting = os.environ.get(COMPILE_CACHE_ENV, "").strip()
    if setting.lower() in ("off", "0", "false", "no"):
        return None
    return Path(setting).expanduser() if setting else data_mod.cache_dir().parent / "jax-compile"


def enable_compile_cache(folder: Path | None) -> None:
    """Keep every compiled XLA program in `folder`, so that the next process with the same
    programs loads them instead of compiling (JAX's persistent compilation cache)."""
    if folder is None:
        return
    jax.config.update("jax_compilation_cache_dir", str(folder))
    # Cache every program: the small ones (evaluation, initialisation) add up too.
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


# --------------------------------------------------------------------------- data


def _add_data_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", help="folder searched first for the four IDX files")
    p.add_argument(
        "--no-download", action="store_true", help="fail instead of downloading missing files"
    )


def _load_data(args: argparse.Namespace, *, verify: bool = True) -> data_mod.FashionMNIST:
    """Load the data, showing a download progress bar if a download happens."""
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=err_console,
        transient=True,
    ) as progress:
        tasks: dict[str, int] = {}

        def report(name: str, done: int, total: int | None) -> None:
            if name not in tasks:
                tasks[name] = progress.add_task(f"downloading {name}", total=total)
            progress.update(tasks[name], completed=done)

        return data_mod.load_fashion_mnist(
            args.data_dir, download=not args.no_download, verify=verify, progress=report
        )


def cmd_data(args: argparse.Namespace) -> int:
    found = data_mod.find_data_dir(args.data_dir)
    fm = _load_data(args, verify=True)
    where = found[0] if found else "downloaded into the user cache"
    console.print(f"Fashion-MNIST from [bold]{fm.source}[/] ({where}); checksums verified.")
    table = Table(title="Fashion-MNIST splits")
    table.add_column("")
    table.add_column("train", justify="right")
    table.add_column("test", justify="right")
    splits = ((fm.train_images, fm.train_labels), (fm.test_images, fm.test_labels))
    table.add_row("images", *(f"{len(images):,}" for images, _ in splits))
    table.add_row("image shape", *(" x ".join(map(str, im.shape[1:])) for im, _ in splits))
    table.add_row("labels", *(f"{len(labels):,}" for _, labels in splits), end_section=True)
    counts = [np.bincount(labels, minlength=data_mod.NUM_CLASSES) for _, labels in splits]
    for c, name in enumerate(data_mod.CLASS_NAMES):
        table.add_row(f"{c} {name}", *(f"{k[c]:,}" for k in counts))
    console.print(table)
    return 0


# --------------------------------------------------------------------------- run folders

CHECKPOINT_NAME = "checkpoint.eqx"
RESULT_FILES = (
    "config.json",
    "history.jsonl",
    "summary.json",
    CHECKPOINT_NAME,
    "examples.png",
    "training_curve.png",
    "predictions.png",
    "confusion_matrix.png",
)


def _write_text(path: Path, text: str) -> None:
    with atomic_write(path, "w") as f:
        f.write(text)


def _read_history(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _checkpoint_path(arg: str) -> Path:
    path = Path(arg)
    if path.is_dir():
        path = path / CHECKPOINT_NAME
    if not path.is_file():
        raise UsageError(f"no checkpoint at {path}; give a run folder or a {CHECKPOINT_NAME} file.")
    return path


# --------------------------------------------------------------------------- train

_CONFIG_FLAGS = {  # flag dest -> TrainConfig field
    "epochs": "epochs",
    "steps": "steps",
    "batch_size": "batch_size",
    "lr": "learning_rate",
    "weight_decay": "weight_decay",
    "schedule": "schedule",
    "warmup_steps": "warmup_steps",
    "hidden": "hidden_sizes",
    "precision": "precision",
    "seed": "seed",
    "log_every": "log_every",
    "grad_clip": "grad_clip",
    "label_smoothing": "label_smoothing",
    "validation_size": "validation_size",
    "devices": "devices",
    "on_nonfinite": "on_nonfinite",
}


def _hidden_sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--hidden must be comma-separated positive ints such as 256,128, not {text!r}"
        ) from None
    if not sizes or any(s <= 0 for s in sizes):
        raise argparse.ArgumentTypeError(f"--hidden sizes must be positive, not {text!r}")
    return sizes


def _add_train_args(p: argparse.ArgumentParser) -> None:
    d = TrainConfig()
    g = p.add_argument_group("training (defaults: the recommended recipe)")
    length = g.add_mutually_exclusive_group()
    length.add_argument("--epochs", type=int, help=f"passes over the training set ({d.epochs})")
    length.add_argument("--steps", type=int, help="optimiser steps instead of epochs")
    g.add_argument("--batch-size", type=int, help=f"examples per step ({d.batch_size})")
    g.add_argument("--lr", type=float, help=f"peak AdamW learning rate ({d.learning_rate})")
    g.add_argument("--weight-decay", type=float, help=f"AdamW weight decay ({d.weight_decay})")
    g.add_argument("--schedule", choices=SCHEDULES, help=f"learning-rate schedule ({d.schedule})")
    g.add_argument("--warmup-steps", type=int, help="warm-up steps (default: 5%% of the run)")
    g.add_argument("--hidden", type=_hidden_sizes, help="hidden sizes, e.g. 256,128")
    g.add_argument("--precision", help=f"policy, e.g. p=f32,c=bf16,o=f32 ({d.precision})")
    g.add_argument("--seed", type=int, help=f"weights and batch order ({d.seed})")
    g.add_argument("--log-every", type=int, help="steps per logging interval (default: an epoch)")
    g.add_argument("--grad-clip", type=float, help="clip gradients to this global norm")
    g.add_argument("--label-smoothing", type=float, help=f"({d.label_smoothing})")
    g.add_argument("--validation-size", type=int, help="hold out this many training images")
    g.add_argument(
        "--devices", type=int, help="data-parallel over this many devices (1; all processes)"
    )
    g.add_argument(
        "--on-nonfinite",
        choices=("raise", "skip"),
        help="a NaN/inf loss or gradient stops the run (raise) or skips the step",
    )
    g.add_argument("--codelab", action="store_true", help="start from the codelab's reference run")
    r = p.add_argument_group("run folder")
    r.add_argument("--out", type=Path, help="run folder (default: runs/<timestamp>)")
    r.add_argument("--overwrite", action="store_true", help="reuse a run folder that has results")
    r.add_argument("--resume", metavar="CHECKPOINT", help="continue a run from its checkpoint")
    r.add_argument(
        "--profile",
        action="store_true",
        help="write a Perfetto trace of logging intervals 2-3 to RUN/profile "
        "(open perfetto_trace.json.gz at ui.perfetto.dev)",
    )


def _config_from_args(args: argparse.Namespace) -> TrainConfig:
    base = TrainConfig.codelab() if args.codelab else TrainConfig()
    overrides = {
        field: getattr(args, flag)
        for flag, field in _CONFIG_FLAGS.items()
        if getattr(args, flag) is not None
    }
    if "steps" in overrides:
        overrides.setdefault("epochs", None)
    if "epochs" in overrides:
        overrides.setdefault("steps", None)
    return dataclasses.replace(base, **overrides)


def _prepare_run_dir(args: argparse.Namespace) -> Path:
    if args.out is not None:
        out = args.out
    else:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        out = Path("runs") / stamp
    existing = [name for name in RESULT_FILES if (out / name).exists()]
    if existing and not args.overwrite:
        raise UsageError(
            f"run folder {out} already holds results ({', '.join(existing)}); "
            "choose another --out, or pass --overwrite."
        )
    out.mkdir(parents=True, exist_ok=True)
    return out


class _RunLock:
    """`DIR/.eqx-fmnist.lock` while a run writes DIR: a second run refuses to share it.

    The lock holds the writer's pid; a lock left by a process that no longer exists
    (killed with SIGKILL) is taken over.
    """

    def __init__(self, folder: Path):
        self.path = folder / ".eqx-fmnist.lock"

    def __enter__(self):
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                try:
                    pid = int(self.path.read_text() or 0)
                    os.kill(pid, 0)
                except (ValueError, ProcessLookupError, FileNotFoundError):
                    self.path.unlink(missing_ok=True)  # stale: its writer is gone
                    continue
                except PermissionError:
                    pass  # alive, another user's
                raise UsageError(
                    f"another run (pid {pid}) is writing to {self.path.parent}; "
                    "choose another --out or wait for it to finish."
                ) from None
            with os.fdopen(fd, "w") as f:
                f.write(str(os.getpid()))
            return self
        raise UsageError(f"cannot lock {self.path.parent}; remove {self.path}.")

    def __exit__(self, *exc):
        self.path.unlink(missing_ok=True)


class _Profiler:
    """A `jax.profiler` trace of logging intervals 2 and 3: the steady state, after the
    first interval (a run of one interval is traced whole)."""

    def __init__(self, folder: Path | None, total_intervals: int):
        self.folder, self.seen, self.on = folder, 0, False
        if folder is not None and total_intervals < 2:
            self._start()

    def _start(self):
        jax.profiler.start_trace(str(self.folder), create_perfetto_trace=True)
        self.on = True

    def after_interval(self):
        self.seen += 1
        if self.folder is not None and self.seen == 1 and not self.on:
            self._start()
        elif self.on and self.seen >= 3:
            self.stop()

    def stop(self):
        if self.on:
            jax.profiler.stop_trace()
            self.on = False

    def trace(self) -> Path | None:
        found = (
            sorted(self.folder.glob("plugins/profile/*/perfetto_trace.json.gz"))
            if self.folder
            else []
        )
        return found[-1] if found else None


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(signal.Signals(signum).name)


def cmd_train(args: argparse.Namespace) -> int:
    resume = None
    if args.resume:
        given = [f"--{f.replace('_', '-')}" for f in _CONFIG_FLAGS if getattr(args, f) is not None]
        if given or args.codelab:
            raise UsageError(
                f"--resume continues the saved run with its saved config; drop {' '.join(given) or '--codelab'}."
            )
        resume = load_checkpoint(_checkpoint_path(args.resume))
        config = resume.config
        if args.out is None:
            args.out = _checkpoint_path(args.resume).parent
        args.overwrite = True  # continuing the run is the point
    else:
        config = _config_from_args(args)
    fm = _load_data(args, verify=True)
    # In a multi-process run (after jax.distributed.initialize) every process trains;
    # only process 0 writes the run folder. The others write into a folder that is
    # deleted when they finish.
    writer = jax.process_index() == 0
    scratch = None if writer else tempfile.TemporaryDirectory()
    if not writer:
        args.out, args.overwrite = Path(scratch.name), True
        console.quiet = True  # one progress bar and one table, from process 0
    out = _prepare_run_dir(args)
    with _RunLock(out):
        return _train(args, config, resume, fm, out)


def _train(args, config: TrainConfig, resume, fm: data_mod.FashionMNIST, out: Path) -> int:
    data = to_datasets(fm)
    _write_text(out / "config.json", config.to_json() + "\n")
    history_path = out / "history.jsonl"
    history = _read_history(history_path)
    start = resume.step if resume else 0
    history = [h for h in history if h["step"] <= start]
    _write_text(history_path, "".join(json.dumps(h) + "\n" for h in history))
    num_train = len(fm.train_images) - config.validation_size
    total = config.total_steps(num_train)
    length = f"{config.epochs} epochs" if config.epochs else f"{config.steps} steps"
    console.print(
        f"run folder [bold]{out}[/]: {length} ({total:,} steps) of batch {config.batch_size}, "
        f"AdamW lr {config.learning_rate:g} {config.schedule}, weight decay "
        f"{config.weight_decay:g}, label smoothing {config.label_smoothing:g}, "
        f"hidden {config.hidden_sizes}, {config.precision}, seed {config.seed}",
        highlight=False,
    )
    if resume:
        console.print(f"resuming at step {start:,} of {total:,}")
    checkpoint = out / CHECKPOINT_NAME
    last_saved = {"step": start}

    with Progress(
        TextColumn("[bold]train[/]"),
        BarColumn(),
        TextColumn("step {task.completed:,.0f}/{task.total:,.0f}"),
        TextColumn("{task.fields[metrics]}"),
        TimeRemainingColumn(),
        console=console,
    ) as progress:
        task = progress.add_task("train", total=total, completed=start, metrics="compiling ...")

        interval = config.log_every or num_train // config.batch_size
        profiler = _Profiler(out / "profile" if args.profile else None, -(-total // interval))

        def callback(entry, state):
            profiler.after_interval()
            # History first, then the checkpoint: a signal between the two leaves a
            # history line past the checkpoint, which --resume drops and retrains;
            # the other order would lose a line for good.
            with history_path.open("a") as f:
                f.write(json.dumps(entry) + "\n")
            save_checkpoint(checkpoint, state, config, num_train=num_train)
            last_saved["step"] = entry["step"]
            metrics = (
                f"loss {entry['loss']:.4f}  acc {entry['accuracy']:.3f}  "
                f"{entry['examples_per_sec']:,.0f} ex/s"
            )
            if "valid_accuracy" in entry:
                metrics += f"  valid {entry['valid_accuracy']:.4f}"
            progress.update(task, completed=entry["step"], metrics=metrics)

        previous = signal.signal(signal.SIGTERM, _raise_interrupt)
        try:
            result = fit(config, data, state=resume.state if resume else None, callback=callback)
        except KeyboardInterrupt as e:
            progress.stop()
            name = str(e) or "SIGINT"
            saved = last_saved["step"]
            where = (
                f"the checkpoint at step {saved:,} is in {checkpoint}; continue with "
                f"`eqx-fmnist train --resume {checkpoint}`"
                if checkpoint.exists()
                else "no interval had finished, so there is no checkpoint"
            )
            print(f"eqx-fmnist train: interrupted ({name}); {where}.", file=sys.stderr)
            return 130
        except NonFiniteError as e:
            progress.stop()
            saved = last_saved["step"]
            kept = (
                f"the last good checkpoint (step {saved:,}) is {checkpoint}"
                if checkpoint.exists()
                else "no interval had finished, so there is no checkpoint"
            )
            print(f"eqx-fmnist train: error: {e} No result was written; {kept}.", file=sys.stderr)
            return 1
        finally:
            signal.signal(signal.SIGTERM, previous)
            profiler.stop()

    model, policy = to_local(result.model), result.state.policy
    _, test = data
    pred = np.asarray(predict(model, test.images, policy=policy))
    cm = np.asarray(confusion_matrix(fm.test_labels, pred))
    full_history = _read_history(history_path)
    summary = {
        "test_loss": result.test.loss,
        "test_accuracy": result.test.accuracy,
        "test_count": result.test.count,
        "validation_accuracy": result.validation.accuracy if result.validation else None,
        "steps": int(result.state.step),
        "examples_per_sec": result.examples_per_sec,
        "projected_tokens_per_sec": result.examples_per_sec * TOKENS_PER_EXAMPLE,
        "tokens_per_example": TOKENS_PER_EXAMPLE,
        "compile_seconds": result.compile_seconds,
        "train_seconds": result.train_seconds,
        "load_seconds": result.load_seconds,
        "per_class_accuracy": dict(
            zip(data_mod.CLASS_NAMES, map(float, per_class_accuracy(cm)), strict=True)
        ),
        "config": config.to_dict(),
        "checkpoint": CHECKPOINT_NAME,
    }
    _write_text(out / "summary.json", json.dumps(summary, indent=2) + "\n")
    save_figure(plot_examples(fm.train_images, fm.train_labels), out / "examples.png")
    save_figure(
        plot_training_curve(
            [h["step"] for h in full_history],
            [h["loss"] for h in full_history],
            [h["accuracy"] for h in full_history],
            title=f"Training: {config.precision}, batch {config.batch_size}",
        ),
        out / "training_curve.png",
    )
    save_figure(plot_predictions(fm.test_images, fm.test_labels, pred), out / "predictions.png")
    save_figure(plot_confusion_matrix(cm), out / "confusion_matrix.png")

    table = Table(title="Results")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_row("test accuracy", f"{result.test.accuracy:.4f}")
    table.add_row("test loss", f"{result.test.loss:.4f}")
    table.add_row("test images", f"{result.test.count:,}")
    table.add_row("examples/sec", f"{result.examples_per_sec:,.0f}")
    table.add_row(
        "tokens/sec (projected)",
        f"{result.examples_per_sec * TOKENS_PER_EXAMPLE:,.0f}",
    )
    table.add_row("compile seconds", f"{result.compile_seconds:.2f}")
    table.add_row("train seconds", f"{result.train_seconds:.2f}")
    console.print(table)
    console.print(
        f"tokens/sec is a projection: {TOKENS_PER_EXAMPLE} tokens (7 x 7 patches) per image."
    )
    console.print(f"wrote {out}/: {', '.join(RESULT_FILES)}")
    if profiler.trace() is not None:
        console.print(f"profile: {profiler.trace()} (open it at https://ui.perfetto.dev)")
    return 0


# --------------------------------------------------------------------------- evaluate


def cmd_evaluate(args: argparse.Namespace) -> int:
    path = _checkpoint_path(args.run)
    ckpt = load_checkpoint(path)
    fm = _load_data(args)
    _, test = to_datasets(fm)
    policy = ckpt.state.policy
    result = evaluate(ckpt.state.model, test, policy=policy)
    pred = np.asarray(predict(ckpt.state.model, test.images, policy=policy))
    cm = np.asarray(confusion_matrix(fm.test_labels, pred))
    recall = np.asarray(per_class_accuracy(cm))
    console.print(
        f"checkpoint {path} (step {ckpt.step:,}): test accuracy [bold]{result.accuracy:.4f}[/], "
        f"loss {result.loss:.4f} on {result.count:,} images"
    )
    table = Table(title="Per-class accuracy")
    table.add_column("class")
    table.add_column("accuracy", justify="right")
    table.add_column("most confused with")
    for c, name in enumerate(data_mod.CLASS_NAMES):
        row = cm[c].copy()
        row[c] = -1
        other = int(row.argmax())
        table.add_row(
            f"{c} {name}",
            f"{recall[c]:.3f}",
            f"{data_mod.CLASS_NAMES[other]} ({cm[c, other] / max(cm[c].sum(), 1):.1%})",
        )
    console.print(table)
    out = args.out or path.parent
    out.mkdir(parents=True, exist_ok=True)
    figure = save_figure(plot_confusion_matrix(cm), out / "confusion_matrix.png")
    console.print(f"wrote {figure}")
    return 0


# --------------------------------------------------------------------------- predict


def load_image(path: str | os.PathLike, *, invert: bool = False) -> np.ndarray:
    """A user's image as Fashion-MNIST pixels: grayscale, 28 x 28, light item on dark.

    The image is padded to a square with its border colour, so the item keeps its
    aspect ratio, then resized. `invert` turns a dark-on-light photo into light-on-dark.
    """
    from PIL import Image, ImageOps, UnidentifiedImageError

    path = Path(path)
    try:
        with Image.open(path) as im:
            gray = ImageOps.exif_transpose(im).convert("L")
    except FileNotFoundError:
        raise UsageError(f"no image at {path}.") from None
    except (UnidentifiedImageError, OSError) as e:
        raise UsageError(f"{path} is not a readable image (PNG or JPEG): {e}") from None
    pixels = np.asarray(gray)
    border = int(np.median(np.concatenate([pixels[0], pixels[-1], pixels[:, 0], pixels[:, -1]])))
    side = max(gray.size)
    square = Image.new("L", (side, side), border)
    square.paste(gray, ((side - gray.size[0]) // 2, (side - gray.size[1]) // 2))
    small = np.asarray(square.resize((28, 28), Image.Resampling.LANCZOS), dtype=np.uint8)
    return 255 - small if invert else small


def cmd_predict(args: argparse.Namespace) -> int:
    ckpt = load_checkpoint(_checkpoint_path(args.checkpoint))
    images = np.stack([load_image(p, invert=args.invert) for p in args.images])
    import jax.numpy as jnp

    probs = np.asarray(
        predict_proba(
            ckpt.state.model,
            jnp.asarray(images.reshape(len(images), -1)),
            policy=ckpt.state.policy,
        )
    )
    for path, p in zip(args.images, probs, strict=True):
        top = np.argsort(p)[::-1][: args.top]
        guesses = ", ".join(f"{data_mod.CLASS_NAMES[c]} {p[c]:.1%}" for c in top)
        console.print(f"{path}: {guesses}", markup=False, highlight=False)
    return 0


# --------------------------------------------------------------------------- bench


def cmd_bench(args: argparse.Namespace) -> int:
    from .bench import run_benchmark, time_to_accuracy

    fm = _load_data(args)
    with console.status("benchmarking ...") as status:
        report = run_benchmark(
            to_datasets(fm),
            quick=args.quick,
            repeats=args.repeats,
            progress=lambda what: status.update(f"measuring {what} ..."),
        )
        reached = None
        if args.time_to_accuracy:
            status.update("timing the recommended recipe to 0.88 and 0.90 test accuracy ...")
            reached, final = time_to_accuracy(fm)
    console.print(report.to_markdown(), markup=False, highlight=False)
    if reached is not None:
        for target, seconds in reached.items():
            when = "not reached" if seconds is None else f"{seconds:.1f} s after fit() was called"
            console.print(f"test accuracy {target:.2f}: {when}")
        console.print(f"final test accuracy {final:.4f}")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        _write_text(args.out / "throughput.md", report.to_markdown())
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
        prog="eqx-fmnist",
        description="Train and inspect an Equinox MLP on Fashion-MNIST.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    parser.add_argument(
        "--no-compile-cache",
        action="store_true",
        help="compile from scratch: do not keep or reuse compiled programs in "
        f"${COMPILE_CACHE_ENV} or the user cache (jax-compile)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("data", help="find or download the data, verify it, show the splits")
    _add_data_args(p)
    p.set_defaults(func=cmd_data)

    p = sub.add_parser("train", help="train, evaluate, and write a run folder with figures")
    _add_train_args(p)
    _add_data_args(p)
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("evaluate", help="test metrics, per-class table, confusion matrix")
    p.add_argument("run", metavar="RUN_DIR_OR_CHECKPOINT")
    p.add_argument("--out", type=Path, help="folder for the figure (default: the run folder)")
    _add_data_args(p)
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("predict", help="classify your own images (PNG or JPEG)")
    p.add_argument("checkpoint", metavar="RUN_DIR_OR_CHECKPOINT")
    p.add_argument("images", metavar="IMAGE", nargs="+")
    p.add_argument("--invert", action="store_true", help="for dark items on a light background")
    p.add_argument("--top", type=int, default=3, help="classes to show per image (3)")
    p.set_defaults(func=cmd_predict)

    p = sub.add_parser("bench", help="measure training throughput (a short run by default)")
    p.add_argument("--quick", action="store_true", help="tiny sizes, seconds not minutes")
    p.add_argument("--repeats", type=int, default=3, help="timed repetitions per variant (3)")
    p.add_argument(
        "--time-to-accuracy", action="store_true", help="also time the recipe to 0.88 / 0.90"
    )
    p.add_argument("--out", type=Path, help="also write throughput.md and throughput.png here")
    _add_data_args(p)
    p.set_defaults(func=cmd_bench)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        # Failures reach the user as the one-line error below; -v shows the story.
        level=logging.INFO if args.verbose else logging.ERROR,
        format="%(levelname)s %(name)s: %(message)s",
    )
    if not args.no_compile_cache:
        enable_compile_cache(compile_cache_dir())
    try:
        return args.func(args)
    except (
        UsageError,
        CheckpointError,
        NonFiniteError,
        ValueError,
        TypeError,
        OSError,
    ) as e:
        # Every library error names the thing and the fix; a traceback adds nothing,
        # unless asked for with --verbose.
        if args.verbose:
            raise
        message = " ".join(str(e).split())
        print(f"eqx-fmnist {args.command}: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("eqx-fmnist: interrupted", file=sys.stderr)
        return 130
