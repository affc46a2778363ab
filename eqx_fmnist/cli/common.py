"""What the commands share to speak: the consoles, usage errors, the download bar, the
training progress bar and what to say when training stops, tables."""

import argparse
import os
import sys
from collections.abc import Sequence

import jax
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from .. import data as data_mod
from ..intervals import NonFiniteError
from ..parallel import is_lost_process
from ..runs import Finished, Interrupted, Training
from ..runs.cadence import why_stopped

# Lines are never broken: a path copied from one must work (the terminal wraps them);
# nothing is coloured by guess (rich's highlighter colours numbers and paths by pattern).
console = Console(soft_wrap=True, highlight=False)
err_console = Console(stderr=True, soft_wrap=True, highlight=False)


def set_width() -> None:
    """The consoles' width as `COLUMNS` says when a command starts (else the terminal's);
    one too narrow to print a table into (0 printed nothing) is taken as 80."""
    columns = os.environ.get("COLUMNS", "")
    width = int(columns) if columns.isdigit() else None
    console.width = err_console.width = 80 if width is not None and width < 40 else width  # type: ignore[assignment]


class UsageError(Exception):
    """Bad input from the command line: one line on stderr, exit status 2."""


def load_data(args: argparse.Namespace) -> data_mod.FashionMNIST:
    """Load the data, showing a download progress bar if a download happens (and
    nothing otherwise: an idle bar would still leave a blank line on stderr)."""
    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn())
    bar: Progress | None = None
    tasks: dict = {}  # a task per file

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


def train_in_folder(
    training: Training, *, profile: bool = False, again: str | None = None
) -> Finished | int:
    """Say where `training` trains and what (`Training.describe`), train it with a progress
    bar (the members' means when many train at once), and say why it stopped (and
    `again`, the command that continues it, where it is not `--resume`); the finished
    run, or the exit status of a stopped one."""
    folder = training.folder
    command = training.kind
    console.quiet = console.quiet or jax.process_index() != 0  # process 0 speaks
    console.print(training.describe(), markup=False)
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

        try:
            return training.run([show], profile=profile)
        except (Interrupted, KeyboardInterrupt, NonFiniteError, jax.errors.JaxRuntimeError) as e:
            if isinstance(e, jax.errors.JaxRuntimeError) and not is_lost_process(e):
                raise
            bar.stop()
            status, line = why_stopped(
                e, command, folder.saved_step, folder.checkpoint, again=again
            )
            print(f"eqx-fmnist {command}: {line}", file=sys.stderr)
            return status
        finally:
            if profile and training.trace is not None:
                console.print(f"profile: {training.trace} (open it at https://ui.perfetto.dev)")


def table(title: str, columns: Sequence[str], rows) -> Table:
    t = Table(title=title)
    for i, name in enumerate(columns):
        t.add_column(name, justify="left" if i == 0 else "right")
    for row in rows:
        t.add_row(*row)
    return t
