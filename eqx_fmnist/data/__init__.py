"""Fashion-MNIST files: finding, downloading, verifying and parsing them into numpy.

This package has no JAX in it. It turns the four IDX files of Fashion-MNIST into
`uint8` numpy arrays. An explicit `data_dir` is the only folder looked in (a folder
without the four files is an error naming what is missing); otherwise the first of
these that holds all four files, gzipped (`*.gz`) or raw:

1. the folder named by `$EQX_FMNIST_DATA`;
2. the user cache, `$XDG_CACHE_HOME/eqx_fmnist/fashion-mnist` (default
   `~/.cache/eqx_fmnist/fashion-mnist`);
3. Debian's `/usr/share/datasets/fashion-mnist` (`apt install dataset-fashion-mnist`).

When no folder has them, the files are downloaded into the user cache over HTTPS and
accepted only after their checksums match. The modules: `idx` (the files' facts, the
errors, parsing), `store` (finding, remembered verification, the decoded-array cache),
`download`, `images` (users' own pictures).
"""

import logging
import os
from collections.abc import Sequence

import numpy as np

from . import idx as idx, store as store
from .download import download_fashion_mnist as download_fashion_mnist
from .idx import (
    CLASS_NAMES as CLASS_NAMES,
    DEBIAN_DIR as DEBIAN_DIR,
    ENV_VAR as ENV_VAR,
    FILES as FILES,
    IMAGE_SHAPE as IMAGE_SHAPE,
    IMAGE_SIZE as IMAGE_SIZE,
    IMAGES_MAGIC as IMAGES_MAGIC,
    LABELS_MAGIC as LABELS_MAGIC,
    MIRRORS as MIRRORS,
    NUM_CLASSES as NUM_CLASSES,
    ChecksumError as ChecksumError,
    DataError as DataError,
    DataNotFoundError as DataNotFoundError,
    DownloadError as DownloadError,
    FashionMNIST as FashionMNIST,
    IdxFile as IdxFile,
    ProgressFn as ProgressFn,
    _check_images,
    _check_labels,
    parse_idx as parse_idx,
    read_idx as read_idx,
)
from .images import (
    PreparedImage as PreparedImage,
    load_image as load_image,
    prepare_image as prepare_image,
)
from .store import (
    _read_content,
    _read_stamps,
    _remember_verified,
    cache_dir as cache_dir,
    candidate_dirs as candidate_dirs,
    decoded_dir as decoded_dir,
    files_in as files_in,
    find_data_dir as find_data_dir,
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

    A [`FashionMNIST`][eqx_fmnist.data.FashionMNIST] with train images `(60000, 28, 28)`,
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
                f"Fashion-MNIST not found; looked in:\n{looked}\nTo fix: {idx._INSTALL_HINTS}"
            )
        try:
            found = ("download", download_fashion_mnist(mirrors=mirrors, progress=progress))
        except DownloadError as e:
            raise DataNotFoundError(
                f"Fashion-MNIST not found; looked in:\n{looked}\nand the download failed: "
                f"{e}\nTo fix: {idx._INSTALL_HINTS}"
            ) from e
    source, folder = found
    logger.info("reading Fashion-MNIST from %s (%s)", folder, source)
    paths = files_in(folder)
    assert paths is not None  # find_data_dir checked it
    stamps = _read_stamps() if verify else {}
    arrays: dict[str, np.ndarray] = {}
    newly_verified = []
    for key, spec in idx.FILES.items():
        path = paths[key]
        raw, read_from, verified = _read_content(path, spec, verify=verify, stamps=stamps)
        newly_verified += verified
        arr = parse_idx(raw, name=str(read_from), magic=spec.magic)
        check = _check_images if spec.magic == IMAGES_MAGIC else _check_labels
        arrays[key] = check(arr, str(path))
    if newly_verified:
        _remember_verified(newly_verified)
    for split in ("train", "test"):
        n_img, n_lab = len(arrays[f"{split}_images"]), len(arrays[f"{split}_labels"])
        if n_img != n_lab:
            raise DataError(f"{folder}: {n_img} {split} images but {n_lab} labels.")
    return FashionMNIST(**arrays, source=folder, origin=source)
