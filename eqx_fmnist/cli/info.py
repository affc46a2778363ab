"""`eqx-fmnist data` (find or download the data, verify it, show the splits) and
`eqx-fmnist bench` (the training throughput of every path, in one process)."""

import argparse

import numpy as np

from .. import data as data_mod
from ..dataset import to_datasets
from .common import console, load_data, table
from .flags import add_data_args, out_path


def add_data_parser(sub) -> None:
    p = sub.add_parser("data", help="find or download the data, verify it, show the splits")
    p.set_defaults(func=cmd_data)
    add_data_args(p)


def add_bench_parser(sub) -> None:
    p = sub.add_parser(
        "bench", help="training throughput of every path, in one process (--quick: a smoke run)"
    )
    p.set_defaults(func=cmd_bench)
    p.add_argument("--quick", action="store_true", help="tiny sizes, seconds not minutes")
    p.add_argument("--repeats", type=int, default=3, help="timed repetitions per variant (3)")
    p.add_argument("--out", type=out_path, help="also write throughput.md and throughput.png here")
    add_data_args(p)


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
            data,
            quick=args.quick,
            repeats=args.repeats,
            progress=lambda what: status.update(f"measuring {what} ..."),
        )
    console.print(report.to_markdown(), markup=False, highlight=False, soft_wrap=True)
    if args.out is not None:
        console.print(f"wrote {' and '.join(map(str, report.save(args.out)))}")
    return 0
