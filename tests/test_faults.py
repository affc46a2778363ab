"""Numerical faults, determinism, and interrupted runs."""

import json
import os
import signal
import time

import numpy as np
import pytest

from helpers import (
    run_cli,
    run_cli_here,
    small_config,
    start_cli,
    tree_allclose,
    wait_for,
)


def run_cli_beside_children(*args):
    """`eqx-fmnist ARGS` on the backend a child process computes on: in this process on
    a CPU (`run_cli_here`, cheaper), in a child where this process holds an accelerator
    (the suite's children run on the CPU, conftest.py). For a result compared bit for bit
    with a child's: the same program on two backends rounds differently."""
    import jax

    if jax.default_backend() == "cpu":
        return run_cli_here(*args)
    return run_cli(*args)


def test_runs_are_bitwise_deterministic(small):
    import jax.tree_util as jtu

    from eqx_fmnist.dataset import Splits
    from eqx_fmnist.train import fit

    a = fit(small_config(log_every=4), Splits(small, small))
    b = fit(small_config(log_every=4), Splits(small, small))
    for x, y in zip(jtu.tree_leaves(a.model), jtu.tree_leaves(b.model), strict=True):
        assert np.array_equal(np.asarray(x), np.asarray(y))
    keys = ("step", "loss", "accuracy", "grad_norm", "skipped")
    assert [{k: h[k] for k in keys} for h in a.history] == [
        {k: h[k] for k in keys} for h in b.history
    ]


@pytest.mark.slow  # trains a run of 40 steps
def test_cli_reports_a_numerical_fault_and_keeps_the_last_good_checkpoint(tmp_path, real_data):
    out = tmp_path / "run"
    result = run_cli_here(
        "train",
        "--steps",
        40,
        "--log-every",
        10,
        "--lr",
        "1e4",
        "--schedule",
        "constant",
        "--out",
        out,
        "--data-dir",
        real_data.source,
    )
    assert result.returncode == 1, result.stderr
    assert "step" in result.stderr and "Traceback" not in result.stderr
    assert not (out / "summary.json").exists()  # no result that looks like a result
    if (out / "checkpoint.eqx").exists():
        from eqx_fmnist.checkpoint import load_checkpoint

        ckpt = load_checkpoint(out / "checkpoint.eqx")
        import jax.tree_util as jtu

        assert all(np.isfinite(np.asarray(x)).all() for x in jtu.tree_leaves(ckpt.state.model))


def wait_for_history(out, timeout: float = 120) -> bool:
    """Wait until the run in `out` has logged an interval."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        history = out / "history.jsonl"
        if history.exists() and history.read_text().strip():
            return True
        time.sleep(0.01)
    return False


def _interruptible(real_data) -> list:
    return ["--steps", 120, "--log-every", 10, "--hidden", 64, "--data-dir", real_data.source]


@pytest.fixture(scope="module")
def straight_run(tmp_path_factory, real_data):
    """The run without interruption, once for both signals, on the backend of the CLI
    process that is interrupted (the same program and data)."""
    out = tmp_path_factory.mktemp("faults") / "straight"
    straight = run_cli_beside_children("train", *_interruptible(real_data), "--out", out)
    assert straight.returncode == 0, straight.stderr
    return out


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_then_resume_equals_an_uninterrupted_run(sig, tmp_path, real_data, straight_run):
    from eqx_fmnist.checkpoint import load_checkpoint

    # The default checkpoint cadence (60 s) is longer than this run: the checkpoint the
    # resume starts from is the one the signal asks for.
    common = _interruptible(real_data)
    out = tmp_path / "cut"
    proc = start_cli("train", *common, "--out", out)
    try:
        assert wait_for_history(out)
        t = time.monotonic()
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
        assert time.monotonic() - t < 30  # promptly
    finally:
        proc.kill()
    if proc.returncode == 0:
        pytest.skip("the run finished before the signal arrived")
    assert proc.returncode == 130 and "--resume" in err
    cut_step = load_checkpoint(out / "checkpoint.eqx").step
    assert 10 <= cut_step < 120
    resumed = run_cli_beside_children(
        "train", "--resume", out / "checkpoint.eqx", "--data-dir", real_data.source
    )
    assert resumed.returncode == 0, resumed.stderr
    a = load_checkpoint(out / "checkpoint.eqx")
    b = load_checkpoint(straight_run / "checkpoint.eqx")
    assert a.step == b.step == 120
    assert tree_allclose(a.state.model, b.state.model, rtol=0, atol=0)
    hist = [json.loads(x)["step"] for x in (out / "history.jsonl").read_text().splitlines()]
    assert hist == list(range(10, 121, 10))
    assert os.path.exists(out / "summary.json")


@pytest.mark.slow  # a CLI process
def test_a_second_run_refuses_a_folder_in_use_and_takes_over_a_stale_lock(tmp_path, real_data):
    out = tmp_path / "run"
    args = ["--steps", 100000, "--log-every", 10, "--out", out, "--data-dir", real_data.source]
    first = start_cli("train", *args)
    try:
        assert wait_for(out / ".eqx-fmnist.lock")
        second = run_cli_here("train", *args, "--overwrite")  # the lock is another process's
        assert second.returncode == 2, second.stderr
        assert f"another run (pid {first.pid} on " in second.stderr
    finally:
        first.kill()
        first.communicate(timeout=60)
    # SIGKILL left the lock behind; its pid is gone, so the next run takes over.
    assert (out / ".eqx-fmnist.lock").exists()
    third = run_cli_here(
        "train",
        "--steps",
        10,
        "--log-every",
        10,
        "--out",
        out,
        "--overwrite",
        "--data-dir",
        real_data.source,
    )
    assert third.returncode == 0, third.stderr
    assert not (out / ".eqx-fmnist.lock").exists()


def test_a_full_disk_fails_clearly_and_keeps_the_previous_checkpoint(
    tmp_path, real_data, monkeypatch, capsys
):
    import errno

    import eqx_fmnist.checkpoint as checkpoint
    from eqx_fmnist import cli

    real_replace = os.replace
    calls = {"n": 0}

    def replace(src, dst):
        if str(dst).endswith("checkpoint.eqx"):
            calls["n"] += 1
            if calls["n"] == 2:  # the second checkpoint finds the disk full
                raise OSError(errno.ENOSPC, "No space left on device", str(dst))
        return real_replace(src, dst)

    monkeypatch.setattr(checkpoint.os, "replace", replace)
    out = tmp_path / "run"
    status = cli.main(
        [
            "train",
            "--steps",
            "30",
            "--checkpoint-every",
            "10steps",
            "--log-every",
            "10",
            "--hidden",
            "32",
            "--out",
            str(out),
            "--data-dir",
            str(real_data.source),
        ]
    )
    err = capsys.readouterr().err
    assert status == 2 and "No space left on device" in err and len(err.strip().splitlines()) == 1
    monkeypatch.undo()
    assert checkpoint.load_checkpoint(out / "checkpoint.eqx").step == 10  # the previous one
    assert not any(p.name.endswith(".part") for p in out.iterdir())
    assert not (out / "summary.json").exists()


# On a slice of the real data (`use_a_slice`: 2,048 training and 500 test images): the
# point is each file the run writes, not the size of what it trains on.
TINY_RUN = ["--steps", "4", "--log-every", "2", "--hidden", "8", "--calibrate", "500"]


def _writes_of_a_run(tmp_path, real_data, monkeypatch) -> list[str]:
    """The files a tiny calibrated run writes, in order (each through `os.replace`)."""
    from eqx_fmnist import cli

    names, real_replace, out = [], os.replace, tmp_path / "count"

    def replace(src, dst):
        if os.path.dirname(dst) == str(out):  # the run folder's, not the data cache's
            names.append(os.path.basename(dst))
        return real_replace(src, dst)

    with monkeypatch.context() as m:
        m.setattr(os, "replace", replace)
        assert (
            cli.main(["train", *TINY_RUN, "--out", str(out), "--data-dir", str(real_data.source)])
            == 0
        )
    return list(dict.fromkeys(names))


@pytest.mark.slow  # a run per file a run writes
def test_a_full_disk_during_any_write_of_a_run_is_one_line_naming_that_file(
    tmp_path, real_data, monkeypatch, capsys
):
    """Every file a run writes, in turn, finds the disk full: one line naming the file
    (the path asked for, never a temporary name) and what to do, exit 2, no `.part`
    file left, and what was written before it still whole."""
    import errno

    from eqx_fmnist import cli
    from eqx_fmnist.checkpoint import load_checkpoint

    from helpers import use_a_slice

    use_a_slice(real_data, monkeypatch, 2048, 500)
    names = _writes_of_a_run(tmp_path, real_data, monkeypatch)
    assert {"config.json", "checkpoint.eqx", "summary.json", "calibration.safetensors"} <= set(
        names
    )
    real_replace = os.replace
    for name in names:
        out = tmp_path / name.replace(".", "_")

        def replace(src, dst, name=name):
            if os.path.basename(dst) == name:
                raise OSError(errno.ENOSPC, "No space left on device")
            return real_replace(src, dst)

        capsys.readouterr()
        with monkeypatch.context() as m:
            m.setattr(os, "replace", replace)
            status = cli.main(
                ["train", *TINY_RUN, "--out", str(out), "--data-dir", str(real_data.source)]
            )
        err = capsys.readouterr().err
        assert status == 2, (name, err)
        assert err.count("\n") == 1 and f"({out / name}); free some space" in err, (name, err)
        assert not [p.name for p in out.iterdir() if p.name.endswith(".part")], name
        if (out / "checkpoint.eqx").exists():
            assert load_checkpoint(out / "checkpoint.eqx").step == 4


def test_nothing_is_unpickled(tmp_path):
    """No pickle in the package, and a checkpoint carrying a pickled array is refused."""
    import hashlib
    import io
    import pathlib

    import eqx_fmnist
    from eqx_fmnist.checkpoint import (
        MAGIC,
        CheckpointError,
        load_checkpoint,
        read_header,
        save_checkpoint,
    )
    from eqx_fmnist.config import TrainConfig
    from eqx_fmnist.state import init_state

    source = "\n".join(p.read_text() for p in pathlib.Path(eqx_fmnist.__file__).parent.glob("*.py"))
    assert "import pickle" not in source and "allow_pickle=True" not in source
    c = TrainConfig(steps=2, hidden_sizes=(4,))
    path = save_checkpoint(tmp_path / "c.eqx", init_state(c, 1024), c, num_train=1024)
    header, payload = read_header(path)
    evil = io.BytesIO()
    np.save(evil, np.array([{"os": "system"}], dtype=object), allow_pickle=True)
    payload = evil.getvalue() + payload[len(evil.getvalue()) :]
    header["payload_sha256"] = hashlib.sha256(payload).hexdigest()
    header["payload_bytes"] = len(payload)
    head = json.dumps(header).encode()
    path.write_bytes(MAGIC + len(head).to_bytes(8, "little") + head + payload)
    with pytest.raises(CheckpointError):
        load_checkpoint(path)


@pytest.mark.slow
def test_sigkill_never_leaves_a_checkpoint_that_loads_as_valid_but_wrong(tmp_path, real_data):
    """Killed at arbitrary moments (often mid-save): the checkpoint is always whole."""
    import random

    from eqx_fmnist.checkpoint import load_checkpoint

    out = tmp_path / "run"
    args = [
        "--steps",
        "100000",
        "--log-every",
        "2",
        "--checkpoint-every",
        "2steps",
        "--hidden",
        "32",
        "--out",
        str(out),
        "--data-dir",
        str(real_data.source),
    ]
    rng = random.Random(0)
    for _attempt in range(3):
        proc = start_cli("train", *args, "--overwrite", quiet=True)
        try:
            assert wait_for(out / "checkpoint.eqx", poll=0.01)
            time.sleep(rng.uniform(0.0, 1.0))
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=60)
        finally:
            proc.kill()
        ckpt = load_checkpoint(out / "checkpoint.eqx")  # whole, and checksum-verified
        assert ckpt.step % 2 == 0 and ckpt.step >= 2
        (out / "checkpoint.eqx").unlink()
