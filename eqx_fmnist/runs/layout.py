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
import os
import shutil
import typing
from collections.abc import Sequence
from pathlib import Path

from ..calibration import CALIBRATION_FILE
from ..checkpoint import CheckpointError, payload_digest
from ..config import TrainConfig
from ..intervals import History

CHECKPOINT_NAME = "checkpoint.eqx"
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
RUN_FILES = (
    *RECORD,
    "prediction_sets.png",
    *FIGURES,
    *SWEEP_FILES,
    *CV_FILES,
    "suspects_*",
    "model.*",
    "tensorboard",
    "profile",
    "teacher",
)
"""Everything a run (and the commands that read it: `audit`, `export`) writes into its
folder, as names and patterns: what `overwrite` removes before a new run starts, so that
the folder holds only the new run (never anything else the folder holds)."""


class RunError(Exception):
    """A run folder cannot be used as asked (in use, holding results, a bad option)."""


def holds_run(folder: Path) -> bool:
    """Whether `folder` is a run's: it holds a checkpoint or a summary."""
    return (folder / CHECKPOINT_NAME).is_file() or (folder / "summary.json").is_file()


def refuse_overwriting(
    paths: Sequence[Path], *, own: Path | None = None, overwrite: bool = False
) -> None:
    """`RunError`, before anything is written, for outputs that would destroy: a file of
    a run's `RECORD` (its checkpoint, summary, ...), anything in another run's folder
    than `own` (the run a command reads), or, without `overwrite`, a file that exists.
    Every command that writes files asks here first."""
    for path in paths:
        folder = path.parent
        name = path.name
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


def clear_run(folder: Path, keep: Path | None = None) -> list[Path]:
    """Remove the files and folders of `RUN_FILES` from `folder`, all but `keep` (the
    teacher a distilled run trained there first); the paths removed."""
    found = sorted({p for pattern in RUN_FILES for p in folder.glob(pattern)})
    removed = [p for p in found if keep is None or p.resolve() != keep.resolve()]
    for path in removed:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    return removed


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
    whole `step` and numbers for its other fields.
    """
    path = Path(folder) / "history.jsonl"
    if not path.is_file():
        return []
    records: list[History] = []
    for i, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        why = _not_a_record(record)
        if why is not None:
            raise RunError(
                f"{path}, line {i}, {why}: delete the line, or the file to start the "
                "history afresh."
            )
        records.append(typing.cast(History, record))
    return records


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
        return found[0]
    for path in found:
        if path.is_file() and _digest_or_none(path) == digest:
            return path
    raise RunError(
        f"{file} names a teacher ({' or '.join(map(str, found))}) that is not there with "
        "the checksum it had when this run began: put that checkpoint back, or delete "
        f"{TEACHER_FILE} to resume without a teacher."
    )


def _digest_or_none(path: Path) -> str | None:
    try:
        return payload_digest(path)
    except CheckpointError:
        return None
