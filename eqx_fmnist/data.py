"""Fashion-MNIST files: finding, downloading, verifying and parsing them into numpy.

This module has no JAX in it. It turns the four IDX files of Fashion-MNIST into
`uint8` numpy arrays, wherever the files are:

1. an explicit `data_dir` argument;
2. the folder named by `$EQX_FMNIST_DATA`;
3. the user cache, `$XDG_CACHE_HOME/eqx_fmnist/fashion-mnist` (default
   `~/.cache/eqx_fmnist/fashion-mnist`);
4. Debian's `/usr/share/datasets/fashion-mnist` (`apt install dataset-fashion-mnist`).

A folder counts only when all four files are in it, gzipped (`*.gz`) or raw. When
no folder has them, the files are downloaded into the user cache over HTTPS and
accepted only after their checksums match.
"""

import dataclasses
import gzip
import hashlib
import json
import logging
import os
import urllib.error
import urllib.parse
import urllib.request
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from jaxtyping import UInt8

from .fileio import atomic_write

logger = logging.getLogger(__name__)

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


# --------------------------------------------------------------------------- finding


def cache_dir() -> Path:
    """The user cache folder for the data: `$XDG_CACHE_HOME/eqx_fmnist/fashion-mnist`."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "eqx_fmnist" / "fashion-mnist"


def candidate_dirs(data_dir: str | os.PathLike | None = None) -> list[tuple[str, Path]]:
    """The folders searched for the files, in order, each with the reason it is searched.

    **Arguments:**

    - `data_dir`: an explicit folder, searched first. Defaults to `None`.

    **Returns:**

    A list of `(source, folder)` pairs, e.g. `("$EQX_FMNIST_DATA", Path(...))`.
    """
    dirs: list[tuple[str, Path]] = []
    if data_dir is not None:
        dirs.append(("data_dir argument", Path(data_dir).expanduser()))
    if os.environ.get(ENV_VAR):
        dirs.append((f"${ENV_VAR}", Path(os.environ[ENV_VAR]).expanduser()))
    dirs.append(("user cache", cache_dir()))
    dirs.append(("Debian package dataset-fashion-mnist", DEBIAN_DIR))
    return dirs


def _file_in(folder: Path, spec: IdxFile) -> Path | None:
    for candidate in (folder / f"{spec.name}.gz", folder / spec.name):
        if candidate.is_file():
            return candidate
    return None


def files_in(folder: str | os.PathLike) -> dict[str, Path] | None:
    """The four files in `folder` (`.gz` preferred over raw), or `None` if any is missing."""
    folder = Path(folder)
    found = {key: _file_in(folder, spec) for key, spec in FILES.items()}
    if any(p is None for p in found.values()):
        return None
    return found  # type: ignore[return-value]


def find_data_dir(data_dir: str | os.PathLike | None = None) -> tuple[str, Path] | None:
    """The first folder of [`candidate_dirs`][eqx_fmnist.data.candidate_dirs] holding all
    four files, as `(source, folder)`, or `None`."""
    for source, folder in candidate_dirs(data_dir):
        if files_in(folder) is not None:
            return source, folder
        if source == "data_dir argument":
            logger.warning("data_dir %s does not hold all four Fashion-MNIST files", folder)
    return None


# --------------------------------------------------------------------------- verifying


def _stamp_path() -> Path:
    return cache_dir().parent / "verified.json"


def _stamp_key(path: Path) -> tuple[str, dict]:
    st = path.stat()
    return str(path.resolve()), {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _read_stamps() -> dict:
    try:
        return json.loads(_stamp_path().read_text())
    except (OSError, ValueError):
        return {}


def _remember_verified(paths: Sequence[Path]) -> None:
    stamps = _read_stamps()
    for path in paths:
        key, value = _stamp_key(path)
        stamps[key] = value
    try:
        with atomic_write(_stamp_path()) as f:
            f.write(json.dumps(stamps, indent=1).encode())
    except OSError as e:  # A read-only home must not stop training.
        logger.info("could not remember verification in %s: %s", _stamp_path(), e)


def _is_remembered(path: Path, stamps: dict) -> bool:
    key, value = _stamp_key(path)
    return stamps.get(key) == value


# --------------------------------------------------------------------------- decoded cache


def decoded_dir() -> Path:
    """Where decompressed copies of `.gz` files are kept:
    `$XDG_CACHE_HOME/eqx_fmnist/decoded`."""
    return cache_dir().parent / "decoded"


def _decoded_paths(source: Path, spec: IdxFile) -> tuple[Path, Path, dict]:
    """The decoded copy of `source`, its record, and what the record must say."""
    key, stamp = _stamp_key(source)
    folder = decoded_dir() / hashlib.sha256(key.encode()).hexdigest()[:16]
    return folder / spec.name, folder / f"{spec.name}.json", {"source": key, **stamp}


def _decoded_copy(source: Path, spec: IdxFile) -> Path | None:
    """The decoded copy of the `.gz` file `source`, if the cache holds one made from this
    very file (same path, size and modification time) and it is whole."""
    if source.suffix != ".gz":
        return None
    try:
        copy, record, expected = _decoded_paths(source, spec)
        if json.loads(record.read_text()) == expected and copy.stat().st_size == spec.size:
            return copy
    except (OSError, ValueError):
        pass
    return None


def _store_decoded(source: Path, spec: IdxFile, raw: bytes) -> Path | None:
    """Keep `raw`, the verified content of `source`, in the decoded cache; the record is
    written last, so a copy without its record is never used. Returns the copy, or
    `None` when the cache cannot be written (training goes on without it)."""
    copy, record, expected = _decoded_paths(source, spec)
    try:
        copy.parent.mkdir(parents=True, exist_ok=True)
        with atomic_write(copy) as f:
            f.write(raw)
        with atomic_write(record) as f:
            f.write(json.dumps(expected).encode())
    except OSError as e:
        logger.info("could not keep a decoded copy of %s in %s: %s", source, copy.parent, e)
        return None
    return copy


def _read_content(
    path: Path, spec: IdxFile, *, verify: bool, stamps: dict
) -> tuple[bytes, Path, list[Path]]:
    """The decompressed content of `path` (from the decoded cache when it has a current
    copy), the file it was read from, and the files newly verified on the way."""
    decoded = _decoded_copy(path, spec)
    if decoded is not None:
        raw = _read_bytes(decoded)
        if not verify or _is_remembered(decoded, stamps):
            return raw, decoded, []
        try:
            _check_sha256(raw, spec, decoded)
            return raw, decoded, [decoded]
        except ChecksumError:  # a damaged copy: drop it and read the source
            logger.warning("discarding a damaged decoded copy %s", decoded)
            decoded.unlink(missing_ok=True)
    raw, verified = _read_bytes(path), []
    if verify and not _is_remembered(path, stamps):
        _check_sha256(raw, spec, path)
        verified.append(path)
    if verify and path.suffix == ".gz":
        # Verified: keep the decompressed bytes, so the next load skips the gunzip.
        copy = _store_decoded(path, spec, raw)
        verified += [copy] if copy is not None else []
    return raw, path, verified


def _check_sha256(raw: bytes, spec: IdxFile, path: Path) -> None:
    digest = hashlib.sha256(raw).hexdigest()
    if len(raw) != spec.size or digest != spec.sha256:
        raise ChecksumError(
            f"{path}: content does not match Fashion-MNIST's {spec.name} "
            f"({len(raw):,} bytes, SHA-256 {digest}; expected {spec.size:,} bytes, "
            f"SHA-256 {spec.sha256}). Delete the file so that it is fetched again."
        )


# --------------------------------------------------------------------------- downloading


def _check_url(url: str) -> None:
    parsed = urllib.parse.urlparse(url)
    local = parsed.hostname in {"127.0.0.1", "localhost", "::1"}
    if parsed.scheme != "https" and not (parsed.scheme == "http" and local):
        raise ValueError(
            f"mirror {url!r} is not HTTPS; only HTTPS mirrors (or http on 127.0.0.1 "
            "for tests) are allowed."
        )


def _fetch_one(
    url: str, dest: Path, spec: IdxFile, *, timeout: float, progress: ProgressFn | None
) -> None:
    """Download `url` to `dest` through a temporary file; verify; move into place.

    The MD5 of the `.gz` and the SHA-256 of its decompressed content are computed while
    the bytes stream in; any failure raises before the file gets its name.
    """
    md5, sha256 = hashlib.md5(), hashlib.sha256()
    gunzip = zlib.decompressobj(wbits=31)  # 31: expect a gzip header
    done, gzip_error = 0, None
    with atomic_write(dest) as out:
        request = urllib.request.Request(url, headers={"User-Agent": "eqx_fmnist"})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            length = response.headers.get("Content-Length")
            total = int(length) if length is not None else None
            while chunk := response.read(1 << 20):
                out.write(chunk)
                md5.update(chunk)
                if gzip_error is None:
                    try:
                        sha256.update(gunzip.decompress(chunk))
                    except zlib.error as e:  # reported after the MD5, the upstream check
                        gzip_error = e
                done += len(chunk)
                if progress is not None:
                    progress(dest.name, done, total)
        if total is not None and done != total:
            raise DownloadError(f"transfer interrupted after {done:,} of {total:,} bytes")
        if md5.hexdigest() != spec.gz_md5:
            raise ChecksumError(f"MD5 {md5.hexdigest()} of the .gz, expected {spec.gz_md5}")
        if gzip_error is not None:
            raise DataError(f"not a valid gzip stream ({gzip_error})")
        sha256.update(gunzip.flush())
        if not gunzip.eof or sha256.hexdigest() != spec.sha256:
            raise ChecksumError(
                f"SHA-256 {sha256.hexdigest()} of the content, expected {spec.sha256}"
            )


def download_fashion_mnist(
    dest: str | os.PathLike | None = None,
    *,
    mirrors: Sequence[str] = MIRRORS,
    timeout: float = 60.0,
    progress: ProgressFn | None = None,
) -> Path:
    """Download the four `.gz` files that are not already in `dest`, verified.

    Each file goes to a temporary name in `dest`, its MD5 (of the `.gz`) and SHA-256
    (of the decompressed content) are checked, and only then is it moved into place:
    a failed or interrupted transfer leaves nothing behind. Mirrors are tried in order.

    **Arguments:**

    - `dest`: the folder. Defaults to the user cache, [`cache_dir()`][eqx_fmnist.data.cache_dir].
    - `mirrors`: folder URLs to try in order. Only HTTPS is accepted (plain HTTP only on
        the loopback address, for tests). Defaults to `MIRRORS`.
    - `timeout`: seconds to wait on the network per request. Defaults to `60`.
    - `progress`: called as `progress(file_name, bytes_done, bytes_total)` while
        downloading. Defaults to `None`.

    **Returns:**

    The folder, now holding all four files.

    **Raises:**

    `DownloadError` listing every URL tried and why each failed.
    """
    folder = cache_dir() if dest is None else Path(dest)
    if not mirrors:
        raise ValueError("`mirrors` is empty: give at least one folder URL.")
    for mirror in mirrors:
        _check_url(mirror)
    folder.mkdir(parents=True, exist_ok=True)
    for spec in FILES.values():
        target = folder / f"{spec.name}.gz"
        if target.is_file():
            continue
        failures = []
        for mirror in mirrors:
            url = mirror.rstrip("/") + f"/{spec.name}.gz"
            logger.info("downloading %s", url)
            try:
                _fetch_one(url, target, spec, timeout=timeout, progress=progress)
                break
            except (OSError, urllib.error.URLError, DataError, EOFError) as e:
                reason = getattr(e, "reason", None) or e
                failures.append(f"  {url}: {reason}")
                logger.warning("download of %s failed: %s", url, reason)
        else:
            raise DownloadError(
                f"could not download {spec.name}.gz; tried:\n" + "\n".join(failures)
            )
    return folder


# --------------------------------------------------------------------------- loading


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

    - `data_dir`: a folder searched before all others. Defaults to `None`.
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
    all `uint8`, and the folder they came from.

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
                f"Fashion-MNIST not found; looked in:\n{looked}\nTo fix: {_INSTALL_HINTS}"
            )
        try:
            found = ("download", download_fashion_mnist(mirrors=mirrors, progress=progress))
        except DownloadError as e:
            raise DataNotFoundError(
                f"Fashion-MNIST not found; looked in:\n{looked}\nand the download failed: "
                f"{e}\nTo fix: {_INSTALL_HINTS}"
            ) from e
    source, folder = found
    logger.info("reading Fashion-MNIST from %s (%s)", folder, source)
    paths = files_in(folder)
    assert paths is not None  # find_data_dir checked it
    stamps = _read_stamps() if verify else {}
    arrays: dict[str, np.ndarray] = {}
    newly_verified = []
    for key, spec in FILES.items():
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
    return FashionMNIST(**arrays, source=folder)
