"""`eqx-fmnist data`: find or download the data, verify it, show the splits."""

import argparse

import numpy as np

from .. import data as data_mod
from .common import console, load_data, table
from .flags import add_data_args


def add_data_parser(sub) -> None:
    p = sub.add_parser("data", help="find or download the data, verify it, show the splits")
    p.set_defaults(func=cmd_data, elsewhere="--data-dir, or $EQX_FMNIST_DATA")
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
