"""The `eqx-fmnist` command. The only module that prints."""

import argparse
import logging
import sys
from collections.abc import Sequence

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

console = Console()
err_console = Console(stderr=True)


class UsageError(Exception):
    """Bad input from the command line: one line on stderr, exit status 2."""


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


# --------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="eqx-fmnist",
        description="Train and inspect an Equinox MLP on Fashion-MNIST.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("data", help="find or download the data, verify it, show the splits")
    _add_data_args(p)
    p.set_defaults(func=cmd_data)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        # Failures reach the user as the one-line error below; -v shows the story.
        level=logging.INFO if args.verbose else logging.ERROR,
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        return args.func(args)
    except (UsageError, ValueError, TypeError, OSError) as e:
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
