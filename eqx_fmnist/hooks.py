"""What [`fit`][eqx_fmnist.train.fit] takes beside a config and the data: a choice of
[`Members`][eqx_fmnist.hooks.Members] (which models train as one program, on which rows,
how each is validated), the run's [`Evaluation`][eqx_fmnist.hooks.Evaluation] (its
precision, views, batch size and mesh, called on the validation split after each
interval) and the end-of-run [`TestProgram`][eqx_fmnist.hooks.TestProgram], a hook `fit`
makes with its steps' programs and calls once on the trained model. The default
scores the test set ([`test_scores`][eqx_fmnist.hooks.test_scores]); a run folder's test
report plugs in its own program, which scores the test set and its moved views at once,
so that `fit` and a run folder give one test score by one program.
"""

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
from jax.sharding import Mesh

from .config import TrainConfig
from .dataset import ArrayDataset
from .evaluation import EvalResult, evaluate
from .model import Model
from .parallel import AXIS, to_local
from .precision import Policy
from .subsets import Subsets


class Members:
    """A choice of members: which models train as one program, on which rows, and how
    each is validated. [`fit`][eqx_fmnist.train.fit] takes one as `members`; the kinds
    are in [`eqx_fmnist.ensemble`](ensemble.md) (`Seeds`, `Grid`, `Folds`, `Bootstrap`,
    `Listed`), and a checkpoint records which (`to_dict`), so that a resume rebuilds it.
    """

    kind: ClassVar[str] = ""

    def configs(self, config: TrainConfig) -> tuple[TrainConfig, ...]:
        """Each member's config, from the run's `config` (checked to train as one
        program: [`check_members`][eqx_fmnist.state.check_members])."""
        raise NotImplementedError

    def rows(self, num_train: int, config: TrainConfig) -> Subsets | None:
        """The rows of the training set each member trains on; `None`: all of them."""
        return None

    def validator(
        self,
        evaluated: Callable[[ArrayDataset | None, Model], EvalResult | None],
        train: ArrayDataset,
        validation: ArrayDataset | None,
        rows: Subsets | None,
    ) -> Callable[[Model], EvalResult | None]:
        """What `fit` evaluates after each interval, given `evaluated(dataset, model)`:
        by default the validation split."""
        return lambda model: evaluated(validation, model)

    def answering(self, count: int, summary: Callable[[], dict[str, Any]]) -> list[int] | None:
        """Which of the `count` trained members answer for the run (its evaluation,
        answers and exports), given its finished `summary()`: all of them (`None`) but
        where the choice picks some (a sweep's winner)."""
        return None

    def to_dict(self) -> dict[str, Any]:
        """What a checkpoint records of the choice (`kind` and its numbers)."""
        return {"kind": self.kind}


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """How `fit` evaluates a model on a dataset: its `policy`, test-time `views`,
    `batch_size` and `mesh`. Called as `evaluation(dataset, model)`: every example of
    `dataset` (`None` for none); over a `"data"` mesh each batch is split; members
    split over processes are gathered first (every process evaluates them all: the
    numbers are small, the gather is one)."""

    policy: Policy
    views: tuple | None
    batch_size: int
    mesh: Mesh | None = None

    def __call__(self, ds: ArrayDataset | None, model: Model) -> EvalResult | None:
        if ds is None:
            return None
        data_mesh = self.mesh if self.mesh is not None and self.mesh.axis_names == (AXIS,) else None
        if self.mesh is not None and data_mesh is None:
            model = to_local(model)
        return evaluate(
            model,
            ds,
            policy=self.policy,
            batch_size=self.batch_size,
            mesh=data_mesh,
            tta=self.views,
        )


TestRun = Callable[[Model], tuple[EvalResult, np.ndarray | None]]
"""A compiled end-of-run program: `run(model)` gives the test figures and what else the
program computed beside them (a run report's logits), or `None`."""


TestProgram = Callable[[Model, ArrayDataset, Evaluation], TestRun]
"""What [`fit`][eqx_fmnist.train.fit] evaluates the test set with when training ends:
called as `program(like, test, evaluation)` as the steps compile, with a model shaped
like the trained one (`like`: its arrays are only looked at), the test set and the run's
[`Evaluation`][eqx_fmnist.hooks.Evaluation]; returns the
[`TestRun`][eqx_fmnist.hooks.TestRun] `fit` calls on the trained model.
[`test_scores`][eqx_fmnist.hooks.test_scores] is the default; a run folder's is its test
report's program ([`report_program`][eqx_fmnist.runs.report.report_program]), which
scores the test set and its moved views at once."""


def test_scores(like: Model, test: ArrayDataset, evaluation: Evaluation) -> TestRun:
    """`fit`'s default [`TestProgram`][eqx_fmnist.hooks.TestProgram]: the test loss and
    accuracy by [`evaluate`][eqx_fmnist.evaluation.evaluate] (each member's too), and
    nothing beside them."""

    def run(model: Model) -> tuple[EvalResult, np.ndarray | None]:
        scores = evaluation(test, model)
        assert scores is not None  # a test set is given
        return scores, None

    return run
