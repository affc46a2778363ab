"""The facts of Fashion-MNIST: its classes, its four files and their checksums, where
the files are looked for and fetched from."""

import dataclasses
from collections.abc import Callable
from pathlib import Path

from ..fashion import (
    CLASS_NAMES as CLASS_NAMES,
    IMAGE_SHAPE as IMAGE_SHAPE,
    IMAGE_SIZE as IMAGE_SIZE,
    NUM_CLASSES as NUM_CLASSES,
)

IMAGES_MAGIC = 2051
LABELS_MAGIC = 2049

ENV_VAR = "EQX_FMNIST_DATA"
DEBIAN_DIR = Path("/usr/share/datasets/fashion-mnist")

#: Where the files are fetched from, in order. Each is a folder URL that holds the
#: four `.gz` files under their upstream names.
MIRRORS: tuple[str, ...] = (
    "https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/data/fashion/",
    "https://fashion-mnist.s3.eu-central-1.amazonaws.com/",
)


@dataclasses.dataclass(frozen=True)
class IdxFile:
    """One of the four Fashion-MNIST files and the facts used to check it."""

    name: str
    magic: int
    count: int
    gz_md5: str
    sha256: str
    size: int


FILES: dict[str, IdxFile] = {
    "train_images": IdxFile(
        "train-images-idx3-ubyte",
        IMAGES_MAGIC,
        60_000,
        "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
        "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
        47_040_016,
    ),
    "train_labels": IdxFile(
        "train-labels-idx1-ubyte",
        LABELS_MAGIC,
        60_000,
        "25c81989df183df01b3e8a0aad5dffbe",
        "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
        60_008,
    ),
    "test_images": IdxFile(
        "t10k-images-idx3-ubyte",
        IMAGES_MAGIC,
        10_000,
        "bef4ecab320f06d8554ea6380940ec79",
        "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
        7_840_016,
    ),
    "test_labels": IdxFile(
        "t10k-labels-idx1-ubyte",
        LABELS_MAGIC,
        10_000,
        "bb300cfdad3c16e7a12a480ee83cd310",
        "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
        10_008,
    ),
}

INSTALL_HINTS = (
    "install the Debian package (`apt-get install dataset-fashion-mnist`), "
    f"set ${ENV_VAR} to a folder that holds the four files, "
    "or allow the download (`download=True`, or drop `--no-download`)."
)

ProgressFn = Callable[[str, int, int | None], None]
"""`progress(file_name, bytes_done, bytes_total_or_None)`, called while downloading."""
