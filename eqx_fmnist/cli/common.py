"""What the commands share to speak: the consoles, usage errors, the download bar, the
training progress bar and what to say when training stops, tables."""

import argparse
import errno
import re
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from .. import data as data_mod
from ..config import TrainConfig
from ..data import FashionMNIST
from ..intervals import NonFiniteError
from ..runs import CheckpointEvery, Interrupted, RunFolder
from ..runs.profile import IntervalProfiler
from ..train import Members

console = Console()
err_console = Console(stderr=True)


class UsageError(Exception):
    """Bad input from the command line: one line on stderr, exit status 2."""


def load_data(args: argparse.Namespace) -> data_mod.FashionMNIST:
    """Load the data, showing a download progress bar if a download happens (and
    nothing otherwise: an idle bar would still leave a blank line on stderr)."""
    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn())
    bar: Progress | None = None
    tasks: dict[str, TaskID] = {}

    def report(name: str, done: int, total: int | None) -> None:
        nonlocal bar
        if bar is None:
            bar = Progress(*columns, TimeRemainingColumn(), console=err_console, transient=True)
            bar.start()
        if name not in tasks:
            tasks[name] = bar.add_task(f"downloading {name}", total=total)
        bar.update(tasks[name], completed=done)

    try:
        return data_mod.load_fashion_mnist(
            args.data_dir, download=not args.no_download, progress=report
        )
    finally:
        if bar is not None:
            bar.stop()


def stopped(e: BaseException, run: RunFolder, command: str = "train") -> int:
    """Say why training stopped and what was kept; the exit status."""
    if is_lost_process(e):
        print(f"eqx-fmnist {command}: error: {lost_process(e, run)}", file=sys.stderr)
        return 1
    if isinstance(e, NonFiniteError):
        kept = "no checkpoint was written"
        if run.saved_step:
            kept = f"the last checkpoint (step {run.saved_step:,}) is {run.checkpoint}"
        print(f"eqx-fmnist {command}: error: {e} No result was written; {kept}.", file=sys.stderr)
        return 1
    if run.saved_step:
        how = f"continue with `eqx-fmnist {command} --resume {run.checkpoint}`"
        print(f"eqx-fmnist {command}: {e or 'interrupted'}; {how}.", file=sys.stderr)
    else:
        print(f"eqx-fmnist {command}: interrupted before the first checkpoint.", file=sys.stderr)
    return 130


def is_lost_process(e: BaseException) -> bool:
    """Whether `e` is a collective failing because another process is gone (its Gloo
    connection closed, or the coordinator's heartbeat missed)."""
    text = str(e)
    return (
        isinstance(e, jax.errors.JaxRuntimeError)
        and jax.process_count() > 1
        and any(s in text for s in ("Gloo", "closed by peer", "UNAVAILABLE", "heartbeat"))
    )


def lost_process(e: BaseException, run: RunFolder | None = None) -> str:
    """What to say when another process of a multi-process run is gone."""
    first = re.sub(r"\[[^\]]*\.cc:\d+\] ", "", str(e).strip().splitlines()[0])[:160]
    what = f"another process of this {jax.process_count()}-process run was lost ({first})"
    if run is None or jax.process_index() != 0:
        return f"{what}; process 0 keeps the run folder: start every process again."
    if not run.saved_step:
        return f"{what}; no checkpoint was written: start every process again."
    return (
        f"{what}; the last checkpoint (step {run.saved_step:,}) is {run.checkpoint}: start "
        f"every process again with --resume {run.checkpoint}."
    )


def train_with_progress(
    run: RunFolder,
    train: Callable[[list], Any],
    *,
    total: int,
    start: int,
    command: str = "train",
    profile_intervals: int | None = None,
) -> Any:
    """`train(callbacks)` with a progress bar (the members' means when many train at
    once) and the run folder's callback; the result, or the exit status if it stopped."""
    columns = (
        TextColumn(f"[bold]{command}[/]"),
        BarColumn(),
        TextColumn("step {task.completed:,.0f}/{task.total:,.0f}"),
    )
    with Progress(*columns, TextColumn("{task.fields[m]}"), console=console) as bar:
        task = bar.add_task(command, total=total, completed=start, m="compiling ...")

        def show(r, _):
            m = f"loss {r['loss']:.4f}  acc {r['accuracy']:.3f}  {r['examples_per_sec']:,.0f} ex/s"
            if "members" in r:
                m = f"{len(r['members'])} members: mean {m.replace('ex/s', 'model-ex/s')}"
                valid = [x["valid_accuracy"] for x in r["members"] if "valid_accuracy" in x]
                m += f"  valid best {max(valid):.4f}" if valid else ""
            elif "valid_accuracy" in r:
                m += f"  valid {r['valid_accuracy']:.4f}"
            bar.update(task, completed=r["step"], m=m)

        callbacks = [show, run.callback]
        profiler = None
        if profile_intervals is not None:
            profiler = IntervalProfiler(run.folder / "profile", profile_intervals)
            callbacks.append(profiler)
        try:
            return train(callbacks)
        except (Interrupted, KeyboardInterrupt, NonFiniteError, jax.errors.JaxRuntimeError) as e:
            if isinstance(e, jax.errors.JaxRuntimeError) and not is_lost_process(e):
                raise
            bar.stop()
            return stopped(e, run, command)
        finally:
            if profiler is not None and profiler.stop() is not None:
                console.print(f"profile: {profiler.trace} (open it at https://ui.perfetto.dev)")


def table(title: str, columns: Sequence[str], rows) -> Table:
    t = Table(title=title)
    for i, name in enumerate(columns):
        t.add_column(name, justify="left" if i == 0 else "right")
    for row in rows:
        t.add_row(*row)
    return t


def train_in_folder(
    args: argparse.Namespace,
    out: Path,
    config: TrainConfig,
    train: Callable[[list], Any],
    finish: Callable[[RunFolder, Any], object],
    *,
    data: FashionMNIST,
    num_train: int,
    members: Members | None,
    start: int,
    command: str,
    describe: Callable[[int], str],
    teacher: Path | None = None,
    resume_from: Path | None = None,
    tensorboard: bool = False,
    profile: bool = False,
) -> Any:
    """Keep a run folder (`--out`, `--overwrite`, `--checkpoint-every`) and train in it
    with a progress bar: `train(callbacks)`, then `finish(run, result)`; the result, or
    the exit status of a stopped run. `describe(total_steps)` says what trains."""
    every = CheckpointEvery.parse(args.checkpoint_every)
    # In a multi-process run every process trains; only process 0 keeps the run folder.
    scratch = None if jax.process_index() == 0 else tempfile.TemporaryDirectory()
    if scratch is not None:
        out, args.overwrite, console.quiet = Path(scratch.name), True, True
    folder = RunFolder(
        out,
        config,
        num_train=num_train,
        start_step=start,
        overwrite=args.overwrite,
        checkpoint_every=every,
        tensorboard=tensorboard,
        members=members,
        teacher=teacher,
        resume_from=resume_from,
    )
    total = folder.plan.total_steps
    with folder as run, run.stop_on_signals():
        console.print(
            f"{'run' if command == 'train' else command} folder [bold]{out}[/]: "
            f"{describe(total)}, checkpoint every {every}\ndata: {data.source} ({data.origin})"
            + (f"\nresuming at step {start:,} of {total:,}" if start else ""),
            highlight=False,
        )
        intervals = folder.plan.intervals() if profile else None
        result = train_with_progress(
            run, train, total=total, start=start, command=command, profile_intervals=intervals
        )
        if not isinstance(result, int):
            finish(run, result)
    return result


_OS_HINTS = {
    errno.ENOSPC: "free some space, or write elsewhere (--out)",
    errno.EDQUOT: "free some space, or write elsewhere (--out)",
    errno.EROFS: "the file system is read-only: write elsewhere (--out)",
    errno.EACCES: "no permission: write elsewhere (--out), or change the folder's permissions",
    errno.EPERM: "no permission: write elsewhere (--out), or change the folder's permissions",
    errno.EISDIR: "that is a folder: give a file",
    errno.ENOTDIR: "a part of that path is a file, not a folder",
    errno.EEXIST: "it exists and is in the way: move it, or choose another path",
}


def os_error_line(e: OSError) -> str:
    """An operating-system error as one line: what failed, the path the user gave (never
    a temporary name), and what to do."""
    what = e.strerror or str(e)
    where = f" ({e.filename})" if e.filename else ""
    hint = _OS_HINTS.get(e.errno or 0)
    return f"{what}{where}" + (f"; {hint}." if hint else ".")
