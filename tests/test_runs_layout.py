"""`runs.layout`: what a run folder holds: a damaged history line named, and the one rule
that no output writes over a run or an existing file (`refuse_overwriting`)."""

import re

import pytest


@pytest.mark.parametrize(
    "line, why",
    [
        ("[1, 2]", "is not a history record"),
        ('"text"', "is not a history record"),
        ('{"loss": 1.0}', "is not a history record"),
        ('{"step": "4"}', "is not a history record"),
        ("{", "is not a history record"),
        ('{"step": 4, "loss": 1.0}', "has no `accuracy`"),
        ('{"step": 4, "loss": 1.0, "accuracy": null}', "has `accuracy` null, not a number"),
        ('{"step": 4, "loss": true, "accuracy": 0.5}', "has `loss` true, not a number"),
        ('{"step": 4, "members": {}}', "has `members` that is not a list of records"),
        ('{"step": 4, "members": [{"step": 4}]}', "has a member that has no `loss`"),
    ],
)
def test_a_damaged_history_line_is_named(tmp_path, line, why):
    from eqx_fmnist.runs import RunError, read_history

    good = '{"step": 2, "loss": 2.3, "accuracy": 0.1, "some_new_field": "kept"}'
    (tmp_path / "history.jsonl").write_text(good + "\n" + line + "\n")
    with pytest.raises(RunError, match=rf"history.jsonl, line 2, {re.escape(why)}"):
        read_history(tmp_path)
    (tmp_path / "history.jsonl").write_text(good + "\n")
    assert read_history(tmp_path)[0]["some_new_field"] == "kept"


@pytest.mark.parametrize(
    "target", ["checkpoint.eqx", "summary.json", "another run", "exists", "a folder"]
)
def test_no_output_writes_over_a_run_or_an_existing_file(target, tmp_path):
    """The one rule every command that writes a file asks first: never a run's own
    record, never into another run's folder, never over a file without `overwrite`."""
    from eqx_fmnist.runs import RunError, refuse_overwriting

    run, other = tmp_path / "run", tmp_path / "other"
    for folder in (run, other):
        folder.mkdir()
        (folder / "checkpoint.eqx").write_bytes(b"x")
    (tmp_path / "taken.png").write_bytes(b"x")
    path = {
        "checkpoint.eqx": run / "checkpoint.eqx",
        "summary.json": run / "summary.json",
        "another run": other / "model.onnx",
        "exists": tmp_path / "taken.png",
        "a folder": other,
    }[target]
    named = path.parent if target == "another run" else path
    with pytest.raises(RunError, match=re.escape(str(named))):
        refuse_overwriting([path], own=run)
    refuse_overwriting([run / "model.onnx", tmp_path / "new.png"], own=run)  # allowed
    refuse_overwriting([tmp_path / "taken.png"], own=run, overwrite=True)


@pytest.mark.parametrize("kind", ["link", "fifo"])
def test_no_output_replaces_a_link_or_a_device_even_with_overwrite(tmp_path, kind):
    """An output path that is a link or a FIFO (a device alike) is refused whatever
    `overwrite` says, and stays as it was: a command only replaces plain files."""
    import os

    from eqx_fmnist.runs import RunError, refuse_overwriting

    path = tmp_path / "model.onnx"
    if kind == "link":
        (tmp_path / "mine.txt").write_text("mine")
        path.symlink_to(tmp_path / "mine.txt")
    else:
        os.mkfifo(path)
    for overwrite in (False, True):
        with pytest.raises(RunError, match="a link" if kind == "link" else "not a plain file"):
            refuse_overwriting([path], overwrite=overwrite)
    assert path.is_symlink() if kind == "link" else path.exists()
