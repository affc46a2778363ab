"""Writing files so that a failure never leaves a half-written one, and a lock file
that keeps two writers out of one folder."""

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
    os.chmod(tmp, 0o666 & ~_umask())  # as open() would make it (mkstemp makes it 0600)
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


def _umask() -> int:
    """The process's umask, read without changing it where Linux allows."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0)  # elsewhere: set and restore (briefly process-wide)
    os.umask(mask)
    return mask


class FolderInUse(Exception):
    """Another live process holds the folder's lock."""


class FolderLock:
    """A lock file (`path`) held while a run writes its folder: a second run refuses to
    share the folder.

    The lock holds the writer's pid; a lock left by a process that no longer exists
    (killed with SIGKILL) is taken over.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    def __enter__(self) -> "FolderLock":
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                try:
                    pid = int(self.path.read_text() or 0)
                    os.kill(pid, 0)
                except (ValueError, ProcessLookupError, FileNotFoundError):
                    self.path.unlink(missing_ok=True)  # stale: its writer is gone
                    continue
                except PermissionError:
                    pass  # alive, another user's
                raise FolderInUse(
                    f"another run (pid {pid}) is writing to {self.path.parent}; "
                    "choose another folder or wait for it to finish."
                ) from None
            with os.fdopen(fd, "w") as f:
                f.write(str(os.getpid()))
            return self
        raise FolderInUse(f"cannot lock {self.path.parent}; remove {self.path}.")

    def __exit__(self, *exc) -> None:
        self.path.unlink(missing_ok=True)
