"""The kind of run `eqx-fmnist sweep` makes: every point of a grid x seeds as a member
of one program, ranked on a validation split; only the winner is tested."""

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np

from ..config import TrainConfig
from ..ensemble import Grid, SweepResult, member_seeds, sweep
from ..ensemble.grid import SWEEP_VALIDATION
from ..fileio import atomic_write
from ..intervals import Callback
from ..plots import plot_heatmap, save_figure
from .kind import Job, RunKind
from .layout import CHECKPOINT_NAME

SWEEP_FILES = ("sweep.md", "sweep.json", "sweep_heatmap.png")
"""What a sweep writes besides its checkpoint, summary and training curve."""


def _grid(job: Job) -> Grid:
    return cast(Grid, job.members)  # the registry gives this kind only grids


def sweep_heatmap(result: SweepResult):
    """A figure of a sweep's mean validation accuracy over the two swept fields with the
    most values (the best over any others)."""
    grid = result.grid
    seeds = result.seeds
    rows_name, *rest = sorted(grid, key=lambda n: -len(grid[n]))[:2]
    cols_name = rest[0] if rest else None
    rows = list(grid[rows_name])
    cols: list[float | None] = list(grid[cols_name]) if cols_name else [None]
    table = np.full((len(rows), len(cols)), np.nan)
    accuracy = result.validation_accuracy
    means = accuracy.mean(axis=1)
    for i, p in enumerate(result.points):
        r = rows.index(p[rows_name])
        c = 0 if cols_name is None else cols.index(p[cols_name])
        table[r, c] = np.fmax(table[r, c], means[i])
    # Seed-to-seed spread: differences smaller than it are noise, so the colour scale
    # spans at least four of it (and at least one point of accuracy).
    spread = float(accuracy.std(axis=1, ddof=1).mean()) if len(seeds) > 1 else 0.0
    title = f"Sweep: mean validation accuracy over {len(seeds)} seeds"
    return plot_heatmap(
        table,
        row_labels=[f"{v:g}" for v in rows],
        col_labels=["" if v is None else f"{v:g}" for v in cols],
        row_name=rows_name,
        col_name=cols_name or "",
        title=title + (f" (seed std {spread:.4f})" if spread else ""),
        min_span=max(0.01, 4 * spread),
    )


def write_sweep(folder: str | os.PathLike, result: SweepResult) -> list[Path]:
    """`sweep.md`, `sweep.json` and `sweep_heatmap.png` in `folder` (created if needed,
    each written atomically); their paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    texts = (result.to_markdown(), json.dumps(result.to_dict(), indent=2) + "\n")
    for name, text in zip(SWEEP_FILES, texts, strict=False):
        with atomic_write(folder / name, "w") as f:
            f.write(text)
    save_figure(sweep_heatmap(result), folder / SWEEP_FILES[2])
    return [folder / name for name in SWEEP_FILES]


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
    "sweep",
    "sweep",
    frozenset({Grid.kind}),
    _train,
    _finish,
    _what,
    ("training_curve.png", *SWEEP_FILES),
    _ranked_on_validation,
)
"""A grid of hyperparameters x seeds, ranked on validation."""
