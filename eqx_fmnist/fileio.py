"""Writing files so that a failure never leaves a half-written one, and a lock
(`fcntl.flock`) that keeps two writers out of one folder."""

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import socket
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

PART = ".part"
"""The suffix of `atomic_write`'s temporary files."""
NAME_MAX = 255
"""The longest file name, in bytes, of the file systems a run is kept on."""


def digest(record: Mapping[str, Any], *blobs: bytes) -> str:
    """The SHA-256 of `record` (its JSON, keys sorted) and of `blobs` after it: what a
    file the library reads back records of its own content, so that one changed bit is
    told apart from what was written."""
    h = hashlib.sha256(json.dumps(record, sort_keys=True).encode())
    for blob in blobs:
        h.update(blob)
    return h.hexdigest()


def _temporary_prefix(name: str) -> str:
    """`.NAME.`, or for a name too long to take `atomic_write`'s 15 more bytes, a short
    stand-in: the temporary file's name is never longer than a file system allows."""
    if len(os.fsencode(name)) <= NAME_MAX - 15:
        return f".{name}."
    return f".{hashlib.sha256(os.fsencode(name)).hexdigest()[:16]}."


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
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        prefix = _temporary_prefix(path.name)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=prefix, suffix=PART)
    except OSError as e:
        raise _naming(e, path) from None
    os.chmod(tmp, 0o666 & ~_umask())  # as open() would make it (mkstemp makes it 0600)
    try:
        with os.fdopen(fd, mode) as f:
            yield f
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        # A file error (errno set) names the file asked for, not the temporary one; the
        # caller's own errors (a `URLError` is an `OSError` without an errno) pass as
        # they came.
        if isinstance(e, OSError) and e.errno is not None and e.filename in (None, tmp):
            raise _naming(e, path) from None
        raise


def atomic_writes(files: Mapping[Path, bytes]) -> None:
    """Write files that belong together (an artifact and its manifest): each to a
    temporary file beside it first, the older files of those names removed, then all
    moved into place. If a write or a move fails, the temporaries and what was moved go:
    no file lands without its partners, and none is left beside an older partner."""
    with contextlib.ExitStack() as stack:
        opened = [(stack.enter_context(atomic_write(path)), blob) for path, blob in files.items()]
        for f, blob in opened:
            f.write(blob)
        for path in files:
            path.unlink(missing_ok=True)
        try:
            stack.close()  # each moved into place
        except BaseException:
            for path in files:
                path.unlink(missing_ok=True)
            raise


def _naming(e: OSError, path: Path) -> OSError:
    """`e` about `path` (the file the caller asked for), keeping its errno."""
    return type(e)(e.errno, e.strerror or str(e), str(path))


def remove_stale_parts(folder: str | os.PathLike) -> list[Path]:
    """Delete the temporary files `atomic_write` leaves in `folder` when its process is
    killed mid-write (`.NAME.*.part`); call it only while holding the folder's lock."""
    stale = sorted(Path(folder).glob(f".*{PART}"))
    for p in stale:
        p.unlink(missing_ok=True)
    return stale


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

    The lock is the kernel's (`fcntl.flock`, exclusive, non-blocking), so it is held
    exactly as long as the process that took it lives: a run killed with SIGKILL leaves
    the file behind but not the lock, and a reused pid cannot fool it. The file holds
    the writer's pid and host, for the message a second run prints.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._fd: int | None = None

    def __enter__(self) -> "FolderLock":
        for _ in range(5):
            try:  # never through a link: the lock is rewritten, and must be the folder's
                flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW
                fd = os.open(self.path, flags, 0o666 & ~_umask())
            except OSError as e:
                if e.errno != errno.ELOOP:
                    raise
                raise FolderInUse(
                    f"{self.path} is a symbolic link, not the folder's lock file: remove it "
                    "(it is never followed)."
                ) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown"
                os.close(fd)
                raise FolderInUse(
                    f"another run ({holder}) is writing to {self.path.parent}; choose "
                    "another folder or wait for it to finish."
                ) from None
            try:  # the file we locked must still be the one at `path` (not just unlinked)
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}".encode(), 0)
                self._fd = fd
                return self
            os.close(fd)
        raise FolderInUse(f"cannot lock {self.path.parent}; remove {self.path}.")

    def __exit__(self, *exc) -> None:
        if self._fd is not None:
            self.path.unlink(missing_ok=True)
            os.close(self._fd)  # releases the lock
            self._fd = None


_OS_HINTS = {
    errno.ENOSPC: "free some space, or write elsewhere ({elsewhere})",
    errno.EDQUOT: "free some space, or write elsewhere ({elsewhere})",
    errno.EROFS: "the file system is read-only: write elsewhere ({elsewhere})",
    errno.EACCES: "no permission: change its permissions, or use another path",
    errno.EPERM: "no permission: change its permissions, or use another path",
    errno.EISDIR: "that is a folder: give a file",
    errno.ENOTDIR: "a part of that path is a file, not a folder",
    errno.EEXIST: "it exists and is in the way: move it, or choose another path",
}


def os_error_line(e: OSError, elsewhere: str = "--out") -> str:
    """An operating-system error as one line: what failed, the path the user gave (never
    a temporary name, see `atomic_write`), and what to do; `elsewhere`: how the command
    writes somewhere else (its flag, `--out` by default)."""
    what = e.strerror or str(e)
    where = f" ({e.filename})" if e.filename else ""
    hint = _OS_HINTS.get(e.errno or 0, "").format(elsewhere=elsewhere)
    return f"{what}{where}" + (f"; {hint}." if hint else ".")
