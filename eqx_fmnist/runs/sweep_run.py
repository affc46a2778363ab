"""The kind of run `eqx-fmnist sweep` makes: every point of a grid x seeds as a member
of one program, ranked on a validation split; only the winner is tested."""

from collections.abc import Sequence
from typing import Any, cast

from ..config import TrainConfig
from ..ensemble import Grid, SweepResult, member_seeds, sweep
from ..ensemble.grid import SWEEP_VALIDATION
from ..intervals import Callback
from .files import write_sweep
from .kind import Job, RunKind
from .layout import CHECKPOINT_NAME


def _grid(job: Job) -> Grid:
    return cast(Grid, job.members)  # the registry gives this kind only grids


def _train(job: Job, callbacks: Sequence[Callback]) -> SweepResult:
    grid = _grid(job)
    return sweep(
        job.config, job.splits, grid.values, grid.seeds, state=job.state, callback=callbacks
    )


def _finish(job: Job, outcome: SweepResult) -> dict[str, Any]:
    """The final checkpoint (all members), the sweep's table, JSON and heatmap, the
    training curve (the members' mean), and `summary.json` (the sweep's JSON) last."""
    folder = job.folder
    folder.save_final(outcome.members.state)
    write_sweep(folder.folder, outcome)
    folder.save_figures({"training_curve.png": folder.training_curve()})
    return folder.write_summary({**outcome.to_dict(), "checkpoint": CHECKPOINT_NAME})


def _what(job: Job) -> str:
    grid = _grid(job)
    config = job.config
    count = len(grid.configs(config))
    values = "; ".join(f"{k} {', '.join(f'{v:g}' for v in vs)}" for k, vs in grid.values.items())
    seeds = ", ".join(map(str, member_seeds(config, grid.seeds)))
    return (
        f"{values}; seeds {seeds}: {count} members in one program{job.spread()}, "
        f"{job.total_steps:,} steps each, ranked on {config.validation_size:,} validation images"
    )


def _ranked_on_validation(config: TrainConfig) -> TrainConfig:
    """A sweep ranks on a validation split: 10,000 training images unless the config
    holds out some."""
    if config.validation_size:
        return config
    return config.with_changes(validation_size=SWEEP_VALIDATION)


SWEEP_RUN = RunKind(
    "sweep", "sweep", frozenset({Grid.kind}), _train, _finish, _what, _ranked_on_validation
)
"""A grid of hyperparameters x seeds, ranked on validation."""
