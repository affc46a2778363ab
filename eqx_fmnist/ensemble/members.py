"""Members: one run per seed, stacked on a leading axis and trained by
[`fit`][eqx_fmnist.train.fit] as one compiled program (which first checks that they fit
in memory: [`check_memory`][eqx_fmnist.intervals.check_memory])."""

from collections.abc import Sequence

from ..config import TrainConfig
from ..dataset import Splits
from ..intervals import Callback
from ..state import TrainState
from ..train import TrainResult, fit
from .choice import Seeds, member_seeds


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
    return fit(
        config,
        splits,
        members=members,
        state=state,
        callback=callback,
        eval_batch_size=eval_batch_size,
    )
