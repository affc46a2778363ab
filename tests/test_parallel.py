"""Data parallelism: 8 simulated CPU devices, and two processes with jax.distributed.

Each case runs `parallel_worker.py` in fresh Python processes, because the device count
(`XLA_FLAGS`) and `jax.distributed.initialize` must be set before JAX starts.
"""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers import finish_worker, load_worker_result, start_worker, two_processes

WORKER = Path(__file__).with_name("parallel_worker.py")
# Sums over the batch are split into per-device partial sums and all-reduced, so float32
# rounding differs from one device's single sum: equal to about 1e-7, not bit for bit.
ATOL = 1e-5


def run_worker(out: Path, devices: int, *extra: str, env=None):
    return start_worker(WORKER, out, devices, *extra, env=env)


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    out = tmp_path_factory.mktemp("single") / "p1.npz"
    finish_worker(run_worker(out, 1))
    return load_worker_result(out)


@pytest.mark.slow
def test_eight_simulated_devices_train_like_one(single, tmp_path):
    out = tmp_path / "p8.npz"
    finish_worker(run_worker(out, 8, env={"XLA_FLAGS": "--xla_force_host_platform_device_count=8"}))
    params, info = load_worker_result(out)
    ref, ref_info = single
    for a, b in zip(params, ref, strict=True):
        np.testing.assert_allclose(a, b, atol=ATOL, rtol=0)
    assert info["devices_of_weight"] == 8 and ref_info["devices_of_weight"] == 1
    # Each device holds its own 8-row slice of a 64-example batch ...
    shards = info["batch_shards"]
    assert [s[1] for s in shards] == [(8, 784)] * 8
    assert sorted(s[2] for s in shards) == list(range(0, 64, 8))
    # ... and the compiled step all-reduces the gradients across them.
    assert info["all_reduce"]
    assert info["count"] == 512


@pytest.mark.slow
def test_two_processes_with_jax_distributed_train_like_one(single, tmp_path):
    outs = [tmp_path / f"p{i}.npz" for i in range(2)]
    two_processes(WORKER, outs, 2)
    assert outs[0].exists() and not outs[1].exists()  # only process 0 writes
    params, info = load_worker_result(outs[0])
    assert info["process_count"] == 2 and info["devices_of_weight"] == 2
    # `result.model` is this process's copy (`to_local`, once, in `TrainResult`).
    assert info["model_is_local"] and info["model_matches_state"]
    for a, b in zip(params, single[0], strict=True):
        np.testing.assert_allclose(a, b, atol=ATOL, rtol=0)


def test_indivisible_batch_and_too_many_devices_are_clear_errors():
    import jax

    from eqx_fmnist.config import TrainConfig
    from eqx_fmnist.parallel import check_divisible, make_mesh

    with pytest.raises(
        ValueError,
        match=r"does not split evenly over 3 `devices`; use a multiple of 3 such as 510 or 513",
    ):
        TrainConfig(batch_size=512, devices=3)
    n = len(jax.devices())
    with pytest.raises(ValueError, match=f"asked for {n + 1} devices, but {n} exist"):
        make_mesh(n + 1)
    mesh = make_mesh(1)
    check_divisible(512, mesh)  # one device divides anything
    with pytest.raises(ValueError, match="devices"):
        TrainConfig(devices=0)


def test_the_suite_sets_how_jax_allocates_before_jax_starts():
    """conftest.py sets it (a user's own value stands) before it imports JAX."""
    import os

    assert "XLA_PYTHON_CLIENT_PREALLOCATE" in os.environ


@pytest.mark.slow
@pytest.mark.parametrize("killed", [1, 0])
def test_slurm_starts_two_processes_and_a_killed_one_stops_the_other(killed, real_data, tmp_path):
    """`--distributed` finds both processes from Slurm's variables alone; killing one
    makes the other exit non-zero at its next collective, and the checkpoint holds."""
    import signal
    import time

    import eqx_fmnist as ef
    from eqx_fmnist.parallel import HEARTBEAT_S

    from helpers import slurm_env, slurm_job, wait_for

    out, job = tmp_path / "run", slurm_job()
    # Steps enough that the run is still training when the kill comes.
    flags = ["--steps", 100000, "--log-every", 10, "--hidden", 8, "--batch-size", 64]
    flags += ["--devices", 2, "--checkpoint-every", "20steps", "--data-dir", real_data.source]
    command = [sys.executable, "-m", "eqx_fmnist", "--distributed", "train", "--out", out]
    procs = [
        subprocess.Popen(
            list(map(str, command + flags)),
            env={**os.environ, **slurm_env(job, rank)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(2)
    ]
    survivor = procs[1 - killed]
    try:
        assert wait_for(out / "checkpoint.eqx", timeout=240), procs[0].stderr
        procs[killed].send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        _, err = survivor.communicate(timeout=4 * HEARTBEAT_S)
        took = time.monotonic() - killed_at
    finally:
        for p in procs:
            p.kill()
            p.wait()
            p.stderr.close()
    # Within a heartbeat, not the minutes of JAX's defaults, and never a success.
    assert survivor.returncode != 0 and took < 2 * HEARTBEAT_S, (took, err)
    if killed == 1:  # process 0 (the coordinator, the writer) says it in one line
        assert survivor.returncode == 1
        (line,) = err.strip().splitlines()
        assert "another process of this 2-process run was lost" in line
        assert f"--resume={out / 'checkpoint.eqx'}" in line
    # The last checkpoint stays loadable: what process 0 saved, whole.
    run = ef.runs.Run.open(out)
    assert run.config.devices == 2 and run.step > 0 and run.step % 20 == 0
    assert np.isfinite(np.asarray(run.model.layers[0].weight)).all()


def test_distributed_without_a_scheduler_is_one_line():
    from helpers import run_cli, slurm_env

    if any(name in os.environ for name in slurm_env(0, 0)):
        pytest.skip("the suite itself runs under Slurm")
    import jax

    r = run_cli("--distributed", "data")  # a fresh process: JAX not yet started
    assert r.returncode == 2 and not r.stdout
    (line,) = r.stderr.splitlines()
    if jax.default_backend() == "tpu":  # JAX takes a TPU VM for a cluster, and asks its
        return  # metadata server for the other hosts: its error, in one line
    assert "no job scheduler found" in line and "srun or mpirun" in line
    # In the command line's words: its flag, not the library's arguments or JAX's text.
    assert line.endswith("or drop --distributed to train in this process alone.")
    assert "coordinator_address" not in line


def test_joining_after_jax_ran_is_a_clear_error():
    import jax
    import jax.numpy as jnp

    from eqx_fmnist.parallel import initialize

    jnp.zeros(1).block_until_ready()  # the backend is up in this process
    before = jax.config.jax_cpu_collectives_implementation
    try:
        with pytest.raises(ValueError, match="must be joined before anything runs on JAX"):
            initialize("127.0.0.1:1", 2, 0)
    finally:
        jax.config.update("jax_cpu_collectives_implementation", before)
