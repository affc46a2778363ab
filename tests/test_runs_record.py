"""`runs.record`: a run folder's record of the files its commands wrote (name, size,
SHA-256, command), what `--overwrite` removes by it, and a property test: whatever a
folder held that a run did not write is left byte for byte by `train --overwrite` and
`export --overwrite`."""

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings, strategies as st

from helpers import recorded, run_config as config


def test_a_finished_runs_record_lists_every_file_it_wrote_with_its_bytes(small_cv_run, tmp_path):
    """The record of a finished cv run lists every file in the folder (but the record
    and the lock), each with the size and SHA-256 that hashlib gives its bytes and the
    command that wrote it."""
    record = json.loads((small_cv_run / ".eqx-fmnist.record").read_text())
    assert record["format"] == 1
    files = {
        p.relative_to(small_cv_run).as_posix(): p.read_bytes()
        for p in small_cv_run.rglob("*")
        if p.is_file() and not p.name.startswith(".eqx-fmnist.")
    }
    assert set(record["files"]) == set(files)
    assert {"out_of_fold.npz", "cv.json", "folds.png", "checkpoint.eqx"} <= set(files)
    for name, blob in files.items():
        entry = record["files"][name]
        assert entry == {"by": "cv", "size": len(blob), "sha256": hashlib.sha256(blob).hexdigest()}


def test_a_damaged_record_is_named_and_nothing_is_removed(tmp_path):
    from eqx_fmnist.runs import RunError, RunFolder

    run = recorded(tmp_path / "run", {"summary.json": "{}", "checkpoint.eqx": "k"})
    (run / ".eqx-fmnist.record").write_text('{"format": 1, "files": []}')
    with pytest.raises(RunError, match=r"\.eqx-fmnist\.record is not a record") as caught:
        RunFolder(run, config(), num_train=256, overwrite=True)
    assert "\n" not in str(caught.value) and (run / "checkpoint.eqx").read_text() == "k"


def test_names_claimed_by_a_killed_command_are_its_own(tmp_path):
    """A command killed between claiming a name and sealing it leaves the name claimed
    (size and checksum `null`): `--overwrite` removes that file, whatever its bytes; a
    name claimed but never written leaves the record when the next command seals."""
    from eqx_fmnist.runs import Record, RunFolder

    run = tmp_path / "run"
    record = Record.read(run.parent / "run")
    run.mkdir()
    record.claim(["checkpoint.eqx", "summary.json"], "train")
    (run / "checkpoint.eqx").write_text("half a checkpoint")
    with RunFolder(run, config(), num_train=256, overwrite=True):
        pass
    assert not (run / "checkpoint.eqx").exists()
    saved = json.loads((run / ".eqx-fmnist.record").read_text())["files"]
    assert set(saved) == {"config.json", "history.jsonl"}  # the rest were never written


"""+open('/tmp/moved.py').read()+"""
OUTSIDE_NAMES = ["config.json", "history.jsonl", "checkpoint.eqx", "summary.json"]
RUN_NAMES = [*OUTSIDE_NAMES, "examples.png", "model.stablehlo", "teacher", "tensorboard"]


def _snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under `root`, links not followed: a file's bytes, a link's target."""
    seen = {}
    for p in root.rglob("*"):
        key = p.relative_to(root).as_posix()
        if p.is_symlink():
            seen[key] = ("link", os.readlink(p))
        elif p.is_file():
            seen[key] = ("file", p.read_bytes())
        elif p.is_dir():
            seen[key] = ("dir",)
        else:
            seen[key] = ("other",)
    return seen


entries = st.dictionaries(
    st.sampled_from(RUN_NAMES) | st.from_regex(r"[a-z]{1,6}(\.json|\.png|)", fullmatch=True),
    st.sampled_from(["file", "link-file", "link-folder", "folder", "fifo"]),
    max_size=5,
)


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(found=entries, over_a_run=st.booleans(), command=st.sampled_from(["train", "export"]))
def test_overwrite_leaves_every_file_a_run_did_not_write_byte_for_byte(
    small_cv_run, tmp_path_factory, found, over_a_run, command
):
    """For random sets of files, links, folders and FIFOs (run files' names among them)
    in a folder, over a run or in a folder of the user's: `train --overwrite` (a
    `RunFolder`) and `export --overwrite` (`Run.writing`, as `Run.export` writes) either
    refuse in one line or write; either way every entry the run did not write, and
    whatever the links point to, is as it was."""
    from eqx_fmnist.fileio import atomic_writes
    from eqx_fmnist.runs import Run, RunError, RunFolder

    base = tmp_path_factory.mktemp("property")
    outside = base / "outside"
    (outside / "folder").mkdir(parents=True)
    (outside / "file").write_bytes(b"outside")
    (outside / "folder" / "checkpoint.eqx").write_bytes(b"another run's")
    out = base / "out"
    if over_a_run or command == "export":
        shutil.copytree(small_cv_run, out)
    out.mkdir(exist_ok=True)
    theirs = []
    for name, kind in found.items():
        path = out / name
        if path.exists() or path.is_symlink():
            continue  # the run's file stays the run's
        if kind == "file":
            path.write_bytes(os.urandom(16))
        elif kind == "link-file":
            path.symlink_to(outside / "file")
        elif kind == "link-folder":
            path.symlink_to(outside / "folder")
        elif kind == "folder":
            path.mkdir()
            (path / "note").write_text("mine")
        else:
            os.mkfifo(path)
        theirs.append(name)
    before, around = _snapshot(out), _snapshot(outside)
    try:
        if command == "train":
            with RunFolder(out, config(), num_train=256, overwrite=True) as run:
                run.write_summary({"done": True})
        else:
            paths = [out / "model.stablehlo", out / "model.stablehlo.manifest.json"]
            with Run.open(out).writing(paths, by="export", overwrite=True):
                atomic_writes({p: b"artifact" for p in paths})
        event("wrote")  # --hypothesis-show-statistics: how often each way
    except RunError as e:
        event("refused")
        assert "\n" not in str(e)
        assert _snapshot(out) == before  # refused: nothing touched
    after = _snapshot(out)
    for key, value in before.items():
        if key.split("/")[0] in theirs:
            assert after.get(key) == value, key
    assert _snapshot(outside) == around


def test_a_folder_the_user_made_is_never_recorded_as_the_runs(tmp_path):
    """An empty `tensorboard/` (or `profile/`) of the user's, in a folder a run starts in:
    the record does not list it as a folder the run made, so `--overwrite` keeps it."""
    from eqx_fmnist.runs import Record, RunFolder

    run = tmp_path / "run"
    (run / "tensorboard").mkdir(parents=True)
    with RunFolder(run, config(), num_train=256, overwrite=True):
        pass
    assert "tensorboard" not in Record.read(run).folders
    with RunFolder(run, config(), num_train=256, overwrite=True):
        pass
    assert (run / "tensorboard").is_dir()
