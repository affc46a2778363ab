"""What the commands share to speak: the consoles, usage errors, the download bar, a
run's test result, the training progress bar and what to say when training stops, tables."""

import argparse
import errno
import re
import sys
from collections.abc import Sequence

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
from ..augment import Move
from ..dataset import to_datasets
from ..evaluation import EvalResult, evaluate
from ..intervals import NonFiniteError
from ..runs import Finished, Interrupted, Run, RunFolder, Training
from ..runs.profile import IntervalProfiler

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


def tested(
    args: argparse.Namespace,
) -> tuple[Run, tuple[Move, ...] | None, data_mod.FashionMNIST, EvalResult]:
    """The run `args.run` names, the views `--tta` asks of it, the data, and its test result."""
    run = Run.open(args.run)
    views, fm = run.views(args.tta), load_data(args)
    return run, views, fm, evaluate(run.model, to_datasets(fm)[1], policy=run.policy, tta=views)


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


def train_in_folder(
    training: Training, describe: str, *, command: str = "train", profile: bool = False
) -> Finished | int:
    """Say where `training` trains (`describe`: what trains), train it with a progress
    bar (the members' means when many train at once), and say why it stopped; the
    finished run, or the exit status of a stopped one."""
    folder = training.folder
    console.quiet = console.quiet or jax.process_index() != 0  # process 0 speaks
    console.print(
        f"{'run' if command == 'train' else command} folder [bold]{folder.folder}[/]: "
        f"{describe}, checkpoint every {folder.checkpoint_every}\n"
        f"data: {training.data.source} ({training.data.origin})"
        + (
            f"\nresuming at step {training.start:,} of {training.total_steps:,}"
            * bool(training.start)
        ),
        highlight=False,
    )
    columns = (
        TextColumn(f"[bold]{command}[/]"),
        BarColumn(),
        TextColumn("step {task.completed:,.0f}/{task.total:,.0f}"),
    )
    with Progress(*columns, TextColumn("{task.fields[m]}"), console=console) as bar:
        task = bar.add_task(
            command, total=training.total_steps, completed=training.start, m="compiling ..."
        )

        def show(r, _):
            m = f"loss {r['loss']:.4f}  acc {r['accuracy']:.3f}  {r['examples_per_sec']:,.0f} ex/s"
            if "members" in r:
                m = f"{len(r['members'])} members: mean {m.replace('ex/s', 'model-ex/s')}"
                valid = [x["valid_accuracy"] for x in r["members"] if "valid_accuracy" in x]
                m += f"  valid best {max(valid):.4f}" if valid else ""
            elif "valid_accuracy" in r:
                m += f"  valid {r['valid_accuracy']:.4f}"
            bar.update(task, completed=r["step"], m=m)

        callbacks: list = [show]
        profiler = None
        if profile:
            profiler = IntervalProfiler(folder.folder / "profile", folder.plan.intervals())
            callbacks.append(profiler)
        try:
            return training.run(callbacks)
        except (Interrupted, KeyboardInterrupt, NonFiniteError, jax.errors.JaxRuntimeError) as e:
            if isinstance(e, jax.errors.JaxRuntimeError) and not is_lost_process(e):
                raise
            bar.stop()
            return stopped(e, folder, command)
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
