"""`runs.reading`: a run folder read back: `Run.locked` (a writer into a finished run holds\nits lock and reads the run again), `run_splits` (what a run holds out, refused in one\nline when it cannot), and `open_teacher` and `refuse_results` naming what is wrong."""

import pytest

from helpers import fashion_mnist_of, run_config as config


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
        run_splits(config(calibration_size=250), fashion_mnist_of(small))
    c = config()
    save_checkpoint(tmp_path / "checkpoint.eqx", init_state(c, len(small)), c, num_train=256)
    with pytest.raises(
        ValueError, match=r"`tta` must be one of none, mirror, shifts, but got 'flip'"
    ):
        Run.open(tmp_path).views("flip")


def test_an_exports_existence_check_is_made_again_under_the_lock(small, tmp_path, monkeypatch):
    """A file that appears at the export's path after the first check (another export
    to the same path, finishing first) is refused under the run's lock: the second
    export never replaces the first without `overwrite`."""
    import eqx_fmnist.runs.reading as reading
    from eqx_fmnist.checkpoint import save_checkpoint
    from eqx_fmnist.runs import Run, RunError
    from eqx_fmnist.state import init_state

    c = config()
    save_checkpoint(tmp_path / "checkpoint.eqx", init_state(c, len(small)), c, num_train=256)
    out = tmp_path / "exports" / "model.stablehlo"
    out.parent.mkdir()

    def another_export_lands_first(data):
        out.write_text("the first export")
        return data

    monkeypatch.setattr(reading, "loaded", another_export_lands_first)
    with pytest.raises(RunError, match="exists; replace it with --overwrite"):
        Run.open(tmp_path).export(out, data=fashion_mnist_of(small))
    assert out.read_text() == "the first export"


def test_a_calibrated_runs_missing_calibration_is_named_not_read_as_none(small, tmp_path):
    """A finished run whose config held images out to calibrate, without its
    `calibration.safetensors`: opening it names the missing file (its answers would be
    uncalibrated without a word before); a run still training has none yet."""
    from eqx_fmnist.checkpoint import save_checkpoint
    from eqx_fmnist.runs import Run, RunError
    from eqx_fmnist.state import init_state

    c = config(calibration_size=32)
    save_checkpoint(tmp_path / "checkpoint.eqx", init_state(c, 224), c, num_train=224)
    assert Run.open(tmp_path).calibration is None  # training: not calibrated yet
    (tmp_path / "summary.json").write_text("{}")
    with pytest.raises(RunError, match="calibration.safetensors is missing") as caught:
        Run.open(tmp_path)
    assert "\n" not in str(caught.value)
