"""Run in a subprocess by test_members_devices.py: members split over devices, which
need `XLA_FLAGS` (simulated devices) or `jax.distributed` set before JAX starts.

    python members_worker.py OUT_NPZ DEVICES MEMBERS [COORDINATOR PROCESS_ID NUM_PROCESSES]

Trains `MEMBERS` seeds of `CONFIG` over `DEVICES` devices (stopped after `STOP` steps
and resumed from the checkpoint, in a run folder beside `OUT_NPZ`), and writes every
member's parameters with what the devices held: the step's collectives, and per device
the compiled chunk's FLOPs and the members' state bytes for every mesh size that
divides the devices.
"""

import sys
import tempfile
from pathlib import Path

import numpy as np

COLLECTIVES = ("all-reduce", "all-gather", "collective-permute", "all-to-all", "reduce-scatter")
STOP = 3


def data():
    from eqx_fmnist.dataset import ArrayDataset

    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (256, 28, 28), dtype=np.uint8)
    return ArrayDataset(images, (np.arange(256) % 10).astype(np.uint8))


def config(devices: int):
    import eqx_fmnist as ef

    return ef.TrainConfig(
        steps=6, batch_size=32, hidden_sizes=(16,), log_every=3, shift=1, devices=devices
    )


def costs(devices: int, members: int) -> dict[int, tuple[float, int]]:
    """Mesh size -> (the chunk's FLOPs, the members' state bytes) on one device."""
    import jax
    import jax.tree_util as jtu

    import eqx_fmnist as ef
    from eqx_fmnist.parallel import MEMBERS, make_mesh, replicate, shard_members
    from eqx_fmnist.state import init_members

    ds, c = data(), config(1)
    stack = init_members([c.with_changes(seed=s) for s in range(members)], len(ds))
    out = {}
    for n in (k for k in (1, 2, 4, 8) if k <= devices and devices % k == 0):
        mesh = make_mesh(n, MEMBERS) if n > 1 else None
        state = stack if mesh is None else shard_members(stack, mesh)
        on = ds if mesh is None else replicate(ds, mesh)
        run = ef.compile_steps(state, on, batch_size=32, num_steps=2, mesh=mesh, donate=False)
        cost = run.compiled.cost_analysis()
        cost = cost[0] if isinstance(cost, list) else cost
        first = jax.devices()[0]
        held = sum(
            s.data.nbytes
            for x in jtu.tree_leaves(eqx_arrays(state))
            for s in x.addressable_shards
            if s.device == first
        )
        out[n] = (float(cost["flops"]), int(held))
    return out


def shared_batches_apart(devices: int) -> float:
    """The largest difference between members on shared batches trained over the mesh
    and on one device: the first member's batches must reach every device."""
    import jax

    import eqx_fmnist as ef
    from eqx_fmnist.parallel import MEMBERS, make_mesh, replicate, shard_members
    from eqx_fmnist.state import init_members

    ds, c = data(), config(1).with_changes(shared_batches=True)
    configs = [c.with_changes(seed=s) for s in range(devices)]
    mesh = make_mesh(devices, MEMBERS)
    spread = shard_members(init_members(configs, len(ds)), mesh)
    spread, _ = ef.train_steps(spread, replicate(ds, mesh), batch_size=32, num_steps=3, mesh=mesh)
    alone, _ = ef.train_steps(init_members(configs, len(ds)), ds, batch_size=32, num_steps=3)
    spread_leaves = jax.tree.leaves(eqx_arrays(spread.model))
    pairs = zip(spread_leaves, jax.tree.leaves(eqx_arrays(alone.model)), strict=True)
    return max(float(np.abs(np.asarray(a) - np.asarray(b)).max()) for a, b in pairs)


def eqx_arrays(tree):
    import equinox as eqx

    return eqx.filter(tree, eqx.is_array)


def main() -> None:
    out, devices, members = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    import jax

    if len(sys.argv) > 4:
        from helpers import join_processes  # the worker's folder is on sys.path

        join_processes(sys.argv[4], int(sys.argv[5]), int(sys.argv[6]))
    from jax.experimental import multihost_utils

    import eqx_fmnist as ef
    from eqx_fmnist.checkpoint import load_checkpoint
    from eqx_fmnist.ensemble import Seeds
    from eqx_fmnist.parallel import MEMBERS, make_mesh, shard_members, to_local
    from eqx_fmnist.runs import Interrupted, RunFolder
    from eqx_fmnist.state import init_members

    ds, c = data(), config(devices)
    splits = ef.Splits(ds, ds)
    folder = out.parent / "run"  # process 0's; every other writes to a scratch folder
    mine = folder if jax.process_index() == 0 else Path(tempfile.mkdtemp()) / "run"

    def stop(record, state):
        if record["step"] == STOP:
            run.request_stop("asked by the worker")

    with RunFolder(mine, c, num_train=len(ds), members=Seeds(members)) as run:
        try:
            ef.fit(c, splits, members=Seeds(members), callback=[stop, run.callback])
        except Interrupted:
            pass
    if jax.process_count() > 1:  # process 0's checkpoint is written
        multihost_utils.sync_global_devices("checkpoint written")
    ckpt = load_checkpoint(folder / "checkpoint.eqx")
    resume = {"start_step": ckpt.step, "resume_from": folder, "members": Seeds(members)}
    with RunFolder(mine, c, num_train=len(ds), overwrite=mine != folder, **resume) as run:
        result = ef.fit(c, splits, members=Seeds(members), state=ckpt.state, callback=run.callback)
    info = {
        "resumed_from": ckpt.step,
        "process_count": jax.process_count(),
        "accuracy": result.test.accuracy,
        "member_devices": len(result.state.model.layers[0].weight.sharding.device_set),
    }
    if devices > 1:
        mesh = make_mesh(devices, MEMBERS)
        stack = init_members([c.with_changes(seed=s) for s in range(members)], len(ds))
        state = shard_members(stack, mesh)
        from eqx_fmnist.parallel import replicate

        step = ef.compile_steps(state, replicate(ds, mesh), batch_size=32, num_steps=2, mesh=mesh)
        text = step.compiled.as_text()
        info["collectives"] = [name for name in COLLECTIVES if name in text]
        if jax.process_count() == 1:  # the ratios, of a stack small enough to compile fast
            info["costs"] = costs(devices, 2 * devices)
            info["shared_apart"] = shared_batches_apart(devices)
    leaves = [np.asarray(x) for x in jax.tree.leaves(eqx_arrays(to_local(result.model)))]
    if jax.process_index() == 0:
        np.savez(out, *leaves, info=np.array(repr(info)))


if __name__ == "__main__":
    main()
