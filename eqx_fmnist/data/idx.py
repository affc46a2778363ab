"""The facts of Fashion-MNIST's four files, the errors about them, and IDX parsing."""

import dataclasses
import gzip
import os
import zlib
from collections.abc import Callable
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
IMAGE_SHAPE = (28, 28)
IMAGE_SIZE = 28 * 28
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

_INSTALL_HINTS = (
    "install the Debian package (`apt-get install dataset-fashion-mnist`), "
    f"set ${ENV_VAR} to a folder that holds the four files, "
    "or allow the download (`download=True`, or drop `--no-download`)."
)

ProgressFn = Callable[[str, int, int | None], None]
"""`progress(file_name, bytes_done, bytes_total_or_None)`, called while downloading."""


class DataError(ValueError):
    """A Fashion-MNIST file is missing, malformed or fails its checksum."""


class DataNotFoundError(DataError):
    """No folder holds all four files and they could not be downloaded."""


class DownloadError(DataError):
    """Every mirror failed for a file; the message lists each URL and why."""


class ChecksumError(DataError):
    """A file's content is not the published Fashion-MNIST content."""


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


# --------------------------------------------------------------------------- parsing


def _read_bytes(path: Path) -> bytes:
    """The decompressed bytes of `path`; gzip is assumed for names ending in `.gz`."""
    if path.suffix == ".gz":
        try:
            with gzip.open(path, "rb") as f:
                return f.read()
        except (gzip.BadGzipFile, EOFError, zlib.error) as e:
            raise DataError(
                f"{path} is not a valid gzip file ({e}). Delete it and fetch it again."
            ) from e
    return path.read_bytes()


def parse_idx(raw: bytes, *, name: str = "<bytes>", magic: int | None = None) -> np.ndarray:
    """Parse the bytes of an unsigned-byte IDX file.

    **Arguments:**

    - `raw`: the decompressed content of the file.
    - `name`: how to name the file in error messages.
    - `magic`: the expected magic number (`2051` for images, `2049` for labels), or
        `None` to accept any unsigned-byte IDX file.

    **Returns:**

    A read-only `uint8` numpy array with the shape given by the header. It is a view
    of `raw`, so no pixel is copied.

    **Raises:**

    `DataError` naming the file when the header, the magic number or the length is
    wrong.
    """
    if len(raw) < 4:
        raise DataError(f"{name}: {len(raw)} bytes is too short for an IDX header.")
    zero, dtype_code, ndim = int.from_bytes(raw[:2], "big"), raw[2], raw[3]
    found_magic = int.from_bytes(raw[:4], "big")
    if zero != 0 or dtype_code != 0x08 or ndim == 0:
        raise DataError(
            f"{name}: magic number {found_magic} is not an unsigned-byte IDX file "
            f"(expected {magic or '2051 or 2049'})."
        )
    if magic is not None and found_magic != magic:
        raise DataError(f"{name}: magic number {found_magic}, expected {magic}.")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError(f"{name}: header promises {ndim} dimensions but the file ends first.")
    dims = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    expected = header + int(np.prod(dims, dtype=np.int64))
    if len(raw) != expected:
        raise DataError(
            f"{name}: header says shape {dims} ({expected:,} bytes with the header) "
            f"but the file has {len(raw):,} bytes; it is truncated or corrupt."
        )
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims)


def read_idx(path: str | os.PathLike, *, magic: int | None = None) -> np.ndarray:
    """Read an IDX file, gzipped (name ending in `.gz`) or raw.

    **Arguments:**

    - `path`: the file.
    - `magic`: the expected magic number, or `None` for any.

    **Returns:**

    The `uint8` array described by the file's header.
    """
    path = Path(path)
    try:
        raw = _read_bytes(path)
    except OSError as e:
        raise DataError(f"{path}: cannot be read ({e}).") from e
    return parse_idx(raw, name=str(path), magic=magic)


def _check_images(arr: np.ndarray, name: str) -> np.ndarray:
    if arr.ndim != 3 or arr.shape[1:] != IMAGE_SHAPE:
        raise DataError(f"{name}: images of shape {arr.shape[1:]}, expected {IMAGE_SHAPE}.")
    return arr


def _check_labels(arr: np.ndarray, name: str) -> np.ndarray:
    if arr.ndim != 1:
        raise DataError(f"{name}: labels must be 1-D, but the header gives shape {arr.shape}.")
    if arr.size and int(arr.max()) >= NUM_CLASSES:
        raise DataError(f"{name}: label {int(arr.max())} found; labels must be 0..9.")
    return arr
