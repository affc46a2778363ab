"""The write side of `runs/`: a run started or resumed, trained in its folder and
finished, what `eqx-fmnist train`, `sweep` and `cv` do, as the library calls a notebook
makes too.

[`Training.new`][eqx_fmnist.runs.training.Training.new] and
[`Training.resume`][eqx_fmnist.runs.training.Training.resume] check everything that
could refuse the run before a file is written, and return a
[`Training`][eqx_fmnist.runs.training.Training]: its folder, config, members, data and
(resuming) state, step and teacher.
[`Training.run`][eqx_fmnist.runs.training.Training.run] trains in the folder
(checkpoints on the folder's cadence, the first SIGINT or SIGTERM a clean stop) and
finishes it (the summary, the figures, the calibration; a sweep's table, cv's
out-of-fold file). The folder's files are [`RunFolder`][eqx_fmnist.runs.RunFolder]'s
(`runs/writing.py`); a resume reads the run through
[`Run.open`][eqx_fmnist.runs.reading.Run.open] (`runs/reading.py`), which never writes.
The whole life of a run is one concept, kept whole here (about 450 lines): where a run
is started is where it is resumed, trained and finished.

!!! example

    ```python
    training = ef.runs.Training.new("runs/a", ef.TrainConfig(epochs=5))
    done = training.run()  # checkpoints, summary.json, figures
    # after an interruption (ef.runs.Interrupted), from its checkpoint:
    done = ef.runs.Training.resume("runs/a").run()
    ```
"""

import dataclasses
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax

from ..checkpoint import Checkpoint
from ..config import TrainConfig
from ..data import FashionMNIST
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
from ..ensemble.grid import SWEEP_VALIDATION
from ..intervals import Callback
from ..model import Model
from ..state import TrainState
from ..train import Members
from .cadence import EVERY_MINUTE, CheckpointEvery
from .files import write_cross_validation
from .layout import CHECKPOINT_NAME, RunError
from .profile import IntervalProfiler, find_trace
from .reading import DataSource, Run, loaded, opened_teacher, run_splits
from .report import RunResult, train_run
from .writing import RunFolder, refuse_results

TEACHER_FOLDER = "teacher"
"""Where a distilled run without a teacher of its own trains one, inside its folder."""


Outcome = RunResult | SweepResult | CrossValidation
"""What a finished [`Training`][eqx_fmnist.runs.training.Training] trained: a run's
`RunResult`, a sweep's `SweepResult` or cross-validation's `CrossValidation`."""


@dataclasses.dataclass
class Finished:
    """What [`Training.run`][eqx_fmnist.runs.training.Training.run] returns: the
    `outcome` (see `Outcome`) and the `summary` written to `summary.json`."""

    outcome: Outcome
    summary: dict[str, Any]


@dataclasses.dataclass
class Training:
    """A run ready to train in its folder; make one with
    [`Training.new`][eqx_fmnist.runs.training.Training.new] or
    [`Training.resume`][eqx_fmnist.runs.training.Training.resume].

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

    @classmethod
    def new(
        cls,
        out: str | os.PathLike,
        config: TrainConfig,
        *,
        members: Members | None = None,
        teacher: str | os.PathLike | None = None,
        data: DataSource = None,
        overwrite: bool = False,
        checkpoint_every: CheckpointEvery | str = EVERY_MINUTE,
        tensorboard: bool = False,
    ) -> "Training":
        """A new run in folder `out`, ready to train (call its `run`).

        **Arguments:**

        - `out`: the run folder (created if needed).
        - `config`: the run's [`TrainConfig`][eqx_fmnist.config.TrainConfig].
        - `members`: `Seeds` (an ensemble), `Grid` (a sweep, ranked on a validation
            split: 10,000 images when `config` holds out none) or `Folds`
            (cross-validation). Defaults to `None`: one run.
        - `teacher`: a run folder or checkpoint to distil from (named in the folder's
            `teacher.json`, so that a resume finds it). Defaults to `None`.
        - `data`: the data set, or a function that loads it (called after the checks
            that need no data). Defaults to
            [`load_fashion_mnist()`][eqx_fmnist.data.load_fashion_mnist].
        - `overwrite`, `checkpoint_every` (or its text: `"60s"`, `"500steps"`),
            `tensorboard`: as for [`RunFolder`][eqx_fmnist.runs.RunFolder].

        **Raises:**

        `RunError` before a file is written: a folder holding another run's results, a
        teacher this student cannot learn from, members too large for the memory, or
        splits the members cannot use.
        """
        if not isinstance(config, TrainConfig):  # before any work or file
            raise TypeError(f"`config` must be a TrainConfig, not {type(config).__name__}.")
        if members is not None and not isinstance(members, Members):
            raise TypeError(
                f"`members` must be a Members choice (ef.ensemble.Seeds, Grid, Folds), not "
                f"{type(members).__name__}."
            )
        if isinstance(members, Grid) and not config.validation_size:
            config = config.with_changes(validation_size=SWEEP_VALIDATION)
        return start_training(
            out,
            config,
            members,
            data,
            teacher=opened_teacher(teacher, config),
            overwrite=overwrite,
            checkpoint_every=checkpoint_every,
            tensorboard=tensorboard,
        )

    @classmethod
    def resume(
        cls,
        checkpoint: str | os.PathLike,
        *,
        kind: str | None = None,
        out: str | os.PathLike | None = None,
        data: DataSource = None,
        overwrite: bool = False,
        checkpoint_every: CheckpointEvery | str = EVERY_MINUTE,
        tensorboard: bool = False,
    ) -> "Training":
        """The run of `checkpoint` (a file or its folder), ready to train on from its
        step, with the saved config, members, state and teacher, in its own folder or
        in `out` (which then takes its history). `kind`: the kind of run it must be
        (`"train"`, `"sweep"` or `"cv"`; see
        [`Training.kind`][eqx_fmnist.runs.training.Training.kind]), or `None`; `data` as
        for `Training.new` (a function is called once the kind is checked).

        **Raises:**

        `RunError` before a file is written: no checkpoint, another kind of run than
        `kind`, a run that has finished (its summary written; `overwrite` finishes it
        again), a teacher gone, or cross-validation's checkpoint on other data.
        """
        run = Run.open(checkpoint)
        found = kind_of(run.choice)
        if kind is not None and found != kind:
            raise RunError(f"{checkpoint} is the checkpoint of a {found} run, not of a {kind} run.")
        return start_training(
            run.folder if out is None else out,
            run.config,
            run.choice,
            data,
            teacher=opened_teacher(run.teacher(), run.config),
            resume=Resumed(run.checkpoint, run.saved),
            overwrite=overwrite,
            checkpoint_every=checkpoint_every,
            tensorboard=tensorboard,
        )

    @classmethod
    def unfinished(
        cls, out: str | os.PathLike, config: TrainConfig, **options: Any
    ) -> "Training | None":
        """The run of `config` that folder `out` holds unfinished (a checkpoint and no
        summary: interrupted), resumed in its folder, so that a recipe's command run again
        continues it; `None` when `out` holds no such run (none, a finished one, members,
        or another config). `options`: as for `Training.resume`."""
        if _unfinished_config(Path(out)) != config:
            return None
        return cls.resume(out, kind="train", **options)

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
        return f"{epochs} epoch{'' if epochs == 1 else 's'} ({steps})" if epochs else steps

    def describe(self) -> str:
        """Where and what trains, as the command line says it first: the folder; what
        trains (a sweep's grid and seeds, cv's folds, else the length, precision, seeds,
        held-out images and teacher); the checkpoint cadence; the data; a resume's step."""
        folder = self.folder
        kind = "run" if self.kind == "train" else self.kind
        lines = [
            f"{kind} folder {folder.folder}: {self._what()}, checkpoint every "
            f"{folder.checkpoint_every}",
            f"data: {self.data.source} ({self.data.origin})",
        ]
        if self.start:
            lines.append(f"resuming at step {self.start:,} of {self.total_steps:,}")
        return "\n".join(lines)

    def _what(self) -> str:
        config, total, members = self.config, self.total_steps, self.members
        count = 0 if members is None else len(members.configs(config))
        if isinstance(members, Grid):
            grid = "; ".join(
                f"{k} {', '.join(f'{v:g}' for v in vs)}" for k, vs in members.values.items()
            )
            seeds = ", ".join(map(str, member_seeds(config, members.seeds)))
            return (
                f"{grid}; seeds {seeds}: {count} members in one program{self._spread()}, "
                f"{total:,} steps each, ranked on {config.validation_size:,} validation images"
            )
        if isinstance(members, Folds):
            return (
                f"{count} folds of {len(self.splits.train):,} images ({self.folder.num_train:,} "
                f"to train on each), {total:,} steps, one program{self._spread()}"
            )
        parts = [self.length, config.precision, f"seed {config.seed}"]
        if members is not None:
            seeds = _seeds(members.configs(config))
            parts[-1] = f"{count} members in one program (seeds {seeds}){self._spread()}"
        if config.calibration_size:
            parts.append(f"{config.calibration_size:,} images held out to calibrate")
        if self.teacher is not None:
            parts.append(f"distilled from {self.teacher}")
        return ", ".join(parts)

    def _spread(self) -> str:
        """Members split over devices or on shared batches, in words."""
        config, members = self.config, self.members
        if members is None:
            return ""
        words = ", on shared batches" if config.shared_batches else ""
        if config.devices > 1:
            each = len(members.configs(config)) // config.devices
            words += f", {each} on each of {config.devices} devices"
        return words

    def run(self, callbacks: Sequence[Callback] = (), *, profile: bool = False) -> Finished:
        """Train in the folder, then finish it; `callbacks` are called after each
        logging interval, before the folder's own (history, checkpoint, stop).
        `profile`: trace intervals 2-3 ([`IntervalProfiler`][eqx_fmnist.runs.profile.IntervalProfiler])
        into `RUN/profile` ([`trace`][eqx_fmnist.runs.training.Training.trace]).

        **Raises:**

        [`Interrupted`][eqx_fmnist.runs.Interrupted] after the checkpoint of a stop
        asked for (a first SIGINT or SIGTERM, or `folder.request_stop()`): continue with
        `Training.resume(folder.checkpoint)`. `NonFiniteError`, as `fit` raises it.
        """
        traced = []
        if profile:
            intervals = self.folder.plan.intervals()
            traced = [IntervalProfiler(self.folder.folder / "profile", intervals)]
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
        return self.folder.finish(
            outcome.result, self.data, outcome.calibration, report=outcome.report
        )


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
    [`Training.new`][eqx_fmnist.runs.training.Training.new] and
    [`Training.resume`][eqx_fmnist.runs.training.Training.resume] share); in a
    multi-process run every process trains and only process 0 keeps the folder (the
    others write a temporary one)."""
    if not isinstance(folder_options.get("checkpoint_every", EVERY_MINUTE), CheckpointEvery):
        folder_options["checkpoint_every"] = CheckpointEvery.parse(
            folder_options["checkpoint_every"]
        )
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
    it. `None` when it has nothing to train: a finished teacher is there, or the student
    itself is already training (its teacher finished). A teacher interrupted earlier
    continues from its checkpoint (so that the recipe's command, run again, continues
    the recipe); with `overwrite` both start afresh. A student folder that holds other
    results is refused first, not minutes later. `folder_options`: as for
    [`RunFolder`][eqx_fmnist.runs.RunFolder].
    """
    out = Path(out)
    where = out / TEACHER_FOLDER
    config = (TrainConfig.teacher() if teacher is None else teacher).with_changes(
        seed=student.seed,
        validation_size=student.validation_size,
        calibration_size=student.calibration_size,
    )
    if not overwrite:
        if _unfinished_config(out) == student:
            return None  # the student trains (and continues): its teacher has finished
        refuse_results(out)
        if (where / "summary.json").is_file():
            return None
        resumed = Training.unfinished(where, config, data=data, **folder_options)
        if resumed is not None:
            return resumed
    return start_training(where, config, None, data, overwrite=overwrite, **folder_options)


def _unfinished_config(folder: Path) -> TrainConfig | None:
    """The config of the one run (not members) `folder` holds unfinished: a checkpoint
    and no summary."""
    if (folder / "summary.json").is_file() or not (folder / CHECKPOINT_NAME).is_file():
        return None
    run = Run.open(folder)
    return run.config if run.members is None else None
