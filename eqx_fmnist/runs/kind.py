"""A run's kind as a value: how a run of one kind trains, finishes and describes itself,
as Optax's `GradientTransformation` is an optimiser's `init` and `update` and an
[`ExportFormat`][eqx_fmnist.export.format.ExportFormat] is a format's.

Each kind is one small module (`one_run`: one model or an ensemble, `sweep_run`: a
grid ranked on validation, `cv_run`: cross-validation), and the registry is one tuple
in `runs/training.py`: a new kind is a module and a line there, and nothing else asks
which kind a run is. [`Training`][eqx_fmnist.runs.training.Training] hands its kind
the run as a [`Job`][eqx_fmnist.runs.kind.Job]; the kind returns its own outcome and
computes its own report, and [`RunFolder`][eqx_fmnist.runs.RunFolder] only writes.
"""

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

from ..config import TrainConfig
from ..data import FashionMNIST
from ..dataset import Splits
from ..hooks import Members
from ..intervals import Callback
from ..model import Model
from ..state import TrainState
from .writing import RunFolder

Outcome = TypeVar("Outcome")


@dataclasses.dataclass
class Job:
    """A run as its kind sees it: what [`Training`][eqx_fmnist.runs.training.Training]
    holds (a `Job` with the ways to start and run one).

    **Fields:** `folder` (the [`RunFolder`][eqx_fmnist.runs.RunFolder]: its path, plan,
    checkpoint and last saved step), `config`, `members` (the choice of an ensemble,
    sweep or cv, else `None`), `data`, `splits`, `state` and `start` (a resume's),
    `teacher` (the teacher's checkpoint, for a distilled run) and `teacher_model`."""

    folder: RunFolder
    config: TrainConfig
    members: Members | None
    data: FashionMNIST
    splits: Splits
    state: TrainState | None
    start: int
    teacher: Path | None
    teacher_model: Model | None

    @property
    def total_steps(self) -> int:
        return self.folder.plan.total_steps

    @property
    def length(self) -> str:
        """The run's length in words: `80 epochs (9,360 steps)`, or `400 steps`."""
        epochs = self.config.epochs
        steps = f"{self.total_steps:,} steps"
        return f"{epochs} epoch{'' if epochs == 1 else 's'} ({steps})" if epochs else steps

    def spread(self) -> str:
        """Members split over devices or on shared batches, in words."""
        config = self.config
        if self.members is None:
            return ""
        words = ", on shared batches" if config.shared_batches else ""
        if config.devices > 1:
            each = len(self.members.configs(config)) // config.devices
            words += f", {each} on each of {config.devices} devices"
        return words


def as_given(config: TrainConfig) -> TrainConfig:
    """The config a kind trains, when it needs nothing of its own."""
    return config


@dataclasses.dataclass(frozen=True)
class RunKind(Generic[Outcome]):
    """One kind of run: what it is called, which members' choices it trains, and its
    functions.

    **Fields:**

    - `name`: the kind (`"train"`, `"sweep"`, `"cv"`): the command that makes it, and
        what [`Training.resume`][eqx_fmnist.runs.training.Training.resume] checks.
    - `noun`: how the first line of a run's description names its folder.
    - `choices`: the [`Members`][eqx_fmnist.hooks.Members] kinds it trains (`"grid"`);
        empty for the kind that trains the rest (one model, an ensemble).
    - `train`: `train(job, callbacks)`, the run trained: its outcome.
    - `finish`: `finish(job, outcome)`, the outcome reported and written into the folder:
        the summary written to `summary.json`.
    - `what`: `what(job)`, what trains, in words.
    - `files`: the files it writes into the run folder besides the folder's own (the
        config, history, checkpoint, summary, calibration and `teacher.json`): what the
        folder's record lists as its, and what a new run refuses to write over when no
        record lists them.
    - `config`: the config a new run of this kind trains, from the one given (a sweep
        holds out a validation split to rank on). Defaults to the config as given.
    """

    name: str
    noun: str
    choices: frozenset[str]
    train: Callable[[Job, Sequence[Callback]], Outcome]
    finish: Callable[[Job, Outcome], dict[str, Any]]
    what: Callable[[Job], str]
    files: tuple[str, ...]
    config: Callable[[TrainConfig], TrainConfig] = as_given
