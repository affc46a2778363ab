"""A run folder's record of the files its commands wrote, as pip's `RECORD` is an
install's: each file's name (relative to the folder), size, SHA-256 and the command that
wrote it, in `.eqx-fmnist.record`, written atomically under the folder's lock.

```json
{"format": 1,
 "files": {"config.json": {"size": 1184, "sha256": "5c0e…", "by": "train"},
           "model.onnx": {"size": 1071388, "sha256": "a3f1…", "by": "export"},
           "history.jsonl": {"size": null, "sha256": null, "by": "train"}},
 "folders": ["tensorboard"]}
```

A command claims the names it is about to write (size and checksum `null`: being
written), writes them, and seals them with their size and SHA-256; one killed in between
leaves names claimed, which are still its own (it checked under the lock that nothing
else held them). `--overwrite` removes only what the record lists and whose bytes still
match, and the folders the record says a run made once they are empty; it never follows
a link, and refuses, removing nothing, where a listed name is now a link, a device, a
folder or a file with other bytes, or where the run would write a name the record does
not list (a file of yours, or of a run written before folders kept a record).
"""

import dataclasses
import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ..fileio import PART, atomic_write
from .layout import EARLIER_OWN, LOCK_NAME, RunError, holds_run

RECORD_FILE = ".eqx-fmnist.record"
FORMAT = 1
MAX_RECORD_BYTES = 16 * 2**20
"""The largest record read: far more than a run's files take (a few hundred bytes each)."""
TEACHER_FOLDER = "teacher"
"""Where a distilled run without a teacher of its own trains one, inside its folder (a
run folder of its own, with its own record)."""


def file_digest(path: Path) -> tuple[int, str]:
    """`(size, SHA-256)` of the file at `path`, read in blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(2**20):
            h.update(block)
    return path.stat().st_size, h.hexdigest()


def _not_plain(path: Path) -> bool:
    """A link, a folder, a device or a FIFO: never a file a command wrote."""
    return path.is_symlink() or (path.exists() and not path.is_file())


@dataclasses.dataclass
class Record:
    """A folder's record: `files` (name: `size`, `sha256`, `by`) and `folders` (the
    folders its runs made). `exists`: whether the folder had a record when read."""

    folder: Path
    files: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    folders: list[str] = dataclasses.field(default_factory=list)
    exists: bool = False
    claimed: dict[str, tuple[dict | None, tuple | None]] = dataclasses.field(
        default_factory=dict, repr=False
    )
    """What each name claimed here had before: its entry and its file's size and SHA-256."""

    @classmethod
    def read(cls, folder: str | os.PathLike) -> "Record":
        """The record of `folder` (empty when it has none).

        **Raises:**

        `RunError` naming the file when it is a link, too large or not a record.
        """
        folder = Path(folder)
        path = folder / RECORD_FILE
        if not path.exists() and not path.is_symlink():
            return cls(folder)
        try:
            if _not_plain(path) or path.stat().st_size > MAX_RECORD_BYTES:
                raise ValueError("not a plain file of a record's size")
            saved = json.loads(path.read_text())
            files = saved["files"]
            folders = saved["folders"]
            if saved.get("format") != FORMAT or not isinstance(files, dict):
                raise ValueError(f"format {saved.get('format')!r}")
            if not all(
                isinstance(e, dict) and isinstance(e.get("by"), str) for e in files.values()
            ):
                raise ValueError("an entry without `by`")
            if not isinstance(folders, list) or not all(isinstance(f, str) for f in folders):
                raise ValueError("`folders` is not a list of names")
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise RunError(
                f"{path} is not a record of the files runs wrote ({e}); without it nothing "
                "can be told to be a run's: move the files you keep, and delete it."
            ) from None
        return cls(folder, files, folders, True)

    def save(self) -> None:
        """Write the record (atomically); call it only while holding the folder's lock."""
        saved = {"format": FORMAT, "files": self.files, "folders": self.folders}
        with atomic_write(self.folder / RECORD_FILE, "w") as f:
            f.write(json.dumps(saved, indent=1, sort_keys=True) + "\n")
        self.exists = True

    def claim(self, names: Iterable[str], by: str) -> None:
        """List `names` as being written by the command `by` (and the folders above them
        that do not exist yet as made by it), before they are written."""
        for name in names:
            for parent in reversed(Path(name).parents[:-1]):
                if not (self.folder / parent).exists() and str(parent) not in self.folders:
                    self.folders.append(str(parent))
            path = self.folder / name
            had = file_digest(path) if path.is_file() and not path.is_symlink() else None
            self.claimed.setdefault(name, (self.files.get(name), had))
            self.files[name] = {"size": None, "sha256": None, "by": by}
        self.save()

    def adopt(self, sub: str, before: set[Path] | None, by: str) -> None:
        """Claim the files a writer that names its own (TensorBoard, a profiler) put
        under `sub` since `below` gave `before` (`None`: `sub` was not there; the run made
        it, and the record lists it as a folder the run made)."""
        if not (self.folder / sub).exists():
            return
        if before is None and sub not in self.folders:
            self.folders.append(sub)
        new = (below(self.folder / sub) or set()) - (before or set())
        self.claim(sorted(str(p.relative_to(self.folder)) for p in new), by)

    def seal(self) -> None:
        """Record the size and SHA-256 of each file claimed here and written; a name
        claimed but not written keeps what the record said of it before (a command
        that failed first makes nothing its own), and one no longer there leaves it."""
        for name, (entry, had) in self.claimed.items():
            path = self.folder / name
            now = file_digest(path) if path.is_file() and not path.is_symlink() else None
            if now is not None and now != had:
                self.files[name] = {"size": now[0], "sha256": now[1], "by": self.files[name]["by"]}
            elif now is not None and entry is not None:
                self.files[name] = entry  # not written by this command: as it was
            else:
                self.files.pop(name, None)
        self.claimed.clear()
        self.save()

    def why_not_ours(self, name: str, by: str | None = None) -> str | None:
        """Why `name` in the folder may not be replaced or removed by the command `by`
        (`None`: by `--overwrite`), or `None` when it may: it is a link, a folder or a
        device; no record lists it; the record says another command wrote it (a figure,
        `.png`, may be drawn again by any); or its bytes changed since."""
        path = self.folder / name
        if _not_plain(path):
            return "is a link, a folder or a device"
        entry = self.files.get(name)
        if entry is None:
            where = "no record" if not self.exists else f"{RECORD_FILE} does not"
            return f"is not a file a run wrote ({where} lists it: a file of yours, or of a run of an earlier version)"
        if by is not None and entry["by"] != by and not name.endswith(".png"):
            return f"is the {entry['by']} command's own file"
        if entry["sha256"] is not None and path.exists():
            if (entry["size"], entry["sha256"]) != file_digest(path):
                return "was changed since it was written (its bytes are not the record's)"
        return None

    def refuse_foreign(self, names: Iterable[str], *, overwrite: bool, keep: Path | None) -> None:
        """`RunError` before a run starts in the folder: a name it would write that is
        not the folder's runs' (`why_not_ours`), whatever `overwrite` says; without
        `overwrite`, any file or folder the record does not list (besides `keep`, the
        run's own teacher folder, and the lock and temporaries)."""
        for name in names:
            path = self.folder / name
            if (path.exists() or path.is_symlink()) and (why := self.why_not_ours(name)):
                raise RunError(
                    f"{path} {why}: a run never replaces it; move it away, or choose another --out."
                )
        if overwrite or not self.folder.is_dir():
            return
        listed = {Path(n).parts[0] for n in self.files} | {Path(f).parts[0] for f in self.folders}
        foreign = sorted(
            p.name
            for p in self.folder.iterdir()
            if p.name not in listed | {RECORD_FILE, LOCK_NAME}
            and not p.name.endswith(PART)
            and (keep is None or p.resolve() != keep.resolve())
        )
        if foreign:
            raise RunError(
                f"{self.folder} holds files no run wrote there ({', '.join(foreign[:3])}"
                f"{', ...' if len(foreign) > 3 else ''}): choose another folder, or train "
                "beside them with --overwrite (they are kept)."
            )

    def refuse_clearing(self, keep: Path | None = None) -> list["Record"]:
        """`RunError` where `clear` would remove what is not a run's: a listed name that
        is not the run's any more (`why_not_ours`), a listed folder that is a link. The
        records `clear` goes through (the folder's and its teacher's)."""
        records = [self, *self._teachers(keep)]
        for record in records:
            for sub in record.folders:
                if (record.folder / sub).is_symlink():
                    raise RunError(
                        f"{record.folder / sub} is a link: --overwrite never follows one "
                        "(it would remove another folder's files); remove the link."
                    )
            for name in record.files:
                path = record.folder / name
                if (path.exists() or path.is_symlink()) and (why := record.why_not_ours(name)):
                    raise RunError(
                        f"{path} {why}: --overwrite removes nothing; move it away, or "
                        "choose another --out."
                    )
        return records

    def clear(self, keep: Path | None = None) -> list[Path]:
        """What `--overwrite` does, under the folder's lock, once `refuse_clearing` has
        passed (nothing is removed otherwise): every file the record lists removed, the
        folders its runs made removed once empty, and the run a distilled run trained in
        `teacher/` (by its own record) unless it is `keep`. The paths removed."""
        records = self.refuse_clearing(keep)
        removed = []
        for record in records:
            for name in record.files:
                path = record.folder / name
                if path.is_file():
                    path.unlink()
                    removed.append(path)
            for sub in sorted(record.folders, key=lambda f: -len(Path(f).parts)):
                path = record.folder / sub
                if path.is_dir() and not path.is_symlink() and not any(path.iterdir()):
                    path.rmdir()
            record.files = {}  # the folders that stay (not empty, or kept) stay the run's
            record.folders = [f for f in record.folders if (record.folder / f).is_dir()]
            if record is not self:
                (record.folder / RECORD_FILE).unlink()
                (record.folder / LOCK_NAME).unlink(missing_ok=True)  # a killed run's
                if not any(record.folder.iterdir()):
                    record.folder.rmdir()
        self.save()
        return removed

    def _teachers(self, keep: Path | None) -> list["Record"]:
        """The record of the run a distilled run trained in its `teacher/` (a folder the
        record lists), unless that is `keep`."""
        teacher = self.folder / TEACHER_FOLDER
        if TEACHER_FOLDER not in self.folders or teacher.is_symlink() or not teacher.is_dir():
            return []
        if keep is not None and teacher.resolve() == keep.resolve():
            return []
        return [Record.read(teacher)]


def below(folder: Path) -> set[Path] | None:
    """The plain files under `folder` (links not followed); `None` where it is not a
    folder (not there yet, or a link)."""
    if folder.is_symlink() or not folder.is_dir():
        return None
    return {p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()}


def refuse_overwriting(
    paths: Sequence[Path],
    *,
    own: Path | None = None,
    overwrite: bool = False,
    by: str | None = None,
) -> None:
    """`RunError`, before anything is written, for outputs that would destroy: a link, a
    device, a FIFO or anything else that is not a plain file (whatever `overwrite`
    says: a command never replaces what it did not write), anything in another run's
    folder than `own` (the run a command reads); in a run folder, a file its record
    does not say the command `by` wrote (figures aside, which any command may draw
    again) or whose bytes changed since (in a folder without a record: a run's own
    files, `EARLIER_OWN`); or, without `overwrite`, a file that exists. Every command
    that writes files asks here first, and again under the lock it writes under."""
    for path in paths:
        folder = path.parent
        name = path.name
        not_plain = path.exists() and not path.is_file() and not path.is_dir()
        if path.is_symlink() or not_plain:
            kind = "a link" if path.is_symlink() else "not a plain file (a device or a FIFO)"
            raise RunError(f"{path} is {kind}; write to the path of a plain file instead.")
        if path.is_dir():
            raise RunError(f"{path} is a folder; give a file to write.")
        if holds_run(folder) and (own is None or folder.resolve() != own.resolve()):
            raise RunError(
                f"{folder} holds another run: write {name} elsewhere (--out), not into it."
            )
        record = Record.read(folder)
        if record.exists and path.exists() and (why := record.why_not_ours(name, by)):
            raise RunError(f"{path} {why}: it is never replaced; choose another name.")
        if not record.exists and holds_run(folder) and name in EARLIER_OWN:
            raise RunError(
                f"{path} is a file of the run in {folder}: writing it would replace the "
                "run's own; choose another name."
            )
        if path.exists() and not overwrite:
            raise RunError(f"{path} exists; replace it with --overwrite, or choose another path.")
