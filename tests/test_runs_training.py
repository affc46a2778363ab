"""`runs.training`: `Training.new`, `Training.resume` and `Training.run`: what refuses
a run before a file is written, distilled runs (the teacher first, its record checked),
`overwrite`, resumes that keep their cadence and refuse an edited config, and a run that
compiles its init, its chunk and its test report once each."""

import json

import pytest

from helpers import fashion_mnist_of, real_slice, run_config as config


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
@pytest.mark.optimized  # the teacher's table: its CNN on 50 views of every image
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
    assert taught.teacher_model is not None and taught.teacher_model.hidden_sizes == (32,)
    (folder / TEACHER_FILE).write_text("[]")  # damaged: one line naming the file
    with pytest.raises(RunError, match=f"{TEACHER_FILE} does not name a teacher"):
        Training.resume(folder, data=real_data)


@pytest.mark.slow  # trains three small runs and writes their reports
def test_overwrite_starts_the_folder_afresh_and_a_stale_calibration_is_refused(real_data, tmp_path):
    """`--overwrite` over a calibrated run removes its calibration, figures and
    everything else it wrote (never a file of the user's), so the new run's `predict`
    and `export` cannot serve the old temperature, sets and flag; a calibration left
    beside a checkpoint it was not fitted for (copied in) is refused, not used."""
    import shutil

    from eqx_fmnist.runs import Run, RunError, Training

    data = real_slice(real_data)
    out = tmp_path / "r"
    Training.new(out, config(calibration_size=500), data=data).run()
    assert Run.open(out).calibration is not None and (out / "prediction_sets.png").is_file()
    (out / "notes.txt").write_text("mine")
    (out / "tensorboard").mkdir()
    Training.new(out, config(hidden_sizes=(8,)), data=data, overwrite=True).run()
    assert not (out / "calibration.safetensors").exists()
    assert not (out / "prediction_sets.png").exists()
    assert (out / "notes.txt").read_text() == "mine"  # not the run's: kept
    assert (out / "tensorboard").is_dir()  # a folder the run did not make: kept
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

    data = real_slice(real_data)
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

    data = real_slice(real_data)
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
        tmp_path / "r", config(), data=fashion_mnist_of(small), members=seeds and Seeds(seeds)
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
    assert (
        Training.resume(tmp_path / "r", data=fashion_mnist_of(small)).folder.checkpoint_every
        == every
    )
    told = Training.resume(tmp_path / "r", data=fashion_mnist_of(small), checkpoint_every="30s")
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


def test_start_training_checks_everything_before_it_writes_the_folder(small, tmp_path):
    """`start_training` (what `Training.new` and `Training.resume` share): a run that
    cannot start (more folds than rows) is refused before its folder exists; one that
    can holds its splits, its plan and its parsed cadence, and nothing is trained."""
    import eqx_fmnist as ef
    from eqx_fmnist.runs import CheckpointEvery, RunError
    from eqx_fmnist.runs.training import start_training

    from helpers import fashion_mnist_of, small_config

    data = fashion_mnist_of(small)
    with pytest.raises(RunError, match="folds"):
        start_training(tmp_path / "no", small_config(), ef.ensemble.Folds(1000), data)
    assert not (tmp_path / "no").exists()
    job = start_training(tmp_path / "r", small_config(), None, data, checkpoint_every="30s")
    assert job.folder.checkpoint_every == CheckpointEvery(seconds=30.0)
    assert job.start == 0 and job.state is None and job.total_steps == 16
    assert len(job.splits.train) == len(small) and not (tmp_path / "r" / "checkpoint.eqx").exists()
