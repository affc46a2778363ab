"""Hyperparameter sweeps: every grid point x seed as a member of one program, ranked on
a validation split."""

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..config import TrainConfig
from ..dataset import Splits
from ..evaluation import EvalResult, evaluate
from ..intervals import Callback
from ..state import TrainState, select_members
from ..train import TrainResult, fit
from .choice import Grid, grid_configs


@dataclasses.dataclass
class SweepResult:
    """What [`sweep`][eqx_fmnist.ensemble.sweep] returns: the grid, every member's
    validation accuracy, the winner, and the winner's test results.

    **Fields:**

    - `grid`: the swept values, by field name.
    - `seeds`: the seeds each point was trained with.
    - `points`: each grid point's values, point-major as the members are.
    - `members`: the [`TrainResult`][eqx_fmnist.train.TrainResult] of all points x
        seeds (its `state` holds every trained member; `members.test` is `None`: the
        test set is not looked at while choosing).
    - `best`: the index of the winning point (highest mean validation accuracy).
    - `test`: the test result of the winner's seeds: their ensemble's, each seed's in
        `test.members`.
    """

    grid: dict[str, list[float]]
    seeds: tuple[int, ...]
    points: list[dict[str, float]]
    members: TrainResult
    best: int
    test: EvalResult

    @property
    def validation_accuracy(self) -> np.ndarray:
        """Shape `(points, seeds)`: every member's final validation accuracy."""
        assert self.members.validation is not None, "a sweep ranks on a validation split"
        accs = [v.accuracy for v in self.members.validation.members]
        return np.array(accs).reshape(len(self.points), len(self.seeds))

    @property
    def best_point(self) -> dict[str, float]:
        return self.points[self.best]

    def ranking(self) -> list[int]:
        """Point indices, best mean validation accuracy first."""
        return _ranking(self.validation_accuracy)

    def top_members(self, k: int) -> list[int]:
        """The `k` members (indices into `members.configs`) with the highest validation
        accuracy: a validation-chosen ensemble."""
        flat = self.validation_accuracy.reshape(-1)
        return [int(i) for i in np.argsort(-flat, kind="stable")[:k]]

    def to_dict(self) -> dict[str, Any]:
        accs = self.validation_accuracy
        return {
            "grid": self.grid,
            "seeds": list(self.seeds),
            "points": [
                {
                    **p,
                    "validation_accuracy": list(map(float, accs[i])),
                    "validation_mean": float(accs[i].mean()),
                }
                for i, p in enumerate(self.points)
            ],
            "best": {**self.best_point, "index": self.best},
            "test_accuracy": [t.accuracy for t in self.test.members],
            "test_ensemble_accuracy": self.test.accuracy,
            "config": self.members.config.to_dict(),
            "compile_seconds": self.members.compile_seconds,
            "train_seconds": self.members.train_seconds,
        }

    def to_markdown(self) -> str:
        """The ranked table: one row per point, validation accuracy per seed and mean."""
        accs = self.validation_accuracy
        names = list(self.grid)
        head = ["rank", *names, *(f"seed {s}" for s in self.seeds), "mean"]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for rank, i in enumerate(self.ranking(), 1):
            cells = [str(rank), *(f"{self.points[i][n]:g}" for n in names)]
            cells += [f"{a:.4f}" for a in accs[i]] + [f"**{accs[i].mean():.4f}**"]
            lines.append("| " + " | ".join(cells) + " |")
        best = ", ".join(f"{k}={v:g}" for k, v in self.best_point.items())
        tests = ", ".join(f"{t.accuracy:.4f}" for t in self.test.members)
        assert self.members.validation is not None, "a sweep ranks on a validation split"
        lines += [
            "",
            f"Validation accuracy on {self.members.validation.count:,} held-out training "
            f"images, after {self.members.state.global_step:,} steps. Winner: {best}; "
            f"its test accuracy (seeds {', '.join(map(str, self.seeds))}): {tests}; their "
            f"ensemble {self.test.accuracy:.4f}.",
        ]
        return "\n".join(lines) + "\n"


SWEEP_VALIDATION = 10_000
"""Training images a sweep holds out to rank on, unless told otherwise."""


def sweep(
    config: TrainConfig,
    splits: Splits,
    grid: Mapping[str, Sequence[Any]],
    seeds: int | Sequence[int] = 2,
    *,
    state: TrainState | None = None,
    callback: Callback | Sequence[Callback] | None = None,
    eval_batch_size: int = 1000,
) -> SweepResult:
    """Train every grid point x seed as a member of one compiled program, rank the points
    by validation accuracy, and evaluate the winner (its seeds) on the test set.

    A thin wrapper: the grid's member configs, the memory check, then
    [`fit`][eqx_fmnist.train.fit] on the members' stacked state without the test set.

    **Arguments:**

    - `config`: the settings the grid does not name.
    - `grid`: lists of values for some of `learning_rate`, `weight_decay` and
        `label_smoothing`; these are arrays in the training state, so the grid needs
        one compile. Other fields are refused (see
        [`grid_configs`][eqx_fmnist.ensemble.grid_configs]).
    - `splits`: [`Splits`][eqx_fmnist.dataset.Splits] with a validation set, the
        training images held out to rank on (`ef.split_data(data,
        validation_size=SWEEP_VALIDATION)`: 10,000); the test set is never used to
        choose.
    - `seeds`: a count or the seeds of each point. Defaults to `2`.
    - `state`, `callback`, `eval_batch_size`: as for [`fit`][eqx_fmnist.train.fit].

    **Returns:**

    A [`SweepResult`][eqx_fmnist.ensemble.SweepResult]; `runs.write_sweep(folder, result)` writes
    its table, JSON and heatmap.

    !!! example

        ```python
        grid = {"learning_rate": [1e-3, 3e-3], "weight_decay": [1e-2, 5e-2]}
        splits = ef.split_data(ef.load_fashion_mnist(), validation_size=10_000)
        result = ef.sweep(ef.TrainConfig(epochs=10), splits, grid, seeds=2)
        table = result.to_markdown()  # the ranked table, as `sweep.md` holds it
        ```
    """
    if not isinstance(splits, Splits) or splits.validation is None:
        raise ValueError(
            "a sweep ranks on a validation split: pass `ef.split_data(data, "
            "validation_size=10_000)` as `splits`."
        )
    config = config.with_changes(validation_size=len(splits.validation))
    points, seeds, configs = grid_configs(config, grid, seeds)
    unseen = dataclasses.replace(splits, test=None)  # the test set is not for choosing
    members = fit(
        config,
        unseen,
        members=Grid(grid, seeds),
        state=state,
        callback=callback,
        eval_batch_size=eval_batch_size,
    )
    assert members.validation is not None and splits.test is not None
    accuracy = np.array([v.accuracy for v in members.validation.members]).reshape(len(points), -1)
    best = int(_ranking(accuracy)[0])
    winners = select_members(members.model, [best * len(seeds) + j for j in range(len(seeds))])
    test = evaluate(winners, splits.test, policy=members.policy, batch_size=eval_batch_size)
    grid = {k: list(v) for k, v in grid.items()}
    return SweepResult(grid, seeds, points, members, best, test)


def _ranking(accuracy: np.ndarray) -> list[int]:
    """Point indices by mean validation accuracy over seeds, best first (stable)."""
    return [int(i) for i in np.argsort(-accuracy.mean(axis=1), kind="stable")]
