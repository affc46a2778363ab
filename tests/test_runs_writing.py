"""`runs.writing`: `RunFolder`, a run's write side: one history line per logging interval,
checkpoints on a cadence of their own, requested stops saved and resumed exactly, the
lock, folders in use or holding results refused, TensorBoard's scalars, exactly what a
run wrote removed on `overwrite`, and `refuse_results`."""

import json

import pytest

from helpers import fashion_mnist_of, recorded, run_config as config


def saves(monkeypatch):
    import eqx_fmnist.runs.writing as runs

    saved, real = [], runs.save_checkpoint

    def spy(path, state, config, **kwargs):
        saved.append(int(state.step))
        return real(path, state, config, **kwargs)

    monkeypatch.setattr(runs, "save_checkpoint", spy)
    return saved


@pytest.mark.slow  # cold: compiles several programs or trains on the real data
def test_logging_every_two_steps_checkpoints_on_its_own_cadence(small, tmp_path, monkeypatch):
    from eqx_fmnist.checkpoint import load_checkpoint
    from eqx_fmnist.dataset import Splits
    from eqx_fmnist.runs import CheckpointEvery, RunFolder, read_history
    from eqx_fmnist.train import fit

    saved = saves(monkeypatch)
    c = config()
    with RunFolder(
        tmp_path / "a", c, num_train=256, checkpoint_every=CheckpointEvery(steps=10)
    ) as run:
        fit(c, Splits(small, small), callback=run.callback)
    assert [h["step"] for h in read_history(tmp_path / "a")] == list(range(2, 25, 2))
    assert saved == [10, 20]  # the first interval ends at or past each 10 steps
    with RunFolder(tmp_path / "b", c, num_train=256) as run:  # every 60 s: none due
        result = fit(c, Splits(small, small), callback=run.callback)
        run.finish(result, fashion_mnist_of(small), _report(result, small))
    assert saved[2:] == [24]  # only the end
    assert load_checkpoint(tmp_path / "b" / "checkpoint.eqx").step == 24
    assert json.loads((tmp_path / "b" / "summary.json").read_text())["steps"] == 24


def _report(result, test):
    """The test report `RunFolder.finish` writes, of `result` on the dataset `test`."""
    from eqx_fmnist.runs import run_report

    return run_report(result.model, result.policy, test.images, test.labels)


def test_a_requested_stop_saves_and_the_resume_is_exact(small, tmp_path):
    from eqx_fmnist.checkpoint import load_checkpoint
    from eqx_fmnist.dataset import Splits
    from eqx_fmnist.runs import Interrupted, RunFolder, read_history
    from eqx_fmnist.train import fit

    from helpers import tree_allclose

    c = config()
    straight = fit(c, Splits(small, small))
    folder = tmp_path / "cut"

    def stop_after_step_8(record, state):
        if record["step"] == 8:
            run.request_stop("asked by the test")

    with RunFolder(folder, c, num_train=256) as run:
        with pytest.raises(Interrupted, match="asked by the test") as info:
            fit(c, Splits(small, small), callback=[stop_after_step_8, run.callback])
    assert info.value.step == 8 and not (folder / ".eqx-fmnist.lock").exists()
    ckpt = load_checkpoint(folder / "checkpoint.eqx")
    assert ckpt.step == 8
    with RunFolder(folder, c, num_train=256, start_step=ckpt.step) as run:
        resumed = fit(c, Splits(small, small), state=ckpt.state, callback=run.callback)
    assert tree_allclose(resumed.model, straight.model, rtol=0, atol=0)
    assert [h["step"] for h in read_history(folder)] == list(range(2, 25, 2))


def test_a_folder_in_use_or_with_results_is_refused(small, tmp_path):
    from eqx_fmnist.runs import RunError, RunFolder

    c = config()
    (tmp_path / "done").mkdir()
    (tmp_path / "done" / "summary.json").write_text("{}")
    with pytest.raises(RunError, match="already holds results"):
        RunFolder(tmp_path / "done", c, num_train=256)
    with RunFolder(tmp_path / "busy", c, num_train=256):
        with pytest.raises(RunError, match="another run"):
            with RunFolder(tmp_path / "busy", c, num_train=256, overwrite=True):
                pass


def test_a_start_that_failed_leaves_a_folder_the_corrected_command_reuses(tmp_path):
    """A folder with only the config and an empty history holds no results; a start
    that would fail is refused before anything is written."""
    from eqx_fmnist.runs import RunError, RunFolder

    c = config()
    half = recorded(tmp_path / "half", {"config.json": "{}", "history.jsonl": ""})
    with RunFolder(half, c, num_train=256):
        pass
    assert (half / "config.json").read_text().startswith("{\n")  # the corrected run's
    for bad, match in (
        (config(devices=64, batch_size=64), "asked for 64 devices"),
        (config(hidden_sizes=(2**16, 2**16)), "the model needs about"),
    ):
        with pytest.raises(RunError, match=match):
            RunFolder(tmp_path / "never", bad, num_train=256)
        assert not (tmp_path / "never").exists()


def test_a_finished_run_is_not_resumed_and_a_resume_overwrites_no_other_run(tmp_path):
    """A resume of a run whose summary is written is refused (`overwrite` finishes it
    again); a resume written to another folder refuses that folder's results, and
    with `overwrite` carries over the resumed run's history, not the folder's."""
    import json

    from eqx_fmnist.runs import RunError, RunFolder, read_history

    c = config()  # 24 steps
    done, other = tmp_path / "done", tmp_path / "other"
    for folder, steps in ((done, (8, 16, 24)), (other, (2, 4))):
        lines = "".join(json.dumps({"step": s, "loss": 1.0, "accuracy": 0.5}) + "\n" for s in steps)
        recorded(folder, {"summary.json": "{}", "history.jsonl": lines})
    with pytest.raises(RunError, match="has finished .step 24 of 24."):
        RunFolder(done, c, num_train=256, start_step=24)
    with RunFolder(done, c, num_train=256, start_step=24, overwrite=True):
        pass
    with RunFolder(done, c, num_train=256, start_step=16):  # a stop before the end
        pass
    with pytest.raises(RunError, match="already holds results"):
        RunFolder(other, c, num_train=256, start_step=16, resume_from=done)
    with RunFolder(other, c, num_train=256, start_step=16, resume_from=done, overwrite=True):
        pass
    assert [h["step"] for h in read_history(other)] == [8, 16]


def test_tensorboard_scalars_and_hyperparameters(small, tmp_path):
    pytest.importorskip("tensorboardX", reason="the tensorboard extra is not installed")
    from eqx_fmnist.dataset import Splits
    from eqx_fmnist.runs import RunFolder
    from eqx_fmnist.train import fit

    c = config(steps=4)
    with RunFolder(tmp_path / "tb", c, num_train=256, tensorboard=True) as run:
        result = fit(c, Splits(small, small), callback=run.callback)
        run.finish(result, fashion_mnist_of(small), _report(result, small))
    events = list((tmp_path / "tb" / "tensorboard").rglob("events.out.tfevents.*"))
    assert events and sum(p.stat().st_size for p in events) > 0
    blob = b"".join(p.read_bytes() for p in events)
    assert b"train/loss" in blob and b"hparam/test_accuracy" in blob and b"learning_rate" in blob


@pytest.mark.slow  # cold: compiles several programs or trains on the real data
def test_tensorboard_shows_each_member_of_an_ensemble(small, tmp_path):
    pytest.importorskip("tensorboardX", reason="the tensorboard extra is not installed")
    from eqx_fmnist.dataset import Splits
    from eqx_fmnist.ensemble import Seeds
    from eqx_fmnist.runs import RunFolder
    from eqx_fmnist.train import fit

    c, seeds = config(steps=4), Seeds((0, 1))
    with RunFolder(tmp_path, c, num_train=256, tensorboard=True, members=seeds) as run:
        fit(c, Splits(small, small), members=seeds, callback=run.callback)
    blob = b"".join(p.read_bytes() for p in (tmp_path / "tensorboard").rglob("events.*"))
    assert b"train/loss" in blob and b"members/0/loss" in blob and b"members/1/accuracy" in blob


@pytest.mark.parametrize("change", ["bytes", "folder", "fifo"])
def test_overwrite_refuses_a_recorded_file_that_changed_and_removes_nothing(tmp_path, change):
    """A listed name whose bytes changed since (a reviewed CSV), or that is now a folder
    or a FIFO: `--overwrite` refuses in one line, nothing removed."""
    import os

    from eqx_fmnist.runs import RunError, RunFolder

    run = recorded(tmp_path / "run", {"summary.json": "{}", "checkpoint.eqx": "k"})
    recorded(run, {"suspects_train.csv": "index,given\n"}, by="audit")
    target = run / "suspects_train.csv"
    target.unlink()
    if change == "bytes":
        target.write_text("index,given\n7,3  # checked by hand\n")
    elif change == "folder":
        target.mkdir()
    else:
        os.mkfifo(target)
    with pytest.raises(RunError, match="suspects_train.csv (was changed|is a link, a folder)"):
        RunFolder(run, config(), num_train=256, overwrite=True)
    assert (run / "checkpoint.eqx").read_text() == "k" and (run / "summary.json").exists()


def test_a_users_files_are_never_a_runs(tmp_path):
    """A folder with the user's own `config.json` and `history.jsonl`: a new run is
    refused without `--overwrite` and with it (it would replace them), the files kept;
    a folder with other files of theirs is refused without `--overwrite` and, with it,
    trained beside them. A run folder of an earlier version (no record): `--overwrite`
    refuses it in one line saying what to do."""
    from eqx_fmnist.runs import RunError, RunFolder

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "config.json").write_text('{"mine": 1}')
    (mine / "history.jsonl").write_text("my notes\n")
    for overwrite in (False, True):
        with pytest.raises(RunError, match="config.json is not a file a run wrote"):
            RunFolder(mine, config(), num_train=256, overwrite=overwrite)
    assert (mine / "config.json").read_text() == '{"mine": 1}'
    beside = tmp_path / "beside"
    beside.mkdir()
    (beside / "notes.txt").write_text("mine")
    with pytest.raises(RunError, match=r"holds files no run wrote there \(notes.txt\)"):
        RunFolder(beside, config(), num_train=256)
    with RunFolder(beside, config(), num_train=256, overwrite=True):
        pass
    assert (beside / "notes.txt").read_text() == "mine" and (beside / "config.json").is_file()
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    for name in ("config.json", "checkpoint.eqx", "summary.json"):
        (earlier / name).write_text(name)
    with pytest.raises(RunError, match="of a run of an earlier version.*move it away") as caught:
        RunFolder(earlier, config(), num_train=256, overwrite=True)
    assert "\n" not in str(caught.value)
    assert sorted(p.name for p in earlier.iterdir()) == [
        "checkpoint.eqx",
        "config.json",
        "summary.json",
    ]


@pytest.mark.parametrize("linked", ["teacher", "tensorboard", "checkpoint.eqx"])
def test_overwrite_never_follows_a_link_and_removes_nothing(tmp_path, linked):
    """A `teacher/` or `tensorboard/` that links to another run's (or a shared log)
    folder, or a run file that is a link: `--overwrite` refuses in one line before any
    file goes, and the folder linked to keeps every byte."""
    import shutil

    from eqx_fmnist.runs import RunError, RunFolder

    other = tmp_path / "other"
    other.mkdir()
    for name in ("checkpoint.eqx", "summary.json", "events.out.tfevents.1.host"):
        (other / name).write_text(name)
    run = recorded(tmp_path / "run", {"summary.json": "{}", "config.json": "{}"})
    recorded(run, {"checkpoint.eqx": "k", "teacher/README": "t", "tensorboard/events.1": "e"})
    target = other / "checkpoint.eqx" if linked == "checkpoint.eqx" else other
    shutil.rmtree(run / linked) if (run / linked).is_dir() else (run / linked).unlink()
    (run / linked).symlink_to(target)
    with pytest.raises(RunError, match="link") as caught:
        RunFolder(run, config(), num_train=256, overwrite=True)
    assert "\n" not in str(caught.value)
    assert sorted(p.name for p in other.iterdir()) == [
        "checkpoint.eqx",
        "events.out.tfevents.1.host",
        "summary.json",
    ]
    assert all((other / p).read_text() == p for p in ("checkpoint.eqx", "summary.json"))
    assert (run / "summary.json").read_text() == "{}"  # nothing of the run touched either


def test_a_run_never_writes_into_the_teachers_folder(tmp_path):
    """`--teacher R --out R` (or a folder inside R) is refused before anything is
    written; a distilled run's own `teacher/` is its to write."""
    from eqx_fmnist.runs import RunError, RunFolder

    teacher = tmp_path / "teacher_run"
    teacher.mkdir()
    (teacher / "checkpoint.eqx").write_text("a teacher")
    for out in (teacher, teacher / "inside"):
        with pytest.raises(RunError, match="never writes where it reads"):
            RunFolder(
                out, config(), num_train=256, overwrite=True, teacher=teacher / "checkpoint.eqx"
            )
    assert sorted(p.name for p in teacher.iterdir()) == ["checkpoint.eqx"]
    own = tmp_path / "student" / "teacher"
    own.mkdir(parents=True)
    (own / "checkpoint.eqx").write_text("its own teacher")
    RunFolder(tmp_path / "student", config(), num_train=256, teacher=own / "checkpoint.eqx")


def test_a_folder_moved_while_the_run_writes_stops_it_and_is_not_made_again(small, tmp_path):
    """The run's folder renamed (or deleted) while it trains: the next interval stops
    the run with one line, and nothing appears at the old path again (a checkpoint's
    write made the folder anew, with part of a run in it)."""
    from eqx_fmnist.runs import RunError, RunFolder
    from eqx_fmnist.state import init_state

    c = config()
    run = tmp_path / "run"
    record = {"step": 2, "loss": 1.0, "accuracy": 0.5}
    with RunFolder(run, c, num_train=256) as folder:
        run.rename(tmp_path / "moved")
        with pytest.raises(RunError, match="was moved or deleted") as caught:
            folder.callback(record, init_state(c, 256))
        with pytest.raises(RunError, match="was moved or deleted"):
            folder.save(init_state(c, 256), 2)
    assert "\n" not in str(caught.value)
    assert not run.exists()
    assert (tmp_path / "moved" / "config.json").is_file()


def test_two_runs_started_in_the_same_second_get_two_folders(tmp_path, monkeypatch):
    import datetime

    from eqx_fmnist.runs import default_folder, writing

    class Frozen(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return cls(2026, 12, 7, 13, 0, 0)

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(writing.datetime, "datetime", Frozen)
    first = default_folder()
    first.mkdir(parents=True)
    second = default_folder()
    assert (first.as_posix(), second.as_posix()) == (
        "runs/20261207-130000",
        "runs/20261207-130000-2",
    )
