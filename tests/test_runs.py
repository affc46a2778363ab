"""Run folders: history every interval, checkpoints on their own cadence, stops."""

import json
import re
import threading
from pathlib import Path

import numpy as np
import pytest


def config(**kw):
    from eqx_fmnist.config import TrainConfig

    base = dict(steps=24, batch_size=32, hidden_sizes=(16,), log_every=2, schedule="constant")
    return TrainConfig(**(base | kw))


@pytest.mark.parametrize(
    "text, seconds, steps",
    [("60s", 60.0, None), ("60", 60.0, None), ("5m", 300.0, None), ("500steps", None, 500)],
)
def test_checkpoint_cadence_parses(text, seconds, steps):
    from eqx_fmnist.runs import CheckpointEvery

    every = CheckpointEvery.parse(text)
    assert (every.seconds, every.steps) == (seconds, steps)


@pytest.mark.parametrize("text", ["", "0s", "-5", "fast", "2.5steps"])
def test_bad_checkpoint_cadence_is_a_run_error(text):
    from eqx_fmnist.runs import CheckpointEvery, RunError

    with pytest.raises(RunError, match="checkpoint_every"):
        CheckpointEvery.parse(text)


def saves(monkeypatch):
    import eqx_fmnist.runs.writing as runs

    saved, real = [], runs.save_checkpoint

    def spy(path, state, config, **kwargs):
        saved.append(int(state.step))
        return real(path, state, config, **kwargs)

    monkeypatch.setattr(runs, "save_checkpoint", spy)
    return saved


@pytest.mark.parametrize(
    "stop, saved, status, said",
    [
        ("asked", 40, 130, "stop asked; continue with `eqx-fmnist cv --resume=R/checkpoint.eqx`."),
        ("asked", 0, 130, "interrupted before the first checkpoint."),
        ("nan", 40, 1, "error: bad. No result was written; the last checkpoint (step 40) is R/"),
        ("nan", 0, 1, "error: bad. No result was written; no checkpoint was written."),
    ],
)
def test_why_a_run_stopped_is_one_line_and_a_status(stop, saved, status, said):
    from eqx_fmnist.intervals import NonFiniteError
    from eqx_fmnist.runs import Interrupted
    from eqx_fmnist.runs.cadence import why_stopped

    checkpoint = Path("R/checkpoint.eqx")
    e = Interrupted("stop asked", step=saved, checkpoint=checkpoint)
    if stop == "nan":
        e = NonFiniteError("bad.", step=3, metric="loss")
    got = why_stopped(e, "cv", saved, checkpoint)
    assert got[0] == status and got[1].startswith(said) and "\n" not in got[1]


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
        run.finish(result, _numpy(small), _report(result, small))
    assert saved[2:] == [24]  # only the end
    assert load_checkpoint(tmp_path / "b" / "checkpoint.eqx").step == 24
    assert json.loads((tmp_path / "b" / "summary.json").read_text())["steps"] == 24


def _report(result, test):
    """The test report `RunFolder.finish` writes, of `result` on the dataset `test`."""
    from eqx_fmnist.runs import run_report

    return run_report(result.model, result.policy, test.images, test.labels)


def _numpy(ds):
    from eqx_fmnist.data import FashionMNIST

    images = np.asarray(ds.images).reshape(-1, 28, 28)
    labels = np.asarray(ds.labels).astype(np.uint8)
    return FashionMNIST(images, labels, images, labels, source=Path("synthetic"))


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
    half = tmp_path / "half"
    half.mkdir()
    (half / "config.json").write_text("{}")
    (half / "history.jsonl").write_text("")
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
        folder.mkdir()
        (folder / "summary.json").write_text("{}")
        lines = "".join(json.dumps({"step": s, "loss": 1.0, "accuracy": 0.5}) + "\n" for s in steps)
        (folder / "history.jsonl").write_text(lines)
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


def test_tensorboard_scalars_and_hyperparameters(small, tmp_path):
    pytest.importorskip("tensorboardX", reason="the tensorboard extra is not installed")
    from eqx_fmnist.dataset import Splits
    from eqx_fmnist.runs import RunFolder
    from eqx_fmnist.train import fit

    c = config(steps=4)
    with RunFolder(tmp_path / "tb", c, num_train=256, tensorboard=True) as run:
        result = fit(c, Splits(small, small), callback=run.callback)
        run.finish(result, _numpy(small), _report(result, small))
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


@pytest.mark.parametrize("damage", ["not a zip", "truncated", "no labels", "wrong shape"])
def test_damaged_out_of_fold_probabilities_are_named(tmp_path, damage):
    import io

    import numpy as np

    from eqx_fmnist.runs import OUT_OF_FOLD, RunError, read_out_of_fold

    good = {"probabilities": np.full((4, 10), 0.1, np.float32), "labels": np.arange(4)}
    good["fold"] = np.zeros(4, np.int16)
    if damage == "no labels":
        del good["labels"]
    if damage == "wrong shape":
        good["probabilities"] = np.zeros((4, 3), np.float32)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **good)
    blob = {"not a zip": b"hello", "truncated": buffer.getvalue()[:60]}.get(damage)
    (tmp_path / OUT_OF_FOLD).write_bytes(blob if blob is not None else buffer.getvalue())
    with pytest.raises(RunError, match=OUT_OF_FOLD):
        read_out_of_fold(tmp_path)


def test_a_new_run_is_refused_before_a_file_is_written_and_a_sweep_holds_out_its_ranking(
    real_data, tmp_path
):
    """`Training.new` checks what would refuse the run first: cross-validation with a
    validation split, a teacher that is not a run; a sweep without a validation split
    ranks on the 10,000 held-out images `eqx-fmnist sweep` holds out."""
    import eqx_fmnist as ef
    from eqx_fmnist.runs import RunError, Training

    out = tmp_path / "r"
    with pytest.raises(RunError, match="own fold"):
        Training.new(
            out, config(validation_size=1000), members=ef.ensemble.Folds(3), data=real_data
        )
    with pytest.raises(RunError, match=f"the teacher {tmp_path / 'nope'}: no checkpoint"):
        Training.new(out, config(), teacher=tmp_path / "nope", data=real_data)
    assert not out.exists()
    grid = ef.ensemble.Grid({"learning_rate": [1e-3, 3e-3]}, seeds=1)
    swept = Training.new(out, config(), members=grid, data=real_data)
    assert swept.kind == "sweep" and swept.config.validation_size == 10_000
    assert swept.splits.validation is not None and len(swept.splits.validation) == 10_000
    assert Training.new(out, config(), data=real_data).kind == "train" and not out.exists()


@pytest.mark.slow  # trains a CNN teacher and its student twice
def test_a_distilled_run_interrupted_and_resumed_in_the_library_is_the_command_lines(
    real_data, tmp_path, monkeypatch
):
    """What a notebook writes for `eqx-fmnist train --distilled` (a teacher first, then
    the student), stopped after its first interval and resumed from its checkpoint,
    gives the checkpoint the command gives, bit for bit."""
    import eqx_fmnist as ef
    import eqx_fmnist.config
    from eqx_fmnist.checkpoint import load_checkpoint
    from eqx_fmnist.runs import TEACHER_FOLDER, Interrupted, Training, teacher_training

    from helpers import run_cli_here, same_arrays, use_a_slice

    data = use_a_slice(real_data, monkeypatch, 2048, 500)
    monkeypatch.setattr(eqx_fmnist.config, "TEACHER_EPOCHS", 1)
    args = ["--distilled", "--epochs", "1", "--hidden", "32", "--log-every", "1"]
    command = run_cli_here("train", *args, "--out", tmp_path / "cli")
    assert command.returncode == 0, command.stderr

    out = tmp_path / "notebook"
    student = ef.TrainConfig.distilled(epochs=1, hidden_sizes=(32,), log_every=1)
    teacher = teacher_training(out, student, data=data)
    assert teacher is not None and teacher.config.model == "cnn"
    teacher.run()
    training = Training.new(out, student, teacher=out / TEACHER_FOLDER, data=data)

    def stop_after_the_first_interval(record, state):
        training.folder.request_stop("stopped by the notebook")

    with pytest.raises(Interrupted) as stopped:
        training.run([stop_after_the_first_interval])
    first = stopped.value.step
    assert 0 < first < training.total_steps and not (out / "summary.json").exists()
    resumed = Training.resume(out, data=data)
    assert resumed.start == first and resumed.teacher == (out / TEACHER_FOLDER / "checkpoint.eqx")
    done = resumed.run()
    assert done.summary["test_accuracy"] == done.outcome.result.test.accuracy
    for name in ("checkpoint.eqx", f"{TEACHER_FOLDER}/checkpoint.eqx"):
        mine, theirs = load_checkpoint(out / name), load_checkpoint(tmp_path / "cli" / name)
        assert mine.config == theirs.config and mine.step == theirs.step
        assert same_arrays(mine.state, theirs.state), name


@pytest.mark.slow  # trains a run and writes its report
def test_a_resumed_distillation_finds_its_teacher_in_the_run_folder(real_data, tmp_path):
    """A run trained and finished with `Training.new(...).run()`; `Training.resume` takes the
    teacher `teacher.json` names (none without the file) and names the file when it is
    damaged."""
    import json
    import shutil

    from eqx_fmnist.runs import TEACHER_FILE, RunError, Training

    teacher_run = tmp_path / "teacher"
    done = Training.new(teacher_run, config(), data=real_data).run()
    assert done.summary["test_count"] == 10_000 and (teacher_run / "summary.json").is_file()
    folder = tmp_path / "student"
    folder.mkdir()
    shutil.copy(teacher_run / "checkpoint.eqx", folder / "checkpoint.eqx")
    with pytest.raises(RunError, match="of a train run, not of a sweep run"):
        Training.resume(folder, kind="sweep", data=real_data)  # `eqx-fmnist sweep --resume`
    alone = Training.resume(folder, kind="train", data=real_data)
    assert alone.teacher is None and alone.teacher_model is None  # not distilled
    (folder / TEACHER_FILE).write_text(json.dumps({"teacher": str(teacher_run)}))
    taught = Training.resume(folder, data=real_data)
    assert taught.teacher == teacher_run / "checkpoint.eqx"
    assert taught.teacher_model is not None and taught.teacher_model.hidden_sizes == (16,)
    (folder / TEACHER_FILE).write_text("[]")  # damaged: one line naming the file
    with pytest.raises(RunError, match=f"{TEACHER_FILE} does not name a teacher"):
        Training.resume(folder, data=real_data)


# ------------------------------------------------- a run folder holds only its own run


def sliced(real_data, n_train: int = 2048, n_test: int = 500):
    import dataclasses

    return dataclasses.replace(
        real_data,
        train_images=real_data.train_images[:n_train],
        train_labels=real_data.train_labels[:n_train],
        test_images=real_data.test_images[:n_test],
        test_labels=real_data.test_labels[:n_test],
    )


@pytest.mark.slow  # trains three small runs and writes their reports
def test_overwrite_starts_the_folder_afresh_and_a_stale_calibration_is_refused(real_data, tmp_path):
    """`--overwrite` over a calibrated run removes its calibration, figures and
    everything else it wrote (never a file of the user's), so the new run's `predict`
    and `export` cannot serve the old temperature, sets and flag; a calibration left
    beside a checkpoint it was not fitted for (copied in) is refused, not used."""
    import shutil

    from eqx_fmnist.runs import Run, RunError, Training

    data = sliced(real_data)
    out = tmp_path / "r"
    Training.new(out, config(calibration_size=500), data=data).run()
    assert Run.open(out).calibration is not None and (out / "prediction_sets.png").is_file()
    (out / "notes.txt").write_text("mine")
    (out / "tensorboard").mkdir()
    Training.new(out, config(hidden_sizes=(8,)), data=data, overwrite=True).run()
    assert not (out / "calibration.safetensors").exists()
    assert not (out / "prediction_sets.png").exists() and not (out / "tensorboard").exists()
    assert (out / "notes.txt").read_text() == "mine"  # not the run's: kept
    fresh = Run.open(out)
    assert fresh.calibration is None and fresh.config.hidden_sizes == (8,)
    other = tmp_path / "calibrated"
    Training.new(other, config(calibration_size=500), data=data).run()
    shutil.copy(other / "calibration.safetensors", out / "calibration.safetensors")
    with pytest.raises(RunError, match="fitted for another checkpoint"):
        Run.open(out)


@pytest.mark.slow  # trains a run, then edits its folder
def test_a_resume_refuses_an_edited_config_and_a_finished_resume_keeps_its_throughput(
    real_data, tmp_path
):
    """An edit of `config.json` would be undone by a resume (which continues the
    checkpoint's config): refused, naming the field. A finished run whose summary was
    lost, resumed, reports the throughput its history recorded, not 0."""
    import json

    from eqx_fmnist.runs import RunError, Training

    data = sliced(real_data)
    out = tmp_path / "r"
    first = Training.new(out, config(), data=data).run()
    rate = first.summary["examples_per_sec"]
    (out / "summary.json").unlink()
    again = Training.resume(out, data=data).run()
    assert again.summary["examples_per_sec"] == pytest.approx(rate, rel=1e-6)
    (out / "summary.json").unlink()
    edited = json.loads((out / "config.json").read_text()) | {"learning_rate": 0.5}
    (out / "config.json").write_text(json.dumps(edited))
    with pytest.raises(RunError, match=r"was edited: learning_rate 0\.5 \(checkpoint: 0\.003\)"):
        Training.resume(out, data=data)


@pytest.mark.slow  # trains a teacher and a student
def test_a_distilled_run_moved_or_copied_finds_its_own_teacher_and_a_replaced_one_is_refused(
    real_data, tmp_path
):
    """`teacher.json` names the teacher relative to the run (a copy of the run with its
    teacher inside resumes with its own copy) and records its checksum (a teacher
    replaced by another run is refused)."""
    import shutil

    from eqx_fmnist.runs import TEACHER_FOLDER, Interrupted, RunError, Training

    data = sliced(real_data)
    out = tmp_path / "student"
    Training.new(out / TEACHER_FOLDER, config(), data=data).run()
    student = Training.new(out, config(steps=8), teacher=out / TEACHER_FOLDER, data=data)

    def stop(record, state):
        student.folder.request_stop("stopped")

    with pytest.raises(Interrupted):
        student.run([stop])
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    shutil.rmtree(out)  # the original gone: the copy resumes with its own teacher
    resumed = Training.resume(copy, data=data)
    assert resumed.teacher == copy / TEACHER_FOLDER / "checkpoint.eqx"
    Training.new(copy / TEACHER_FOLDER, config(seed=7), data=data, overwrite=True).run()
    with pytest.raises(RunError, match="not there with the checksum it had"):
        Training.resume(copy, data=data)


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


def test_the_hint_to_continue_is_quoted_for_a_shell():
    """A folder `my run [1]` or `-dash`: the command printed runs as printed."""
    import shlex

    from eqx_fmnist.runs import Interrupted
    from eqx_fmnist.runs.cadence import why_stopped

    for folder in ("my run [1]", "-dash"):
        checkpoint = Path(folder) / "checkpoint.eqx"
        stop = Interrupted("stop asked", step=8, checkpoint=checkpoint)
        status, line = why_stopped(stop, "train", 8, checkpoint)
        command = line.split("`")[1]
        assert status == 130 and shlex.split(command)[-1] == f"--resume={checkpoint}"


@pytest.mark.parametrize("seeds", [None, 2])
def test_a_run_compiles_its_init_its_chunk_and_its_test_report_once_each(seeds, small, tmp_path):
    """A run folder's run (one model, or members) compiles three programs, each once:
    the state's init, the chunk of steps and the test report, whose one program over the
    test images gives the test loss and accuracy too. Nothing else is compiled for the
    test images: no second evaluation of them, and the report's counts, softmax and
    per-class recall run in numpy on the host (on the TPU each of those was a compile
    of its own, seconds of a cold run)."""
    import jax

    from eqx_fmnist.ensemble import Seeds
    from eqx_fmnist.runs import Training

    compiled = []

    def listen(event, duration, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":  # a load from disk too
            compiled.append(kwargs.get("fun_name"))

    training = Training.new(
        tmp_path / "r", config(), data=_numpy(small), members=seeds and Seeds(seeds)
    )
    jax.clear_caches()
    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        done = training.run()
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    init, chunk = (
        ("_init_state", "_steps") if seeds is None else ("_init_members", "_members_steps")
    )
    assert sorted(compiled) == sorted(f"jit({n})" for n in (init, chunk, "_report_scores"))
    test = done.outcome.result.test
    assert test is not None and test.count == len(small) and len(test.members) == (seeds or 0)
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["test_accuracy"] == test.accuracy and summary["seconds"]["test"] > 0


@pytest.mark.parametrize(
    "config_arg, members_arg, named",
    [("not a config", None, "`config` must be a TrainConfig, not str"), (None, 3, "`members`")],
)
def test_a_run_of_something_else_than_a_config_or_members_is_refused_first(
    config_arg, members_arg, named, tmp_path
):
    """The library's own check, for a user without a type checker (the suite's runtime
    checker, which would come first, is stepped past)."""
    from eqx_fmnist.runs import Training

    new = Training.new.__func__
    unchecked = getattr(new, "__wrapped__", new)
    with pytest.raises(TypeError, match=named):
        unchecked(Training, tmp_path / "r", config_arg or config(), members=members_arg)
    assert not (tmp_path / "r").exists()  # nothing written


def test_a_report_whose_program_could_not_be_compiled_aside_is_compiled_after(small, monkeypatch):
    """The test report's program compiled in a thread while the run trains is a saving,
    never a condition: where that fails, `fit` makes it again after training and the
    report gives the same numbers. Without a test set there is no report."""
    import eqx_fmnist.runs.one_run as one_run
    from eqx_fmnist.dataset import Splits
    from eqx_fmnist.runs import report_program, train_run

    aside = train_run(config(), Splits(small, small))
    calls = []

    def fails_in_the_thread(*args, **kwargs):
        calls.append(threading.current_thread().name)
        if len(calls) == 1:
            raise MemoryError("no room for a second program")
        return report_program(*args, **kwargs)

    monkeypatch.setattr(one_run, "report_program", fails_in_the_thread)
    after = train_run(config(), Splits(small, small))
    assert calls == ["test-program", threading.current_thread().name]
    assert after.report is not None and aside.report is not None
    assert after.result.test == aside.result.test and after.result.test.count == len(small)
    np.testing.assert_array_equal(after.report.logits, aside.report.logits)
    untested = train_run(config(), Splits(small))
    assert untested.report is None and untested.result.test is None


def test_overwrite_removes_exactly_what_a_run_wrote(tmp_path):
    """`clear_run` (what `--overwrite` removes) goes by exact names: a user's `model.py`,
    `suspects_to_check.txt`, notes in `tensorboard/` and a `teacher/` folder holding only
    a README stay; the run's files, its event files and traces, exports, audits and the
    run a teacher folder holds go, and folders left empty with them."""
    from eqx_fmnist.runs import LOCK_NAME
    from eqx_fmnist.runs.layout import clear_run

    ours = [
        "config.json",
        "history.jsonl",
        "checkpoint.eqx",
        "summary.json",
        "calibration.safetensors",
        "confusion_matrix.png",
        "suspects_train.csv",
        "suspects_test_by_class.png",
        "model.onnx",
        "model.onnx.manifest.json",
        "tensorboard/events.out.tfevents.1.host",
        "profile/plugins/profile/2026_12_07/host.xplane.pb",
        "profile/plugins/profile/2026_12_07/perfetto_trace.json.gz",
    ]
    theirs = ["model.py", "suspects_to_check.txt", "tensorboard/notes.md", "notes.txt"]
    run = tmp_path / "run"
    for name in [*ours, *theirs]:
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_text(name)
    (run / "teacher").mkdir()
    (run / "teacher" / "README").write_text("a folder of mine")
    removed = clear_run(run, lock=LOCK_NAME)
    assert sorted(p.relative_to(run).as_posix() for p in removed) == sorted(ours)
    left = sorted(p.relative_to(run).as_posix() for p in run.rglob("*") if p.is_file())
    assert left == sorted([*theirs, "teacher/README"])
    assert not (run / "profile").exists()  # left empty: gone
    # A teacher folder that holds a run the library wrote goes with it, lock and all.
    for name in ("checkpoint.eqx", "summary.json", LOCK_NAME, "examples.png"):
        (run / "teacher" / name).write_text(name)
    (run / "teacher" / "README").unlink()
    clear_run(run, lock=LOCK_NAME)
    assert not (run / "teacher").exists()
    (run / "teacher").mkdir()
    for name in ("checkpoint.eqx", "summary.json"):
        (run / "teacher" / name).write_text(name)
    clear_run(run, keep=run / "teacher", lock=LOCK_NAME)
    assert (run / "teacher" / "checkpoint.eqx").is_file()  # a teacher trained first: kept


def test_holding_out_too_many_images_and_an_unknown_view_are_one_line_each(small, tmp_path):
    """A calibration split that leaves fewer images than a batch is refused naming the
    flags that hold images out (not `batch_size`); a view name that is not one is refused
    naming the choices (not a `KeyError`)."""
    from eqx_fmnist.checkpoint import save_checkpoint
    from eqx_fmnist.runs import Run, run_splits
    from eqx_fmnist.state import init_state

    with pytest.raises(
        ValueError, match=r"leaves 6 to train on, fewer than a batch of 32: .*--calibrate"
    ):
        run_splits(config(calibration_size=250), _numpy(small))
    c = config()
    save_checkpoint(tmp_path / "checkpoint.eqx", init_state(c, len(small)), c, num_train=256)
    with pytest.raises(
        ValueError, match=r"`tta` must be one of none, mirror, shifts, but got 'flip'"
    ):
        Run.open(tmp_path).views("flip")


def test_a_command_that_writes_into_a_run_holds_its_lock_and_reads_it_again(small, tmp_path):
    """`Run.locked` (export, evaluate's figures, audit): refused while a run trains in
    the folder, and refused when the folder's run was replaced after it was read (an
    export would pair the old model with the new run's folder)."""
    import equinox as eqx

    from eqx_fmnist.checkpoint import save_checkpoint
    from eqx_fmnist.fileio import FolderLock
    from eqx_fmnist.runs import LOCK_NAME, Run, RunError
    from eqx_fmnist.state import init_state

    c = config()
    state = init_state(c, len(small))
    save_checkpoint(tmp_path / "checkpoint.eqx", state, c, num_train=256)
    run = Run.open(tmp_path)
    (tmp_path / ".checkpoint.eqx.x1.part").write_bytes(b"a killed writer's")
    with run.locked():
        assert not (tmp_path / ".checkpoint.eqx.x1.part").exists()
    with FolderLock(tmp_path / LOCK_NAME), pytest.raises(RunError, match="is writing to"):
        with run.locked():
            pass
    other = eqx.tree_at(lambda s: s.step, state, state.step + 1)
    save_checkpoint(tmp_path / "checkpoint.eqx", other, c, num_train=256)
    with pytest.raises(RunError, match="holds another run than the one read"):
        with run.locked():
            pass


def test_a_resume_keeps_its_checkpoint_cadence_and_drops_a_torn_last_history_line(
    small, tmp_path, caplog
):
    """A run started checkpointing every 7 steps resumes so (unless told otherwise); a
    last history line cut short by a kill mid-append is dropped with a warning, not a
    refusal, and a damaged line before it is still refused."""
    import equinox as eqx

    from eqx_fmnist.runs import CheckpointEvery, RunError, RunFolder, Training, read_history
    from eqx_fmnist.state import init_state

    c = config()
    every = CheckpointEvery(seconds=None, steps=7)
    state = init_state(c, 256)
    state = eqx.tree_at(lambda s: s.step, state, state.step + 4)  # as if 4 steps trained
    with RunFolder(tmp_path / "r", c, num_train=256, checkpoint_every=every) as run:
        run.save(state, 4)
    assert Training.resume(tmp_path / "r", data=_numpy(small)).folder.checkpoint_every == every
    told = Training.resume(tmp_path / "r", data=_numpy(small), checkpoint_every="30s")
    assert told.folder.checkpoint_every == CheckpointEvery(seconds=30.0)
    history = tmp_path / "r" / "history.jsonl"
    history.write_text('{"step": 2, "loss": 1.0, "accuracy": 0.5}\n{"step": 4, "lo')
    with caplog.at_level("WARNING"):
        assert [h["step"] for h in read_history(tmp_path / "r")] == [2]
    assert "cut short" in caplog.text
    history.write_text('{"step": 2, "lo\n{"step": 4, "loss": 1.0, "accuracy": 0.5}\n')
    with pytest.raises(RunError, match="line 1"):
        read_history(tmp_path / "r")


def test_an_earlier_teacher_record_is_checked_by_what_its_checkpoint_says(small, tmp_path):
    """A `teacher.json` of an earlier version (an absolute path, no checksum): a moved
    run finds the teacher it carries in `teacher/`, and a checkpoint written at the path
    after the run's own (a sweep that replaced the teacher's folder) is refused."""
    import json

    from eqx_fmnist.checkpoint import MAGIC, save_checkpoint
    from eqx_fmnist.fileio import digest
    from eqx_fmnist.runs import TEACHER_FILE, RunError, read_teacher
    from eqx_fmnist.state import init_state

    c = config()
    state = init_state(c, len(small))
    run = tmp_path / "moved"
    (run / "teacher").mkdir(parents=True)
    save_checkpoint(run / "teacher" / "checkpoint.eqx", state, c, num_train=256)
    save_checkpoint(run / "checkpoint.eqx", state, c, num_train=256)
    old_place = tmp_path / "where it was" / "teacher" / "checkpoint.eqx"
    (run / TEACHER_FILE).write_text(json.dumps({"teacher": str(old_place)}))
    assert read_teacher(run) == run / "teacher" / "checkpoint.eqx"
    elsewhere = tmp_path / "replaced" / "checkpoint.eqx"
    save_checkpoint(elsewhere, state, c, num_train=256)
    blob = elsewhere.read_bytes()
    start = len(MAGIC) + 8
    length = int.from_bytes(blob[len(MAGIC) : start], "little")
    header = json.loads(blob[start : start + length])
    del header["header_sha256"]
    header["created"] = "2999-01-01T00:00:00+00:00"  # written after the run's own
    header["header_sha256"] = digest(header)
    head = json.dumps(header).encode()
    elsewhere.write_bytes(MAGIC + len(head).to_bytes(8, "little") + head + blob[start + length :])
    (run / TEACHER_FILE).write_text(json.dumps({"teacher": str(elsewhere)}))
    with pytest.raises(RunError, match="written after this run's checkpoint"):
        read_teacher(run)


def test_time_split_cuts_the_callbacks_into_checkpoints_and_logging():
    """`time_split`, by hand: `fit`'s parts carried over, its callbacks' time less the
    checkpoints written during training is logging, every part rounded to milliseconds,
    in `TIME_SPLIT`'s order."""
    from eqx_fmnist.runs import TIME_SPLIT, time_split

    fit_seconds = {
        "load": 1.0,
        "compile": 2.0,
        "steps": 30.0,
        "host_reads": 0.1,
        "validation": 0.0,
        "callbacks": 0.5,
        "test": 0.4,
    }
    got = time_split(fit_seconds, 0.2, 0.25, 0.03, 0.91234)
    assert list(got) == list(TIME_SPLIT)
    assert got["logging"] == 0.3 and got["checkpoints"] == 0.25 and got["figures"] == 0.912
    assert got["test"] == 0.4 and got["report"] == 0.03 and got["steps"] == 30.0


def test_refuse_results_and_open_teacher_name_what_is_wrong(small, tmp_path):
    """`refuse_results`: a folder with another run's summary is refused, an empty one
    taken, a finished run's own resume refused; `open_teacher`: a folder that holds no
    run is one `RunError` naming it."""
    from eqx_fmnist.runs import RunError, open_teacher, refuse_results

    refuse_results(tmp_path)  # nothing there: a run may start
    (tmp_path / "summary.json").write_text("{}")
    with pytest.raises(RunError, match=r"already holds results \(summary\.json\)"):
        refuse_results(tmp_path)
    with pytest.raises(RunError, match="has finished"):
        refuse_results(tmp_path, own=True, start_step=24, total_steps=24)
    refuse_results(tmp_path, own=True, start_step=12, total_steps=24)  # its own, midway
    with pytest.raises(RunError, match="no checkpoint at"):
        open_teacher(tmp_path / "nothing", config())


def test_write_suspects_writes_the_tables_and_grids_it_names(tmp_path):
    """`write_suspects` of a hand-made audit: the CSV's rows are the suspects in order,
    the JSON says the same, and both grids are PNG files."""
    import json

    from eqx_fmnist.audit import LabelAudit
    from eqx_fmnist.runs import write_suspects

    found = LabelAudit(
        np.array([7, 2]), np.array([0, 9]), np.array([6, 7]), np.array([0.01, 0.2]), 50
    )
    images = np.zeros((50, 28, 28), np.uint8)
    paths = write_suspects(tmp_path, "train", found, images, top=2)
    assert sorted(p.name for p in paths) == sorted(
        f"suspects_train{end}" for end in (".csv", ".json", ".png", "_by_class.png")
    )
    lines = (tmp_path / "suspects_train.csv").read_text().splitlines()
    assert lines[1].startswith("7,T-shirt/top,Shirt") and lines[2].startswith("2,Ankle boot,")
    saved = json.loads((tmp_path / "suspects_train.json").read_text())
    assert saved["examples"] == 50 and [r["index"] for r in saved["suspects"]] == [7, 2]
    assert saved["suspects"][1]["suggested"] == "Sneaker"
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in paths if p.suffix == ".png")
