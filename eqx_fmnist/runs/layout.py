"""What a run folder holds: the names of its files, which of them are the run's own
record, the rule that no command writes over another run's (`refuse_overwriting`), what
`overwrite` removes (`clear_run`), and the readers of the files a run reads back (its
history, its record of a teacher, its config when resumed), each naming the file and
the fix.

```
runs/20261201-021500/
  .eqx-fmnist.lock     while a process writes the folder
  config.json          the TrainConfig
  history.jsonl        one History record per logging interval
  checkpoint.eqx       every `checkpoint_every`, at the end, and when asked to stop
  summary.json         test metrics, throughput, per-class accuracy, the config
  calibration.safetensors   with `calibration_size`: fitted for this checkpoint
  examples.png  training_curve.png  predictions.png  confusion_matrix.png
  reliability.png  robustness.png   calibration; accuracy on moved test images
  tensorboard/         scalars and hyperparameters, with `tensorboard=True`
  teacher.json         a distilled run's teacher: where, and its checksum
  sweep.md  sweep.json  sweep_heatmap.png      for a sweep
```
"""

import json
import logging
import os
import typing
from collections.abc import Sequence
from pathlib import Path

from ..calibration import CALIBRATION_FILE
from ..checkpoint import CheckpointError, payload_digest, read_header
from ..config import TrainConfig
from ..export import FORMATS, manifest_path
from ..intervals import History

logger = logging.getLogger(__name__)

CHECKPOINT_NAME = "checkpoint.eqx"
LOCK_NAME = ".eqx-fmnist.lock"
"""The folder's lock file, held by every process that writes into a run folder."""
TEACHER_FILE = "teacher.json"
"""Where a distilled run's folder names its teacher, so that a resume finds it."""
OUT_OF_FOLD = "out_of_fold.npz"
"""A cv folder's out-of-fold probabilities (`probabilities`, `labels`, `fold`)."""
CV_FILES = (OUT_OF_FOLD, "cv.json", "folds.png")
SWEEP_FILES = ("sweep.md", "sweep.json", "sweep_heatmap.png")
FIGURES = (
    "examples.png",
    "training_curve.png",
    "predictions.png",
    "confusion_matrix.png",
    "reliability.png",
    "robustness.png",
)
HOLDS_RESULTS = ("summary.json", CHECKPOINT_NAME, *FIGURES, *SWEEP_FILES)
"""What makes a folder hold results: a checkpoint, a summary or a figure (a folder with
only the config and the history of a start that failed does not)."""
RECORD = (
    "config.json",
    "history.jsonl",
    CHECKPOINT_NAME,
    "summary.json",
    CALIBRATION_FILE,
    TEACHER_FILE,
    *SWEEP_FILES[:2],
    *CV_FILES[:2],
)
"""A run's record of itself, which no command but the run's own ever writes over (its
figures may be drawn again)."""
SUSPECTS = tuple(
    f"suspects_{split}{end}"
    for split in ("train", "test")
    for end in (".csv", ".json", ".png", "_by_class.png")
)
"""What `audit` writes into a folder (the suspects of each set)."""
EXPORTS = tuple(
    name
    for kind in FORMATS.values()
    for name in (f"model{kind.suffix}", manifest_path(Path(f"model{kind.suffix}")).name)
)
"""What `export` writes into a run folder by default: an artifact and its manifest."""
RUN_FILES = (
    *RECORD,
    "prediction_sets.png",
    *FIGURES,
    *SWEEP_FILES,
    *CV_FILES,
    *SUSPECTS,
    *EXPORTS,
)
"""Every file a run (and the commands that read it: `audit`, `export`) writes into its
folder, by exact name: with `TENSORBOARD` files and `PROFILE` traces under their folders
and a teacher's run in `teacher/`, what `overwrite` removes before a new run starts.
Nothing else the folder holds is touched."""
TENSORBOARD = "tensorboard"
"""The folder of a run's TensorBoard event files (`events.out.tfevents.*`)."""
PROFILE = "profile"
"""The folder of a run's `jax.profiler` trace (`plugins/profile/<time>/<host>.*`)."""
TRACE_ENDS = (".xplane.pb", ".trace.json.gz", "perfetto_trace.json.gz")


class RunError(Exception):
    """A run folder cannot be used as asked (in use, holding results, a bad option)."""


def holds_run(folder: Path) -> bool:
    """Whether `folder` is a run's: it holds a checkpoint or a summary."""
    return (folder / CHECKPOINT_NAME).is_file() or (folder / "summary.json").is_file()


def refuse_overwriting(
    paths: Sequence[Path], *, own: Path | None = None, overwrite: bool = False
) -> None:
    """`RunError`, before anything is written, for outputs that would destroy: a link, a
    device, a FIFO or anything else that is not a plain file (whatever `overwrite`
    says: a command never replaces what it did not write), a file of a run's `RECORD`
    (its checkpoint, summary, ...), anything in another run's folder than `own` (the run
    a command reads), or, without `overwrite`, a file that exists. Every command that
    writes files asks here first, and again under the lock it writes under."""
    for path in paths:
        folder = path.parent
        name = path.name
        not_plain = path.exists() and not path.is_file() and not path.is_dir()
        if path.is_symlink() or not_plain:
            kind = "a link" if path.is_symlink() else "not a plain file (a device or a FIFO)"
            raise RunError(f"{path} is {kind}; write to the path of a plain file instead.")
        if path.is_dir():
            raise RunError(f"{path} is a folder; give a file to write.")
        if holds_run(folder) and name in RECORD:
            raise RunError(
                f"{path} is a file of the run in {folder}: writing it would replace the "
                "run's own; choose another name."
            )
        if holds_run(folder) and (own is None or folder.resolve() != own.resolve()):
            raise RunError(
                f"{folder} holds another run: write {name} elsewhere (--out), not into it."
            )
        if path.exists() and not overwrite:
            raise RunError(f"{path} exists; replace it with --overwrite, or choose another path.")


def distinct_stems(paths: Sequence[str | os.PathLike]) -> list[str]:
    """Each path's stem, a repeated one numbered (`x`, `x-2`): names derived from inputs
    (`x.prepared.png`) that never collide, whatever folders the inputs came from."""
    used: list[str] = []
    for path in paths:
        stem = name = Path(path).stem
        k = 1
        while name in used:
            k += 1
            name = f"{stem}-{k}"
        used.append(name)
    return used


def clear_run(folder: Path, keep: Path | None = None, lock: str | None = None) -> list[Path]:
    """Remove what a run wrote into `folder`: the files of `RUN_FILES` by exact name, the
    event files of `tensorboard/`, the traces of `profile/`, and in `teacher/` the run a
    distilled run trained there (when it holds one: a checkpoint or a summary), all but
    `keep` (a teacher trained there first, kept); `lock`, the name of a run's lock file,
    removed in a teacher's folder. A folder left empty goes; a file the library did not
    write stays, and so does its folder. The paths removed."""
    refuse_links(folder)
    removed = [folder / n for n in RUN_FILES if (folder / n).is_file()]
    removed += [p for p in (folder / TENSORBOARD).rglob("events.out.tfevents.*") if p.is_file()]
    traces = (folder / PROFILE / "plugins" / "profile").glob("*/*")
    removed += [p for p in traces if p.is_file() and p.name.endswith(TRACE_ENDS)]
    for path in removed:
        path.unlink()
    for sub in (folder / TENSORBOARD, folder / PROFILE):
        _remove_empty(sub)
    teacher = folder / "teacher"
    if holds_run(teacher) and (keep is None or teacher.resolve() != keep.resolve()):
        removed += clear_run(teacher, lock=lock)
        if lock is not None:
            (teacher / lock).unlink(missing_ok=True)
        _remove_empty(teacher)
    return removed


def refuse_links(folder: Path) -> None:
    """`RunError`, before anything is removed, where clearing `folder` would follow a
    link or remove what is not a plain file: a `RUN_FILES` name that is a link, a
    device, a FIFO or a folder, or a `teacher/`, `tensorboard/` or `profile/` that is a
    link (to another run, or a shared log folder)."""
    for name in RUN_FILES:
        path = folder / name
        if path.is_symlink() or (path.exists() and not path.is_file()):
            raise RunError(
                f"{path} is not a file this run wrote (a link, a folder or a device): "
                "--overwrite removes nothing there; move it away, or choose another --out."
            )
    for name in ("teacher", TENSORBOARD, PROFILE):
        if (folder / name).is_symlink():
            raise RunError(
                f"{folder / name} is a link: --overwrite never follows one (it would remove "
                "another folder's files); remove the link, or choose another --out."
            )


def _remove_empty(folder: Path) -> None:
    """Remove `folder` and the folders under it that are (or are left) empty."""
    if not folder.is_dir() or folder.is_symlink():
        return
    for sub in sorted((p for p in folder.rglob("*") if p.is_dir()), reverse=True):
        if not sub.is_symlink() and not any(sub.iterdir()):
            sub.rmdir()
    if not any(folder.iterdir()):
        folder.rmdir()


def _not_a_record(record: object) -> str | None:
    """Why `record` is not a history record, or `None`: a JSON object with a whole
    `step`, a `loss` and an `accuracy` (or `members`, a list of such records), whose
    other known fields are numbers; an older run's record may lack the others."""
    if not isinstance(record, dict) or type(record.get("step")) is not int:
        return "is not a history record (a JSON object with a whole `step`)"
    missing = [k for k in ("loss", "accuracy") if k not in record and "members" not in record]
    if missing:
        return f"has no `{missing[0]}`"
    for key, value in record.items():
        if key == "members":
            if not isinstance(value, list) or not value:
                return "has `members` that is not a list of records"
            why = next(filter(None, map(_not_a_record, value)), None)
            if why is not None:
                return f"has a member that {why}"
        elif key in History.__annotations__ and not _a_number(value):
            return f"has `{key}` {json.dumps(value)[:40]}, not a number"
    return None


def _a_number(value: object) -> bool:
    """A JSON number a float can hold (a bool is not one; nor is an int past 1e308)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        float(value)
    except OverflowError:
        return False
    return True


def read_history(folder: str | os.PathLike) -> list[History]:
    """The records of `folder/history.jsonl` (none if it does not exist).

    **Raises:**

    `RunError` naming the file and line of a record that is not a JSON object with a
    whole `step` and numbers for its other fields. A last line cut short (no newline
    after it: what a process killed while appending leaves) is dropped with a warning.
    """
    path = Path(folder) / "history.jsonl"
    if not path.is_file():
        return []
    text = path.read_text(errors="replace")
    lines = text.splitlines()
    if lines and not text.endswith("\n") and _not_a_record(_parsed(lines[-1])) is not None:
        logger.warning("%s: dropping its last line, cut short: %.60s", path, lines.pop())
    records: list[History] = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        record = _parsed(line)
        why = _not_a_record(record)
        if why is not None:
            raise RunError(
                f"{path}, line {i}, {why}: delete the line, or the file to start the "
                "history afresh."
            )
        records.append(typing.cast(History, record))
    return records


def _parsed(line: str) -> object:
    try:
        return json.loads(line)
    except ValueError:
        return None


def teacher_record(folder: Path, teacher: Path) -> dict[str, str]:
    """What `teacher.json` says of a distilled run's teacher: its checkpoint relative to
    the run folder (so that a moved or copied run, teacher inside, finds its own), its
    absolute path, and its payload's SHA-256 (so that a replaced teacher is refused)."""
    return {
        "teacher": os.path.relpath(teacher, folder.resolve()),
        "absolute": str(teacher),
        "sha256": payload_digest(teacher),
    }


def refuse_edited_config(folder: Path, config: TrainConfig) -> None:
    """`RunError` when the `config.json` of a run being resumed says other than its
    checkpoint's config (a resume continues the checkpoint's: an edit would be undone
    without a word). Fields the file does not name (a run of an earlier version's) are
    not compared."""
    file = folder / "config.json"
    if not file.is_file():
        return
    try:
        written = json.loads(file.read_text())
    except (OSError, ValueError) as e:
        written = e
    if not isinstance(written, dict):
        raise RunError(
            f"{file} is not a config the run wrote ({written!r:.60}); restore it, or delete "
            "it (the checkpoint holds the config)."
        )
    saved = json.loads(config.to_json())
    changed = [
        f"{name} {written[name]!r} (checkpoint: {saved[name]!r})"
        for name in written
        if name in saved and written[name] != saved[name]
    ]
    if changed:
        raise RunError(
            f"{file} was edited: {', '.join(changed)}; a resume continues the checkpoint's "
            "config. Undo the edit, or start a new run with these settings."
        )


def read_teacher(folder: str | os.PathLike) -> Path | None:
    """The teacher `folder/teacher.json` names (a distilled run's), else `None`: its
    checkpoint relative to the folder (a moved or copied run finds the teacher it
    carries), else at its absolute path, and only with the checksum it had when the run
    began (a record of earlier versions, without one, names an absolute path).

    **Raises:**

    `RunError` naming the file when it names no teacher, or when no teacher with that
    checksum is at either place.
    """
    folder = Path(folder)
    file = folder / TEACHER_FILE
    if not file.is_file():
        return None
    try:
        record = json.loads(file.read_text())
        places = [record["teacher"], record.get("absolute", record["teacher"])]
        digest = record.get("sha256")
        if not all(isinstance(p, str) and p for p in places) or not isinstance(digest, str | None):
            raise TypeError(f"the teacher is {record['teacher']!r}, not a path")
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise RunError(
            f"{file} does not name a teacher ({type(e).__name__}: {e}); write "
            '{"teacher": "RUN_DIR"} into it, or delete it to resume without one.'
        ) from None
    found = [folder / p for p in dict.fromkeys(places)]
    if digest is None:  # an earlier version's record: the path alone
        return _earlier_teacher(folder, found[0], file)
    for path in found:
        if path.is_file() and digest_or_none(path) == digest:
            return path
    raise RunError(
        f"{file} names a teacher ({' or '.join(map(str, found))}) that is not there with "
        "the checksum it had when this run began: put that checkpoint back, or delete "
        f"{TEACHER_FILE} to resume without a teacher."
    )


def _earlier_teacher(folder: Path, named: Path, file: Path) -> Path:
    """The teacher an earlier version's `teacher.json` names (a path, no checksum),
    verified by what its checkpoint says: the run's own `teacher/` where the path named
    one (a moved run carries it), and refused when that checkpoint was written after the
    run's own (another run's, put there since)."""
    path = named / CHECKPOINT_NAME if named.is_dir() else named
    inside = folder / "teacher" / CHECKPOINT_NAME
    if path.parent.name == "teacher" and path.name == CHECKPOINT_NAME and inside.is_file():
        path = inside
    own = folder / CHECKPOINT_NAME
    if path.is_file() and own.is_file() and _created(path) > _created(own):
        raise RunError(
            f"{file} names {path}, written after this run's checkpoint: it is not the "
            f"teacher this run learnt from; put that one back, or delete {TEACHER_FILE}."
        )
    return path


def _created(checkpoint: Path) -> str:
    """When a checkpoint was written, as its header says (ISO 8601, UTC)."""
    try:
        return str(read_header(checkpoint)[0].get("created", ""))
    except CheckpointError:
        return ""


def digest_or_none(path: Path) -> str | None:
    """The payload SHA-256 of the checkpoint at `path`, `None` if there is none."""
    try:
        return payload_digest(path)
    except CheckpointError:
        return None
