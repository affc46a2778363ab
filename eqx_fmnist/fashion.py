"""Fashion-MNIST as the library holds it in memory: its classes, the side of its square
images, and its four arrays as one [`FashionMNIST`][eqx_fmnist.fashion.FashionMNIST].

No file, download or JAX code: what the training loop and the model need to know of
the data set, on the ground floor. Finding, checking and reading the files is `data/`'s.
"""

import dataclasses
from pathlib import Path

import numpy as np
from jaxtyping import UInt8

CLASS_NAMES: tuple[str, ...] = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)
NUM_CLASSES = 10
SIDE = 28
"""An image's height and width, in pixels."""
IMAGE_SHAPE = (SIDE, SIDE)
IMAGE_SIZE = SIDE * SIDE


@dataclasses.dataclass(frozen=True)
class FashionMNIST:
    """The four arrays of Fashion-MNIST as numpy, and where they came from."""

    train_images: UInt8[np.ndarray, "n 28 28"]
    train_labels: UInt8[np.ndarray, " n"]
    test_images: UInt8[np.ndarray, "m 28 28"]
    test_labels: UInt8[np.ndarray, " m"]
    source: Path
    class_names: tuple[str, ...] = CLASS_NAMES
    origin: str = ""
    """Why `source` was used: `"data_dir argument"`, `"$EQX_FMNIST_DATA"`, `"user cache"`,
    `"Debian package dataset-fashion-mnist"` or `"download"`."""
