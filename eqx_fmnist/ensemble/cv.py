"""K-fold cross-validation as one compiled program: K members, member `i` trained on
every fold but fold `i` (its own row table over the shared training set, see
[`Subsets`][eqx_fmnist.subsets.Subsets]) and validated on fold `i`; the out-of-fold
probabilities of every training image come from the one member that never saw it."""

import dataclasses
from collections.abc import Sequence

import numpy as np

from ..config import TrainConfig
from ..data import FashionMNIST
from ..dataset import Splits, split_data
from ..evaluation import predict_proba
from ..hooks import TestProgram, test_scores
from ..intervals import Callback
from ..state import TrainState, select_members
from ..subsets import Subsets
from ..train import TrainResult, fit
from .choice import Folds


@dataclasses.dataclass
class CrossValidation:
    """What [`cross_validate`][eqx_fmnist.ensemble.cross_validate] returns.

    **Fields:**

    - `result`: the K members' [`TrainResult`][eqx_fmnist.train.TrainResult] (one
        program): `result.validation` pools the folds (out-of-fold loss and accuracy over
        every training image) with fold `i`'s figures in `validation.members[i]`; the
        history holds each fold's curve; `result.test` is the K members' ensemble.
    - `subsets`: the folds ([`kfold`][eqx_fmnist.subsets.kfold]).
    - `probabilities`: `(n, 10)` float32, each training image's probabilities from the
        member that never trained on it (out-of-fold; raw softmax).
    - `labels`: `(n,)`, the training set's given labels.
    """

    result: TrainResult
    subsets: Subsets
    probabilities: np.ndarray
    labels: np.ndarray

    @property
    def fold_accuracy(self) -> np.ndarray:
        """`(k,)`: each fold's accuracy, by the member that held it out."""
        assert self.result.validation is not None
        return np.array([m.accuracy for m in self.result.validation.members])

    @property
    def fold_loss(self) -> np.ndarray:
        assert self.result.validation is not None
        return np.array([m.loss for m in self.result.validation.members])

    @property
    def accuracy_mean(self) -> float:
        return float(self.fold_accuracy.mean())

    @property
    def accuracy_std(self) -> float:
        """The folds' standard deviation (n - 1)."""
        return float(self.fold_accuracy.std(ddof=1))


def cross_validate(
    config: TrainConfig,
    data: FashionMNIST | Splits,
    k: int = 5,
    *,
    callback: Callback | Sequence[Callback] | None = None,
    state: TrainState | None = None,
    test_program: TestProgram = test_scores,
) -> CrossValidation:
    """K-fold cross-validation of `config`, the K folds as members of one program.

    **Arguments:**

    - `config`: the recipe. Member `i` gets seed `config.seed + i`; the folds are dealt
        by `config.seed` too. It must hold out no validation split (the folds are the
        validation); a calibration split is held out of all folds.
    - `data`: the data set, or `Splits` already made.
    - `k`: folds. Defaults to `5`.
    - `callback`: called after each logging interval, as for [`fit`][eqx_fmnist.train.fit].
    - `state`: the K members' state to continue from (a cv checkpoint's); the folds are
        dealt again from `config.seed`, the same rows, so the run continues exactly.
    - `test_program`: how the folds' ensemble is tested, as for `fit`. Defaults to
        [`test_scores`][eqx_fmnist.hooks.test_scores].

    **Returns:**

    A [`CrossValidation`][eqx_fmnist.ensemble.CrossValidation].

    **Raises:**

    `ValueError` for `k` below 2, folds too small for a batch, or a validation split.

    !!! example

        ```python
        cv = ef.cross_validate(ef.TrainConfig(epochs=20), ef.load_fashion_mnist(), k=5)
        cv.accuracy_mean, cv.accuracy_std, cv.probabilities.shape  # (60000, 10)
        ```
    """
    splits = (
        data
        if isinstance(data, Splits)
        else split_data(data, calibration_size=config.calibration_size)
    )
    folds = Folds(k)
    subsets = folds.rows(len(splits.train), config)  # the rows fit deals, and their checks
    result = fit(
        config, splits, members=folds, callback=callback, state=state, test_program=test_program
    )
    assert subsets.held_out is not None
    probs = np.zeros((len(splits.train), 10), np.float32)
    for i, fold in enumerate(subsets.held_out):
        probs[fold] = np.asarray(
            predict_proba(
                select_members(result.model, i),
                splits.train.take(fold).images,
                policy=result.policy,
                tta=config.views,
            )
        )
    return CrossValidation(result, subsets, probs, np.asarray(splits.train.labels))
