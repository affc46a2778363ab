"""The verified download: HTTPS, checksums while streaming, nothing half-written."""

import hashlib
import logging
import os
import urllib.error
import urllib.parse
import urllib.request
import zlib
from collections.abc import Sequence
from pathlib import Path

from ..fileio import atomic_write
from . import facts
from .errors import ChecksumError, DataError, DownloadError
from .facts import MIRRORS, IdxFile, ProgressFn
from .store import cache_dir

logger = logging.getLogger(__name__)


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
    done = 0
    gzip_error = None
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
    for spec in facts.FILES.values():
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
