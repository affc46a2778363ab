"""Many devices with `jax.sharding`, on one mesh axis over them.

One model: the `"data"` axis. The model and optimiser state are replicated on every
device; each batch is split along its batch axis, one slice per device, and XLA's SPMD
partitioner inserts the all-reduce of the gradients. Many models (an ensemble, a
sweep's points, the folds): the `"members"` axis. The stacked state's leading axis is
split over the devices, whole members on each, the data replicated: every device trains
its own members on whole batches, and nothing crosses devices until their answers are
combined. The same code runs on one CPU, on the 8 simulated devices of
`XLA_FLAGS=--xla_force_host_platform_device_count=8`, on the GPUs of one machine, and,
after `jax.distributed.initialize()` in every process, on many machines.

!!! example "Launching on several hosts"

    Every process runs the same program. Before anything else touches JAX:

    ```python
    from eqx_fmnist.parallel import initialize

    initialize(
        coordinator_address="10.0.0.1:1234",  # process 0's host and a free port
        num_processes=4,
        process_id=int(os.environ["RANK"]),
    )
    ```

    Under Slurm, Open MPI or on Cloud TPU, `initialize()` with no arguments reads all
    three from the environment. Then `fit(config, splits)` with `config.devices` equal
    to `jax.device_count()` trains over every device of every process; only process 0
    should write files (`jax.process_index() == 0`).
"""

import os
from collections.abc import Sequence
from typing import TypeVar

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

AXIS = "data"
MEMBERS = "members"


def make_mesh(
    devices: int | Sequence[jax.Device] | None = None,  # pyright: ignore[reportInvalidTypeForm]
    axis: str = AXIS,
) -> Mesh:
    """A 1-D mesh with axis `axis`: `"data"` (one model's batch split over the
    devices) or `"members"` (many models, whole members on each device).

    **Arguments:**

    - `devices`: how many devices (the first ones of `jax.devices()`, which spans every
        process after `jax.distributed.initialize`), or the devices themselves. Defaults
        to all devices.
    - `axis`: the axis's name. Defaults to `"data"`.

    **Raises:**

    `ValueError` when more devices are asked for than exist, or none, or (in a
    multi-process run) fewer than all.
    """
    available = jax.devices()
    if devices is None:
        chosen = available
    elif isinstance(devices, bool):
        raise TypeError(f"`devices` must be a count or a list of devices, but got {devices}.")
    elif isinstance(devices, int):
        if not 1 <= devices <= len(available):
            raise ValueError(
                f"asked for {devices} devices, but {len(available)} exist "
                f"({available[0].platform}); choose 1..{len(available)}. For simulated CPU "
                "devices set XLA_FLAGS=--xla_force_host_platform_device_count=N before "
                "importing JAX."
            )
        if jax.process_count() > 1 and devices != len(available):
            raise ValueError(
                f"asked for {devices} devices, but a run over {jax.process_count()} "
                f"processes trains on all {len(available)} devices of all of them: "
                f"devices={len(available)} (--devices {len(available)})."
            )
        chosen = available[:devices]
    else:
        chosen = list(devices)
        if not chosen:
            raise ValueError("`devices` is an empty list; give at least one device.")
    return Mesh(np.array(chosen), (axis,))


def _near_multiples(count: int, n: int) -> str:
    """The multiples of `n` on either side of `count`, for an error's advice."""
    lower = count - count % n
    return ", ".join(str(m) for m in (lower, lower + n) if m > 0)


def check_divisible(batch_size: int, mesh: Mesh) -> None:
    """Raise `ValueError` unless `batch_size` splits evenly over the mesh's devices."""
    n = mesh.size
    if batch_size % n:
        raise ValueError(
            f"`batch_size` {batch_size} does not split evenly over {n} devices; "
            f"use a multiple of {n} (e.g. {_near_multiples(batch_size, n)})."
        )


def check_members_divide(members: int, devices: int) -> None:
    """`ValueError` unless `members` split into whole members per device."""
    if members % devices:
        raise ValueError(
            f"{members} members do not split evenly over {devices} devices (whole members "
            f"on each): train a multiple of {devices} members (e.g. "
            f"{_near_multiples(members, devices)}), or on devices that divide {members}."
        )


def shard_members(tree, mesh: Mesh):
    """Every array of `tree` (a stack of members, or each member's row table) split on
    its leading axis over the mesh's `"members"` axis; each process passes the whole
    stack (it made every member), and keeps the members of its own devices."""
    sharding = NamedSharding(mesh, PartitionSpec(MEMBERS))

    def put(x):
        if not isinstance(x, jax.Array | np.ndarray):
            return x
        if jax.process_count() == 1:
            return jax.device_put(x, sharding)
        whole = np.asarray(x)
        return jax.make_array_from_callback(whole.shape, sharding, lambda i: whole[i])

    return jax.tree.map(put, tree)


def batch_sharding(mesh: Mesh, ndim: int = 2, axis: int = 0) -> NamedSharding:
    """Split dimension `axis` of an `ndim`-dimensional array over the devices."""
    spec: list[str | None] = [None] * ndim
    spec[axis] = AXIS
    return NamedSharding(mesh, PartitionSpec(*spec))


def replicated(mesh: Mesh) -> NamedSharding:
    """The same full copy on every device of `mesh`."""
    return NamedSharding(mesh, PartitionSpec())


def replicate(tree, mesh: Mesh):
    """Put every array of `tree` on every device of `mesh` (works across processes:
    each process must pass the same values)."""
    sharding = replicated(mesh)

    def put(x):
        if not isinstance(x, jax.Array | np.ndarray):
            return x
        if jax.process_count() == 1:
            return jax.device_put(x, sharding)
        return jax.make_array_from_process_local_data(sharding, np.asarray(x))

    return jax.tree.map(put, tree)


_Shared = TypeVar("_Shared")
_Own = TypeVar("_Own")


def place(
    shared: _Shared, own: _Own, *, devices: int, members: bool
) -> tuple[Mesh | None, _Shared, _Own]:
    """`(mesh, shared, own)` over `devices` (and every process): the data (`shared`)
    replicated; a state and its row tables (`own`) replicated for one model, whose
    batch the `"data"` mesh splits, or split on their leading axis for `members` (a
    `"members"` mesh: whole members on each device). On one device, as they are."""
    if devices == 1 and jax.process_count() == 1:
        return None, shared, own
    mesh = make_mesh(devices, MEMBERS if members else AXIS)
    shared = jax.block_until_ready(replicate(shared, mesh))
    own = shard_members(own, mesh) if members else replicate(own, mesh)
    return mesh, shared, jax.block_until_ready(own)


def to_local(tree):
    """This process's full copy of every array in `tree`.

    After multi-host training the state's arrays span every process; saving, plotting or
    predicting on one process wants its local copy: a replicated array's own copy, and
    members split over processes gathered (a collective: every process calls it at the
    same point, as every process runs the same run). Arrays that are already fully
    addressable are returned as they are.
    """
    from jax.experimental import multihost_utils

    def local(x):
        if not isinstance(x, jax.Array) or x.is_fully_addressable:
            return x
        if x.sharding.is_fully_replicated:
            return x.addressable_data(0)
        return jax.numpy.asarray(multihost_utils.process_allgather(x, tiled=True))

    return jax.tree.map(local, tree)


def agreed(flag: bool) -> bool:
    """Whether any process says `flag` (itself where there is one process): a decision
    every process takes together, as one that ends in a collective must be."""
    if jax.process_count() == 1:
        return flag
    from jax.experimental import multihost_utils

    return bool(np.any(multihost_utils.process_allgather(np.array([flag]))))


HEARTBEAT_S = 10


REFUSED_SETTINGS = {
    "JAX_ENABLE_X64": "a run computes in 32 bits and draws its batches and moves from "
    "32-bit keys (64-bit JAX would draw others than its config names)",
    "JAX_DISABLE_JIT": "a run compiles its programs ahead of time, which JAX cannot do "
    "with jit disabled",
}
"""JAX's settings a command refuses in one line (`start_jax`), and why."""


def start_jax(distributed: bool = False, *, otherwise: str = "") -> None:
    """JAX's start for a command: join a multi-process run first where asked
    ([`initialize`][eqx_fmnist.parallel.initialize], `otherwise` its advice), then, where
    `JAX_PLATFORMS` names the backends, start them: `ValueError` in one line naming the
    variable when they cannot start (a `cuda` with no GPU ends in a bare
    `AssertionError` deep in JAX otherwise). Without `JAX_PLATFORMS` nothing starts
    here: a command that needs no device pays for none. `ValueError` too for a setting
    of `REFUSED_SETTINGS`."""
    if distributed:
        initialize(otherwise=otherwise)
    for setting, why in REFUSED_SETTINGS.items():
        if getattr(jax.config, setting.lower()):
            raise ValueError(f"{setting} is set, but {why}: unset it.")
    named = os.environ.get("JAX_PLATFORMS", "")
    if not named:
        return
    try:
        jax.devices()
    except (RuntimeError, AssertionError) as e:
        why = " ".join(str(e).split("(set JAX_PLATFORMS")[0].split()) or "no such device here"
        raise ValueError(
            f"JAX_PLATFORMS={named!r} names a backend JAX cannot start ({why}): unset it, "
            "or name one this machine has (cpu)."
        ) from None


def initialize(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    *,
    heartbeat_s: int = HEARTBEAT_S,
    timeout_s: int = 300,
    otherwise: str = "or pass coordinator_address, num_processes and process_id",
) -> tuple[int, int]:
    """Join a multi-process run: `jax.distributed.initialize` with what a CPU needs and
    a short heartbeat. Call it in every process before anything else runs on JAX.

    With no arguments, JAX reads the three from a job scheduler's environment (Slurm's
    `SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_STEP_NODELIST` and `SLURM_JOB_ID`; Open MPI;
    Cloud TPU). On CPUs the processes' collectives run over Gloo.

    **Arguments:**

    - `coordinator_address`: process 0's `host:port`.
    - `num_processes`, `process_id`: how many processes, and this one's index.
    - `heartbeat_s`: a process that stops answering for this long (its host lost, the
        process frozen) fails the run. A process that dies outright fails it at once:
        the next collective of the others raises `jax.errors.JaxRuntimeError`.
    - `timeout_s`: how long to wait for every process to join.
    - `otherwise`: what the error without a scheduler says to do instead, in the
        caller's words (the command line names its flag).

    **Returns:**

    `(process_index, process_count)`.

    **Raises:**

    `ValueError` when no argument is given and no scheduler is found, or when JAX
    already ran something in this process.
    """
    # CPU devices reach each other over Gloo (a GPU's collectives are not affected).
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    try:
        jax.distributed.initialize(
            coordinator_address,
            num_processes,
            process_id,
            initialization_timeout=timeout_s,
            heartbeat_timeout_seconds=heartbeat_s,
        )
    except RuntimeError as e:  # JAX's words: "... must be called before any JAX calls"
        raise ValueError(
            "a multi-process run must be joined before anything runs on JAX (an array, "
            "`jax.devices()`): call `initialize()` first thing in every process."
        ) from e
    except ValueError as e:  # JAX's words: "coordinator_address should be defined."
        if None in (coordinator_address, num_processes, process_id):
            raise ValueError(
                "no job scheduler found to start a multi-process run (Slurm's SLURM_* or "
                f"Open MPI's OMPI_* variables): start every process under srun or mpirun, "
                f"{otherwise}."
            ) from e
        raise
    return jax.process_index(), jax.process_count()


def is_lost_process(e: BaseException) -> bool:
    """Whether `e` is a collective failing because another process is gone (its Gloo
    connection closed, or the coordinator's heartbeat missed)."""
    text = str(e)
    return (
        isinstance(e, jax.errors.JaxRuntimeError)
        and jax.process_count() > 1
        and any(s in text for s in ("Gloo", "closed by peer", "UNAVAILABLE", "heartbeat"))
    )
