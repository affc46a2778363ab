"""Loading Fashion-MNIST: the search order, a download when nothing is found, the
checks, and the four arrays as a [`FashionMNIST`][eqx_fmnist.fashion.FashionMNIST]."""

import logging
import os
from collections.abc import Sequence

import numpy as np

from ..fashion import FashionMNIST
from . import facts
from .download import download_fashion_mnist
from .errors import DataError, DataNotFoundError, DownloadError
from .facts import IMAGES_MAGIC, INSTALL_HINTS, MIRRORS, ProgressFn
from .idx import check_images, check_labels, parse_idx
from .store import (
    candidate_dirs,
    files_in,
    find_data_dir,
    read_content,
    read_stamps,
    remember_verified,
)

logger = logging.getLogger(__name__)


def load_fashion_mnist(
    data_dir: str | os.PathLike | None = None,
    *,
    download: bool = True,
    verify: bool = True,
    mirrors: Sequence[str] = MIRRORS,
    progress: ProgressFn | None = None,
) -> FashionMNIST:
    """Find (or download), verify and read Fashion-MNIST.

    **Arguments:**

    - `data_dir`: the folder that holds the files; nothing else is searched, and a
        folder without all four is a `DataNotFoundError`. Defaults to `None`: the
        search order, then a download.
    - `download`: fetch the files into the user cache when no folder has them.
        Defaults to `True`.
    - `verify`: check the SHA-256 of each decompressed file. A file verified before
        (same path, size and modification time) is not hashed again. Defaults to `True`.
    - `mirrors`: where to download from. Defaults to `MIRRORS`.
    - `progress`: download progress callback, see
        [`download_fashion_mnist`][eqx_fmnist.data.download_fashion_mnist].

    **Returns:**

    A [`FashionMNIST`][eqx_fmnist.fashion.FashionMNIST] with train images `(60000, 28, 28)`,
    train labels `(60000,)`, test images `(10000, 28, 28)` and test labels `(10000,)`,
    all `uint8`, the folder they came from and why that folder (`origin`).

    **Raises:**

    `DataNotFoundError` listing every place looked and how to fix it; `DataError` for
    a malformed file; `ChecksumError` for a file whose content is wrong.

    !!! example

        ```python
        data = load_fashion_mnist()
        data.train_images.shape  # (60000, 28, 28)
        ```
    """
    found = find_data_dir(data_dir)
    if found is None:
        looked = "\n".join(f"  {folder} ({source})" for source, folder in candidate_dirs(data_dir))
        if not download:
            raise DataNotFoundError(
                f"Fashion-MNIST not found; looked in:\n{looked}\nTo fix: {INSTALL_HINTS}"
            )
        try:
            found = ("download", download_fashion_mnist(mirrors=mirrors, progress=progress))
        except DownloadError as e:
            raise DataNotFoundError(
                f"Fashion-MNIST not found; looked in:\n{looked}\nand the download failed: "
                f"{e}\nTo fix: {INSTALL_HINTS}"
            ) from e
    source, folder = found
    logger.info("reading Fashion-MNIST from %s (%s)", folder, source)
    paths = files_in(folder)
    assert paths is not None  # find_data_dir checked it
    stamps = read_stamps() if verify else {}
    arrays: dict[str, np.ndarray] = {}
    newly_verified = []
    for key, spec in facts.FILES.items():
        path = paths[key]
        raw, read_from, verified = read_content(path, spec, verify=verify, stamps=stamps)
        newly_verified += verified
        arr = parse_idx(raw, name=str(read_from), magic=spec.magic)
        check = check_images if spec.magic == IMAGES_MAGIC else check_labels
        arrays[key] = check(arr, str(path))
    if newly_verified:
        remember_verified(newly_verified)
    for split in ("train", "test"):
        n_img = len(arrays[f"{split}_images"])
        n_lab = len(arrays[f"{split}_labels"])
        if n_img != n_lab:
            raise DataError(f"{folder}: {n_img} {split} images but {n_lab} labels.")
    return FashionMNIST(
        train_images=arrays["train_images"],
        train_labels=arrays["train_labels"],
        test_images=arrays["test_images"],
        test_labels=arrays["test_labels"],
        source=folder,
        origin=source,
    )
