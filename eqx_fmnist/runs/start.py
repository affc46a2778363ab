"""A run started or resumed, trained in its folder and finished: what `eqx-fmnist train`,
`sweep` and `cv` do, as the library calls a notebook makes too.

[`Run.new`][eqx_fmnist.runs.saved.Run.new] and
[`Run.resume`][eqx_fmnist.runs.saved.Run.resume] check everything that could refuse the
run before a file is written, and return a [`Training`][eqx_fmnist.runs.start.Training]:
its folder, config, members, data and (resuming) state, step and teacher.
[`Training.run`][eqx_fmnist.runs.start.Training.run] trains in the folder (checkpoints
on the folder's cadence, the first SIGINT or SIGTERM a clean stop) and finishes it (the
summary, the figures, the calibration; a sweep's table, cv's out-of-fold file).

!!! example

    ```python
    training = ef.runs.Run.new("runs/a", ef.TrainConfig(epochs=5))
    done = training.run()  # checkpoints, summary.json, figures
    # after an interruption (ef.runs.Interrupted), from its checkpoint:
    done = ef.runs.Run.resume("runs/a").run()
    ```
"""

import dataclasses
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax

from ..checkpoint import Checkpoint
from ..config import TrainConfig
from ..data import FashionMNIST, load_fashion_mnist
from ..dataset import Splits
from ..ensemble import (
    CrossValidation,
    Folds,
    Grid,
    SweepResult,
    cross_validate,
    member_seeds,
    sweep,
)
from ..intervals import Callback
from ..model import Model
from ..state import TrainState
from ..train import Members
from .files import write_cross_validation
from .folder import RunFolder, refuse_results
from .profile import IntervalProfiler, find_trace
from .run import RunResult, run_splits, train_run
from .summary import RunError

# The data, a function that loads them once the checks that need none pass, or `None`.
DataSource = FashionMNIST | Callable[[], FashionMNIST] | None

TEACHER_FOLDER = "teacher"
"""Where a distilled run without a teacher of its own trains one, inside its folder."""

Outcome = RunResult | SweepResult | CrossValidation
"""What a finished [`Training`][eqx_fmnist.runs.start.Training] trained: a run's
`RunResult`, a sweep's `SweepResult` or cross-validation's `CrossValidation`."""


@dataclasses.dataclass
class Finished:
    """What [`Training.run`][eqx_fmnist.runs.start.Training.run] returns: the `outcome`
    (see `Outcome`) and the `summary` written to `summary.json`."""

    outcome: Outcome
    summary: dict[str, Any]


@dataclasses.dataclass
class Training:
    """A run ready to train in its folder; make one with
    [`Run.new`][eqx_fmnist.runs.saved.Run.new] or
    [`Run.resume`][eqx_fmnist.runs.saved.Run.resume].

    **Fields:** `folder` (the [`RunFolder`][eqx_fmnist.runs.RunFolder]: its path, plan,
    checkpoint and last saved step), `config`, `members` (the choice of an ensemble,
    sweep or cv, else `None`), `data`, `splits`, `state` and `start` (a resume's), and
    `teacher` (the teacher's checkpoint, for a distilled run)."""

    folder: RunFolder
    config: TrainConfig
    members: Members | None
    data: FashionMNIST
    splits: Splits
    state: TrainState | None
    start: int
    teacher: Path | None
    teacher_model: Model | None
    scratch: tempfile.TemporaryDirectory | None = dataclasses.field(default=None, repr=False)
    """The temporary folder a process other than 0 of a multi-process run writes (it
    goes with the `Training`)."""

    @property
    def kind(self) -> str:
        """`"sweep"` (a `Grid`), `"cv"` (`Folds`) or `"train"` (one run or an ensemble)."""
        return kind_of(self.members)

    @property
    def total_steps(self) -> int:
        return self.folder.plan.total_steps

    @property
    def length(self) -> str:
        """The run's length in words: `80 epochs (9,360 steps)`, or `400 steps`."""
        epochs, steps = self.config.epochs, f"{self.total_steps:,} steps"
        return f"{epochs} epoch{'s' * (epochs != 1)} ({steps})" if epochs else steps

    def describe(self) -> str:
        """Where and what trains, as the command line says it first: the folder; what
        trains (a sweep's grid and seeds, cv's folds, else the length, precision, seeds,
        held-out images and teacher); the checkpoint cadence; the data; a resume's step."""
        folder, kind = self.folder, "run" if self.kind == "train" else self.kind
        resuming = f"\nresuming at step {self.start:,} of {self.total_steps:,}" * bool(self.start)
        return (
            f"{kind} folder {folder.folder}: {self._what()}, checkpoint every "
            f"{folder.checkpoint_every}\ndata: {self.data.source} ({self.data.origin}){resuming}"
        )

    def _what(self) -> str:
        config, total, members = self.config, self.total_steps, self.members
        count = 0 if members is None else len(members.configs(config))
        if isinstance(members, Grid):
            grid = "; ".join(
                f"{k} {', '.join(f'{v:g}' for v in vs)}" for k, vs in members.values.items()
            )
            seeds = ", ".join(map(str, member_seeds(config, members.seeds)))
            return (
                f"{grid}; seeds {seeds}: {count} members in one program, {total:,} steps "
                f"each, ranked on {config.validation_size:,} validation images"
            )
        if isinstance(members, Folds):
            return (
                f"{count} folds of {len(self.splits.train):,} images ({self.folder.num_train:,} "
                f"to train on each), {total:,} steps, one program"
            )
        who = f"seed {config.seed}"
        if members is not None:
            who = f"{count} members in one program (seeds {_seeds(members.configs(config))})"
        held = f", {config.calibration_size:,} images held out to calibrate"
        taught = f", distilled from {self.teacher}"
        return (
            f"{self.length}, {config.precision}, {who}{held * bool(config.calibration_size)}"
            f"{taught * (self.teacher is not None)}"
        )

    def run(self, callbacks: Sequence[Callback] = (), *, profile: bool = False) -> Finished:
        """Train in the folder, then finish it; `callbacks` are called after each
        logging interval, before the folder's own (history, checkpoint, stop).
        `profile`: trace intervals 2-3 ([`IntervalProfiler`][eqx_fmnist.runs.profile.IntervalProfiler])
        into `RUN/profile` ([`trace`][eqx_fmnist.runs.start.Training.trace]).

        **Raises:**

        [`Interrupted`][eqx_fmnist.runs.Interrupted] after the checkpoint of a stop
        asked for (a first SIGINT or SIGTERM, or `folder.request_stop()`): continue with
        `Run.resume(folder.checkpoint)`. `NonFiniteError`, as `fit` raises it.
        """
        traced = []
        if profile:
            traced = [
                IntervalProfiler(self.folder.folder / "profile", self.folder.plan.intervals())
            ]
        try:
            with self.folder as folder, folder.stop_on_signals():
                outcome = self._train([*callbacks, *traced, folder.callback])
                return Finished(outcome, self._finish(outcome))
        finally:
            for profiler in traced:
                profiler.stop()

    @property
    def trace(self) -> Path | None:
        """The Perfetto trace `run(profile=True)` wrote, if any."""
        return find_trace(self.folder.folder / "profile")

    def _train(self, callbacks: list[Callback]) -> Outcome:
        config, splits, state = self.config, self.splits, self.state
        if isinstance(self.members, Grid):
            grid, seeds = self.members.values, self.members.seeds
            return sweep(config, splits, grid, seeds, state=state, callback=callbacks)
        if isinstance(self.members, Folds):
            k = self.members.k
            return cross_validate(config, splits, k, callback=callbacks, state=state)
        return train_run(
            config,
            splits,
            members=self.members,
            state=state,
            callback=callbacks,
            teacher=self.teacher_model,
        )

    def _finish(self, outcome: Outcome) -> dict[str, Any]:
        if isinstance(outcome, SweepResult):
            return self.folder.finish_sweep(outcome)
        if isinstance(outcome, CrossValidation):
            summary = self.folder.finish(outcome.result, self.data)
            write_cross_validation(self.folder.folder, outcome)
            return summary
        return self.folder.finish(outcome.result, self.data, outcome.calibration)


def _seeds(configs: Sequence[TrainConfig]) -> str:
    """The members' seeds: `0-4` for a range of more than two, else `0,2,3`."""
    seeds = sorted({c.seed for c in configs})
    if seeds == list(range(seeds[0], seeds[-1] + 1)) and len(seeds) > 2:
        return f"{seeds[0]}-{seeds[-1]}"
    return ",".join(map(str, seeds))


@dataclasses.dataclass(frozen=True)
class Resumed:
    """What a resume continues from: the checkpoint's path and what it holds."""

    checkpoint: Path
    saved: Checkpoint


def start_training(
    out: str | os.PathLike,
    config: TrainConfig,
    members: Members | None,
    data: DataSource,
    *,
    teacher: tuple[Path, Model] | None = None,
    resume: Resumed | None = None,
    **folder_options: Any,
) -> Training:
    """Every check before a file is written, then the folder (what
    [`Run.new`][eqx_fmnist.runs.saved.Run.new] and
    [`Run.resume`][eqx_fmnist.runs.saved.Run.resume] share); in a multi-process run
    every process trains and only process 0 keeps the folder (the others write a
    temporary one)."""
    data = loaded(data)
    try:
        splits = run_splits(config, data)
        num_train = len(splits.train)
        if isinstance(members, Folds):
            num_train = members.rows(num_train, config).size  # the folds check the config
            if resume and (
                resume.saved.num_train != num_train
                or resume.saved.members != members.configs(config)
            ):
                raise ValueError(
                    f"{resume.checkpoint} was not written by cross-validation on these data."
                )
    except ValueError as e:
        raise RunError(str(e)) from None
    scratch = None
    if jax.process_index() != 0:
        scratch = tempfile.TemporaryDirectory(prefix="eqx-fmnist-")
        out, folder_options["overwrite"] = scratch.name, True
    step = resume.saved.step if resume else 0
    folder = RunFolder(
        out,
        config,
        num_train=num_train,
        start_step=step,
        members=members,
        teacher=teacher[0] if teacher else None,
        resume_from=resume.checkpoint.parent if resume else None,
        **folder_options,
    )
    state = resume.saved.state if resume else None
    path, model = teacher if teacher else (None, None)
    return Training(folder, config, members, data, splits, state, step, path, model, scratch)


def loaded(data: DataSource) -> FashionMNIST:
    """The data a `DataSource` gives: the data themselves, the function's, or (`None`)
    [`load_fashion_mnist`][eqx_fmnist.data.load_fashion_mnist]'s."""
    return data() if callable(data) else load_fashion_mnist() if data is None else data


def kind_of(members: Members | None) -> str:
    """What a run of `members` is: `"sweep"` (a `Grid`), `"cv"` (`Folds`) or `"train"`."""
    if isinstance(members, Grid):
        return "sweep"
    return "cv" if isinstance(members, Folds) else "train"


def teacher_training(
    out: str | os.PathLike,
    student: TrainConfig,
    *,
    teacher: TrainConfig | None = None,
    data: FashionMNIST | None = None,
    overwrite: bool = False,
    **folder_options: Any,
) -> Training | None:
    """The teacher a distilled run without one trains first (`eqx-fmnist train
    --distilled`), into `out/teacher`: `teacher` (defaults to
    [`TrainConfig.teacher()`][eqx_fmnist.config.TrainConfig.teacher], a CNN) with the
    student's seed and held-out splits, so that no image the student holds out teaches
    it. `None` when a finished teacher is there already (and not `overwrite`). A student
    folder that holds results is refused first, not minutes later. `folder_options`: as
    for [`RunFolder`][eqx_fmnist.runs.RunFolder].
    """
    out = Path(out)
    if not overwrite:
        refuse_results(out)
    where = out / TEACHER_FOLDER
    if (where / "summary.json").is_file() and not overwrite:
        return None
    config = (TrainConfig.teacher() if teacher is None else teacher).with_changes(
        seed=student.seed,
        validation_size=student.validation_size,
        calibration_size=student.calibration_size,
    )
    return start_training(where, config, None, data, overwrite=overwrite, **folder_options)
