"""What a run folder holds: the names of its files, and the readers of the files a run reads back (its history, its record of a teacher, its
config when resumed), each naming the file and the fix. What its commands wrote, and
what no command writes over, is the folder's record's (`runs/record.py`).

```
runs/20261201-021500/
  .eqx-fmnist.lock     while a process writes the folder
  .eqx-fmnist.record   what its commands wrote: each file's name, size and SHA-256
  config.json          the TrainConfig
  history.jsonl        one History record per logging interval
  checkpoint.eqx       every `checkpoint_every`, at the end, and when asked to stop
  summary.json         test metrics, throughput, per-class accuracy, the config
  calibration.safetensors   with `calibration_size`: fitted for this checkpoint
  examples.png  training_curve.png  predictions.png  confusion_matrix.png
  reliability.png  robustness.png   calibration; accuracy on moved test images
  tensorboard/         scalars and hyperparameters, with `tensorboard=True`
  teacher.json         a distilled run's teacher: where, and its checksum
  sweep.md  sweep.json  sweep_heatmap.png      a sweep's (each kind declares its files)
```
"""

import json
import logging
import os
import typing
from collections.abc import Sequence
from pathlib import Path

from ..checkpoint import CheckpointError, payload_digest, read_header
from ..config import TrainConfig
from ..intervals import History

logger = logging.getLogger(__name__)

CHECKPOINT_NAME = "checkpoint.eqx"
LOCK_NAME = ".eqx-fmnist.lock"
"""The folder's lock file, held by every process that writes into a run folder."""
TEACHER_FILE = "teacher.json"
"""Where a distilled run's folder names its teacher, so that a resume finds it."""
OUT_OF_FOLD = "out_of_fold.npz"
"""A cv folder's out-of-fold probabilities (`probabilities`, `labels`, `fold`)."""
FIGURES = (
    "examples.png",
    "training_curve.png",
    "predictions.png",
    "confusion_matrix.png",
    "reliability.png",
    "robustness.png",
    "prediction_sets.png",
)
"""The figures a finished run draws (the last for a calibration with prediction sets)."""
HOLDS_RESULTS = ("summary.json", CHECKPOINT_NAME, *FIGURES)
"""What makes a folder hold results: a checkpoint, a summary or a figure (a folder with
only the config and the history of a start that failed does not)."""
EARLIER_OWN = (
    "config.json",
    "history.jsonl",
    CHECKPOINT_NAME,
    "summary.json",
    "calibration.safetensors",
    TEACHER_FILE,
    "sweep.md",
    "sweep.json",
    OUT_OF_FOLD,
    "cv.json",
)
"""A run's own files in a folder written before folders kept a record, which no other
command writes over (where a record is kept, it says which command wrote each file)."""
TENSORBOARD = "tensorboard"
"""The folder of a run's TensorBoard event files (`events.out.tfevents.*`)."""
PROFILE = "profile"
"""The folder of a run's `jax.profiler` trace (`plugins/profile/<time>/<host>.*`)."""


class RunError(Exception):
    """A run folder cannot be used as asked (in use, holding results, a bad option)."""


def holds_run(folder: Path) -> bool:
    """Whether `folder` is a run's: it holds a checkpoint or a summary."""
    return (folder / CHECKPOINT_NAME).is_file() or (folder / "summary.json").is_file()


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
