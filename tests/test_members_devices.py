"""Many models over many devices: members split over a `"members"` mesh, whole members
on each device with the whole batch, nothing crossing devices; and members that share
their batches.

The device cases run `members_worker.py` in fresh processes (8 simulated CPU devices,
or two processes joined by `jax.distributed`), as test_parallel.py does.
"""

import sys
from pathlib import Path

import numpy as np
import pytest

from helpers import finish_worker, load_worker_result, start_worker, two_processes

WORKER = Path(__file__).with_name("members_worker.py")
EIGHT = {"XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
# Not bit for bit: 8 members' batched matmuls on a device and 64's on one device (or
# one model's unbatched matmul) are tiled differently by XLA, which orders a float32
# sum's terms differently. Equal to rounding: about 2e-7 after 6 steps here.
ALONE_ATOL = 1e-5


def worker(out: Path, devices: int, members: int, *extra: str, env=None):
    return start_worker(WORKER, out, devices, members, *extra, env=env)


def one_device(members: int):
    """The worker's members trained straight through on this process's one device."""
    import equinox as eqx
    import jax

    import eqx_fmnist as ef
    from eqx_fmnist.ensemble import Seeds

    sys.path.insert(0, str(WORKER.parent))
    import members_worker

    ds = members_worker.data()
    result = ef.fit(members_worker.config(1), ef.Splits(ds, ds), members=Seeds(members))
    return [np.asarray(x) for x in jax.tree.leaves(eqx.filter(result.model, eqx.is_array))]


def alone(seed: int):
    """Member `seed` trained by itself, one model on one device."""
    import equinox as eqx
    import jax
    import members_worker

    import eqx_fmnist as ef

    ds = members_worker.data()
    c = members_worker.config(1).with_changes(seed=seed)
    result = ef.fit(c, ef.Splits(ds, ds))
    return [np.asarray(x) for x in jax.tree.leaves(eqx.filter(result.model, eqx.is_array))]


@pytest.mark.slow
def test_sixteen_members_over_eight_devices_train_as_each_alone(tmp_path):
    """Two members a device (the same program holds 64, eight a device: their largest
    difference from each lone run was 3.0e-8, with nothing else changed)."""
    out = tmp_path / "m8.npz"
    running = worker(out, 8, 16, env=EIGHT)
    seeds = (0, 7, 15)  # the first, one in the middle, the last device's last
    try:  # the references are trained here while the worker runs
        straight = one_device(16)
        lone = {seed: alone(seed) for seed in seeds}
    finally:  # a reference that fails leaves no worker behind
        finish_worker(running)
    sharded, info = load_worker_result(out)
    # Stopped after 3 steps, checkpointed, resumed: the same members as straight through.
    assert info["resumed_from"] == 3 and info["member_devices"] == 8
    for a, b in zip(sharded, straight, strict=True):
        np.testing.assert_allclose(a, b, atol=ALONE_ATOL, rtol=0)
    for seed in seeds:
        member = [x[seed] for x in sharded]
        for a, b in zip(member, lone[seed], strict=True):
            np.testing.assert_allclose(a, b, atol=ALONE_ATOL, rtol=0)
    # Members on shared batches get their first member's batches on every device.
    assert info["shared_apart"] < ALONE_ATOL
    # Nothing crosses devices in the step ...
    assert info["collectives"] == []
    # ... and each device does 1/n of the work and holds 1/n of the members.
    flops1, bytes1 = info["costs"][1]
    for n in (2, 4, 8):
        flops, held = info["costs"][n]
        assert flops == pytest.approx(flops1 / n, rel=0.05), (n, flops, flops1)
        assert held == pytest.approx(bytes1 / n, rel=0.05), (n, held, bytes1)


@pytest.mark.slow
def test_two_processes_train_the_same_members_as_one(tmp_path):
    outs = [tmp_path / f"p{i}.npz" for i in range(2)]
    straight = two_processes(WORKER, outs, 2, 4, beside=lambda: one_device(4))
    assert outs[0].exists() and not outs[1].exists()  # only process 0 writes
    members, info = load_worker_result(outs[0])
    assert info["process_count"] == 2 and info["member_devices"] == 2
    assert info["resumed_from"] == 3 and info["collectives"] == []
    for a, b in zip(members, straight, strict=True):
        np.testing.assert_allclose(a, b, atol=ALONE_ATOL, rtol=0)


def test_members_that_do_not_divide_over_the_devices_are_one_line():
    import eqx_fmnist as ef
    from eqx_fmnist.state import check_members

    config = ef.TrainConfig(steps=2, batch_size=32, devices=4)
    check_members([config.with_changes(seed=s) for s in range(8)])  # 2 on each
    with pytest.raises(ValueError) as e:
        check_members([config.with_changes(seed=s) for s in range(6)])
    (line,) = str(e.value).splitlines()
    assert "6 members do not split evenly over 4 devices" in line
    assert "(e.g. 4, 8)" in line


@pytest.mark.slow  # trains members on shared batches and each alone
def test_members_on_shared_batches_train_on_their_first_members_batches(small):
    """Member `i` of a run with `shared_batches` is the lone run of seed `i` whose batches
    (order and moves) are drawn from seed 0's key: built here by hand, one model."""
    import equinox as eqx

    import eqx_fmnist as ef
    from eqx_fmnist.state import init_members

    from helpers import tree_allclose

    # Its own shape: `ALONE_ATOL` is the members' largest difference from lone runs
    # measured for this one.
    config = ef.TrainConfig(steps=4, batch_size=32, hidden_sizes=(8,), shift=2, mirror=True)
    shared = config.with_changes(shared_batches=True)
    seeds = [shared.with_changes(seed=s) for s in range(3)]
    stack = init_members(seeds, len(small))
    trained, _ = ef.train_steps(stack, small, batch_size=32, num_steps=4)
    own = init_members([c.with_changes(shared_batches=False) for c in seeds], len(small))
    apart, _ = ef.train_steps(own, small, batch_size=32, num_steps=4)
    first_key = ef.init_state(config, len(small)).key
    for s in range(3):
        lone = ef.init_state(config.with_changes(seed=s), len(small))
        lone = eqx.tree_at(lambda st: st.key, lone, first_key.copy())  # donated
        lone, _ = ef.train_steps(lone, small, batch_size=32, num_steps=4)
        member = ef.select_members(trained.model, s)
        assert tree_allclose(member, lone.model, rtol=0, atol=ALONE_ATOL)
        if s:  # without sharing, member s draws its own batches: another model
            other = ef.select_members(apart.model, s)
            assert not tree_allclose(other, lone.model, rtol=0, atol=1e-3)
    assert trained.key.shape[0] == 3  # each member keeps its own key


def test_shared_batches_with_rows_of_their_own_are_refused(small):
    import eqx_fmnist as ef
    from eqx_fmnist.ensemble import Folds

    from helpers import small_config

    config = small_config(shared_batches=True)
    with pytest.raises(ValueError, match="cannot share their batches: drop shared_batches"):
        ef.fit(config, ef.Splits(small, small), members=Folds(2))


@pytest.mark.slow
def test_the_command_line_says_how_the_members_spread(real_data, tmp_path):
    from helpers import run_cli

    flags = ["--seeds", 4, "--devices", 4, "--shared-batches", "--steps", 8, "--hidden", 8]
    flags += ["--batch-size", 64, "--data-dir", real_data.source, "--out", tmp_path / "run"]
    done = run_cli("train", *flags, env=EIGHT)
    assert done.returncode == 0, done.stderr[-2000:]
    said = " ".join(done.stdout.split())  # the console wraps its lines
    assert "4 members in one program (seeds 0-3), on shared batches, 1 on each of 4 devices" in said
    assert "ensemble (mean probability)" in said
