"""A run as the command line makes it: the splits its config asks for, the training, and
the calibration after it."""

import dataclasses
from collections.abc import Sequence

from ..calibration import Calibration, calibrate
from ..config import TrainConfig
from ..data import FashionMNIST, load_fashion_mnist
from ..dataset import Splits, split_data
from ..intervals import Callback
from ..model import Model
from ..state import TrainState
from ..train import Members, TrainResult, fit


def run_splits(config: TrainConfig, data: FashionMNIST | None = None) -> Splits:
    """The splits `config` asks for (its `validation_size` and `calibration_size`), made
    by [`split_data`][eqx_fmnist.dataset.split_data] from `data`; the library's one
    convenience load: `data` defaults to
    [`load_fashion_mnist()`][eqx_fmnist.data.load_fashion_mnist].

    !!! example

        ```python
        config = ef.TrainConfig(epochs=5, calibration_size=5000)
        result = ef.fit(config, ef.runs.run_splits(config))
        ```
    """
    data = load_fashion_mnist() if data is None else data
    return split_data(
        data, validation_size=config.validation_size, calibration_size=config.calibration_size
    )


@dataclasses.dataclass
class RunResult:
    """What [`train_run`][eqx_fmnist.runs.train_run] returns: the training's result and,
    when the run held out a calibration split, its calibration."""

    result: TrainResult
    calibration: Calibration | None


def train_run(
    config: TrainConfig,
    splits: Splits,
    *,
    members: Members | None = None,
    state: TrainState | None = None,
    callback: Callback | Sequence[Callback] | None = None,
    teacher: Model | None = None,
) -> RunResult:
    """Train on `splits` ([`fit`][eqx_fmnist.train.fit]: one run, or `members`) and then,
    if the splits hold a calibration set, calibrate the model or the ensemble on it
    ([`calibrate`][eqx_fmnist.calibration.calibrate]). A `teacher` is distilled (see
    `fit`)."""
    result = fit(config, splits, members=members, state=state, callback=callback, teacher=teacher)
    calibration = None
    if splits.calibration is not None:
        config = result.config
        calibration = calibrate(
            result.model,
            splits.train,
            splits.calibration,
            policy=result.policy,
            coverage=config.coverage,
            per_class=config.per_class_sets,
            tta=config.views,
        )
    return RunResult(result, calibration)
