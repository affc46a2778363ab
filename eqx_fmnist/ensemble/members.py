"""Members: one run per seed, stacked on a leading axis and trained by
[`fit`][eqx_fmnist.train.fit] as one compiled program; and whether they fit in memory."""

import os
from collections.abc import Sequence

import jax

from ..config import TrainConfig
from ..dataset import Splits
from ..intervals import Callback
from ..state import TrainState, state_bytes
from ..train import TrainResult, fit
from .choice import Seeds, member_seeds

MEMORY_FRACTION = 0.8
"""Members may use at most this fraction of the device's memory (see
[`check_memory`][eqx_fmnist.ensemble.check_memory])."""


def _device_memory(device: jax.Device) -> tuple[int, str]:  # pyright: ignore[reportInvalidTypeForm]
    stats = device.memory_stats() or {}
    if "bytes_limit" in stats:
        return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0)), "free"
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")  # XLA:CPU: host RAM
    return int(pages), "of host memory"


def check_memory(
    configs: Sequence[TrainConfig],
    num_train: int,
    *,
    data_bytes: int = 0,
    device: jax.Device | None = None,  # pyright: ignore[reportInvalidTypeForm]
) -> int:
    """Estimate the device memory the members need and raise before anything is
    allocated or compiled if it exceeds `MEMORY_FRACTION` of what the device has.

    The estimate counts, per member, four copies of the state (the state, its
    successor, the gradients and Adam's update) and the forward and backward
    activations of one batch; plus the data set once.

    **Returns:**

    The estimate in bytes.

    **Raises:**

    `ValueError` naming the estimate, the device and how many members would fit.
    """
    config = configs[0]
    per_member = 4 * state_bytes(config, num_train)
    per_member += 2 * 4 * config.batch_size * (784 + 3 * (sum(config.hidden_sizes) + 10))
    need = len(configs) * per_member + data_bytes
    device = device or jax.local_devices()[0]
    have, kind = _device_memory(device)
    if need > MEMORY_FRACTION * have:
        fits = max(0, int((MEMORY_FRACTION * have - data_bytes) // per_member))
        if len(configs) == 1:
            raise ValueError(
                f"the model needs about {need / 2**30:.1f} GiB on {device}, more than "
                f"{MEMORY_FRACTION:.0%} of its {have / 2**30:.1f} GiB {kind}; make it smaller "
                "(hidden_sizes, batch_size)."
            )
        raise ValueError(
            f"{len(configs):,} members need about {need / 2**30:.1f} GiB on {device}, more "
            f"than {MEMORY_FRACTION:.0%} of its {have / 2**30:.1f} GiB {kind}; train at most "
            f"{fits:,} members at once (fewer seeds or grid points per call)."
        )
    return need


def fit_ensemble(
    config: TrainConfig,
    splits: Splits,
    seeds: int | Sequence[int] = (0, 1, 2, 3, 4),
    *,
    state: TrainState | None = None,
    callback: Callback | Sequence[Callback] | None = None,
    eval_batch_size: int = 1000,
) -> TrainResult:
    """Train one member per seed, all in one compiled program, and evaluate each member
    and their ensemble (the mean of their probabilities) on the whole test set.

    A thin wrapper: the member configs, the memory check, then
    [`fit`][eqx_fmnist.train.fit] on their stacked state.

    **Arguments:**

    - `config`: the run every member makes.
    - `splits`: the run's [`Splits`][eqx_fmnist.dataset.Splits], as for `fit`.
    - `seeds`: the members' seeds, or how many (`n`: `config.seed` to
        `config.seed + n - 1`). Defaults to `(0, 1, 2, 3, 4)`.
    - `state`, `callback`, `eval_batch_size`: as for
        [`fit`][eqx_fmnist.train.fit].

    **Returns:**

    A [`TrainResult`][eqx_fmnist.train.TrainResult] whose state stacks the members;
    `result.test` is the ensemble's and `result.test.members[i]` member `i`'s. Member
    `i` is the run `fit(config.with_changes(seed=seeds[i]))` would have made: the same
    batches, and the same parameters up to the rounding of batched matrix products.

    !!! example

        ```python
        splits = ef.split_data(ef.load_fashion_mnist())
        result = ef.fit_ensemble(ef.TrainConfig(), splits, seeds=5)
        result.test.accuracy_mean, result.test.accuracy  # members' mean, the ensemble
        ```
    """
    members = Seeds(member_seeds(config, seeds))
    check_memory(members.configs(config), len(splits.train))
    return fit(
        config,
        splits,
        members=members,
        state=state,
        callback=callback,
        eval_batch_size=eval_batch_size,
    )
