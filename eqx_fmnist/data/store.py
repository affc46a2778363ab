"""Where the files are found, which were verified, and the decoded-array cache."""

import hashlib
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path

from ..fileio import atomic_write
from . import facts
from .errors import ChecksumError, DataNotFoundError
from .facts import IdxFile
from .idx import read_bytes

logger = logging.getLogger(__name__)


def cache_dir() -> Path:
    """The user cache folder for the data: `$XDG_CACHE_HOME/eqx_fmnist/fashion-mnist`."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "eqx_fmnist" / "fashion-mnist"


def candidate_dirs(data_dir: str | os.PathLike | None = None) -> list[tuple[str, Path]]:
    """The folders searched for the files, in order, each with the reason it is searched.

    **Arguments:**

    - `data_dir`: an explicit folder: the only one searched. Defaults to `None`: the
        search order.

    **Returns:**

    A list of `(source, folder)` pairs, e.g. `("$EQX_FMNIST_DATA", Path(...))`.
    """
    if data_dir is not None:
        return [("data_dir argument", Path(data_dir).expanduser())]
    dirs: list[tuple[str, Path]] = []
    if os.environ.get(facts.ENV_VAR):
        dirs.append((f"${facts.ENV_VAR}", Path(os.environ[facts.ENV_VAR]).expanduser()))
    dirs.append(("user cache", cache_dir()))
    dirs.append(("Debian package dataset-fashion-mnist", facts.DEBIAN_DIR))
    return dirs


def _file_in(folder: Path, spec: IdxFile) -> Path | None:
    for candidate in (folder / f"{spec.name}.gz", folder / spec.name):
        if candidate.is_file():
            return candidate
    return None


def files_in(folder: str | os.PathLike) -> dict[str, Path] | None:
    """The four files in `folder` (`.gz` preferred over raw), or `None` if any is missing."""
    folder = Path(folder)
    found = {key: _file_in(folder, spec) for key, spec in facts.FILES.items()}
    if any(p is None for p in found.values()):
        return None
    return found  # type: ignore[return-value]


def find_data_dir(data_dir: str | os.PathLike | None = None) -> tuple[str, Path] | None:
    """The first folder of [`candidate_dirs`][eqx_fmnist.data.candidate_dirs] holding all
    four files, as `(source, folder)`, or `None`.

    **Raises:**

    `DataNotFoundError` when `data_dir` is given and lacks some of the files, naming
    them: an explicit folder is never silently replaced by another.
    """
    if data_dir is not None:
        folder = Path(data_dir).expanduser()
        missing = [f"{s.name}(.gz)" for s in facts.FILES.values() if _file_in(folder, s) is None]
        if missing:
            where = f"lacks {', '.join(missing)}"
            if not folder.is_dir():
                where = "is a file, not a folder" if folder.exists() else "does not exist"
            raise DataNotFoundError(
                f"data_dir {folder} {where}; give a folder that holds the four Fashion-MNIST "
                "files, or leave it out to use the search order."
            )
        return "data_dir argument", folder
    for source, folder in candidate_dirs():
        if files_in(folder) is not None:
            return source, folder
    return None


# --------------------------------------------------------------------------- verifying


def _stamp_path() -> Path:
    return cache_dir().parent / "verified.json"


def _stamp_key(path: Path) -> tuple[str, dict]:
    st = path.stat()
    return str(path.resolve()), {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def read_stamps() -> dict:
    """The files verified before (`verified.json`): a cache, so a file that is missing,
    unreadable or not a JSON object counts as empty (and is rewritten whole by the next
    verification), said once in the log."""
    try:
        stamps = json.loads(_stamp_path().read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError):
        stamps = None
    if not isinstance(stamps, dict):
        logger.warning("ignoring %s, which is not a record of verified files", _stamp_path())
        return {}
    return stamps


def remember_verified(paths: Sequence[Path]) -> None:
    stamps = read_stamps()
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


def read_content(
    path: Path, spec: IdxFile, *, verify: bool, stamps: dict
) -> tuple[bytes, Path, list[Path]]:
    """The decompressed content of `path` (from the decoded cache when it has a current
    copy, whose SHA-256 is checked at every read: a damaged copy is dropped and made
    again from the source), the file it was read from, and the files newly verified on
    the way (the source, remembered by path, size and modification time)."""
    decoded = _decoded_copy(path, spec)
    if decoded is not None:
        raw = read_bytes(decoded, spec.size)
        if not verify:
            return raw, decoded, []
        try:  # the library's own copy: checked by its content at every read
            _check_sha256(raw, spec, decoded)
            return raw, decoded, []
        except ChecksumError:  # a damaged copy: drop it and read the source
            logger.warning("discarding a damaged decoded copy %s", decoded)
            decoded.unlink(missing_ok=True)
    raw = read_bytes(path, spec.size)
    verified = []
    if verify and not _is_remembered(path, stamps):
        _check_sha256(raw, spec, path)
        verified.append(path)
    if verify and path.suffix == ".gz":
        # Verified: keep the decompressed bytes, so the next load skips the gunzip.
        _store_decoded(path, spec, raw)
    return raw, path, verified


def _check_sha256(raw: bytes, spec: IdxFile, path: Path) -> None:
    digest = hashlib.sha256(raw).hexdigest()
    if len(raw) != spec.size or digest != spec.sha256:
        raise ChecksumError(
            f"{path}: content does not match Fashion-MNIST's {spec.name} "
            f"({len(raw):,} bytes, SHA-256 {digest}; expected {spec.size:,} bytes, "
            f"SHA-256 {spec.sha256}). Delete the file so that it is fetched again."
        )
