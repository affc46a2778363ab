"""Writing files so that a failure never leaves a half-written one."""

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "wb", *, fsync: bool = False) -> Iterator[IO]:
    """Open a temporary file beside `path`; on success move it onto `path` atomically.

    If the body raises (or the process dies), `path` keeps its previous content, or does
    not appear, and the temporary file is removed.

    **Arguments:**

    - `path`: the file to write. Its folder is created if needed.
    - `mode`: `"wb"` or `"w"`. Defaults to `"wb"`.
    - `fsync`: flush the data to disk before the move, so that a power cut cannot leave
        an empty file under the new name. Defaults to `False`.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"`mode` must be 'w' or 'wb', but got {mode!r}.")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(fd, mode) as f:
            yield f
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
