"""What the commands share: the consoles, usage errors, data loading with a download
bar, checkpoint paths, tables, and what to say when training stops."""

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

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
from ..augment import TTA_VIEWS, Move, tta_name
from ..calibration import Calibration
from ..config import TrainConfig
from ..intervals import NonFiniteError
from ..runs import CHECKPOINT_NAME, Interrupted, RunFolder
from ..runs.profile import IntervalProfiler

console = Console()
err_console = Console(stderr=True)


class UsageError(Exception):
    """Bad input from the command line: one line on stderr, exit status 2."""


def add_data_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", help="the folder with the four IDX files (no other is searched)")
    p.add_argument("--no-download", action="store_true", help="fail instead of downloading")


def load_data(args: argparse.Namespace) -> data_mod.FashionMNIST:
    """Load the data, showing a download progress bar if a download happens."""
    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn())
    with Progress(*columns, TimeRemainingColumn(), console=err_console, transient=True) as bar:
        tasks: dict[str, TaskID] = {}

        def report(name: str, done: int, total: int | None) -> None:
            if name not in tasks:
                tasks[name] = bar.add_task(f"downloading {name}", total=total)
            bar.update(tasks[name], completed=done)

        return data_mod.load_fashion_mnist(
            args.data_dir, download=not args.no_download, progress=report
        )


def add_tta_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tta", choices=list(TTA_VIEWS),
                   help="test-time augmentation: the image alone (none), with its mirror "
                   "(mirror), and 1-pixel moves (shifts); default: the run's")  # fmt: skip


def run_views(choice: str | None, calibration: Calibration | None,
              config: TrainConfig) -> tuple[Move, ...] | None:  # fmt: skip
    """The views a command averages over: `--tta`'s, else the run's (its calibration's,
    or its config's `tta`). Views other than a calibration's are refused: its
    temperature and prediction sets were fitted on those outputs and hold for no other."""
    if calibration is None:
        return config.views if choice is None else TTA_VIEWS[choice]
    if choice is not None and choice != (fitted := tta_name(calibration.tta)):
        raise UsageError(
            f"--tta {choice}: the run was calibrated with --tta {fitted}, and its temperature "
            f"and prediction sets hold only for those outputs; use --tta {fitted}, or train "
            f"again with --tta {choice}."
        )
    return calibration.tta


def checkpoint_path(arg: str) -> Path:
    path = Path(arg)
    path = path / CHECKPOINT_NAME if path.is_dir() else path
    if not path.is_file():
        raise UsageError(f"no checkpoint at {path}; give a run folder or a {CHECKPOINT_NAME} file.")
    return path


def stopped(e: BaseException, run: RunFolder, command: str = "train") -> int:
    """Say why training stopped and what was kept; the exit status."""
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
    columns = (TextColumn(f"[bold]{command}[/]"), BarColumn(), TextColumn("step {task.completed:,.0f}/{task.total:,.0f}"))  # fmt: skip
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
        except (Interrupted, KeyboardInterrupt, NonFiniteError) as e:
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
