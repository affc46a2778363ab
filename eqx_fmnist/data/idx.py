"""IDX parsing: the bytes of an unsigned-byte IDX file as a numpy array, checked."""

import gzip
import os
import zlib
from pathlib import Path

import numpy as np

from .errors import DataError
from .facts import IMAGE_SHAPE, NUM_CLASSES


def read_bytes(path: Path, limit: int | None = None) -> bytes:
    """The decompressed bytes of `path`; gzip is assumed for names ending in `.gz`.

    With a `limit` (the file's known size), a file that holds more is refused before it
    is read whole: a raw file by its size on disk, a gzip file once its content passes
    the limit (so that neither a sparse giant nor a gzip bomb fills the memory)."""
    too_big = DataError(
        f"{path} holds more than the {limit or 0:,} bytes of the file it is named for: it "
        "is not that file; delete it so that it is fetched again."
    )
    if path.suffix == ".gz":
        try:
            with gzip.open(path, "rb") as f:
                raw = f.read(-1 if limit is None else limit + 1)
        except (gzip.BadGzipFile, EOFError, zlib.error) as e:
            raise DataError(
                f"{path} is not a valid gzip file ({e}). Delete it and fetch it again."
            ) from e
    elif limit is not None and path.stat().st_size > limit:
        raise too_big
    else:
        raw = path.read_bytes()
    if limit is not None and len(raw) > limit:
        raise too_big
    return raw


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
    zero = int.from_bytes(raw[:2], "big")
    dtype_code = raw[2]
    ndim = raw[3]
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
        raw = read_bytes(path)
    except OSError as e:
        raise DataError(f"{path}: cannot be read ({e}).") from e
    return parse_idx(raw, name=str(path), magic=magic)


def check_images(arr: np.ndarray, name: str) -> np.ndarray:
    if arr.ndim != 3 or arr.shape[1:] != IMAGE_SHAPE:
        raise DataError(f"{name}: images of shape {arr.shape[1:]}, expected {IMAGE_SHAPE}.")
    return arr


def check_labels(arr: np.ndarray, name: str) -> np.ndarray:
    if arr.ndim != 1:
        raise DataError(f"{name}: labels must be 1-D, but the header gives shape {arr.shape}.")
    if arr.size and int(arr.max()) >= NUM_CLASSES:
        raise DataError(f"{name}: label {int(arr.max())} found; labels must be 0..9.")
    return arr
