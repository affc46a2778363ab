"""The write side of `runs/`: a run started or resumed, trained in its folder and
finished, what `eqx-fmnist train`, `sweep` and `cv` do, as the library calls a notebook
makes too.

[`Training.new`][eqx_fmnist.runs.training.Training.new] and
[`Training.resume`][eqx_fmnist.runs.training.Training.resume] check everything that
could refuse the run before a file is written, and return a
[`Training`][eqx_fmnist.runs.training.Training]: its folder, config, members, data and
(resuming) state, step and teacher.
[`Training.run`][eqx_fmnist.runs.training.Training.run] trains in the folder
(checkpoints on the folder's cadence, the first SIGINT, SIGTERM or SIGHUP a clean stop) and
finishes it (the summary, the figures, the calibration; a sweep's table, cv's
out-of-fold file). The folder's files are [`RunFolder`][eqx_fmnist.runs.RunFolder]'s
(`runs/writing.py`); a resume reads the run through
[`Run.open`][eqx_fmnist.runs.reading.Run.open] (`runs/reading.py`), which never writes.
The whole life of a run is one concept, kept whole here: where a run
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
from typing import Any, Generic

import jax

from ..checkpoint import Checkpoint
from ..config import TrainConfig
from ..data import FashionMNIST
from ..hooks import Members
from ..intervals import Callback
from ..model import Model
from .cadence import EVERY_MINUTE, CheckpointEvery
from .cv_run import CV_RUN
from .kind import Job, Outcome, RunKind
from .layout import CHECKPOINT_NAME, RunError
from .one_run import ONE_RUN
from .profile import IntervalProfiler, find_trace
from .reading import DataSource, Run, loaded, opened_teacher, run_splits
from .record import TEACHER_FOLDER, Record
from .sweep_run import SWEEP_RUN
from .writing import RunFolder, refuse_results

KINDS: tuple[RunKind, ...] = (ONE_RUN, SWEEP_RUN, CV_RUN)
"""The kinds of run, one [`RunKind`][eqx_fmnist.runs.kind.RunKind] each: a new kind is
one module and one entry here."""


def kind_for(members: Members | None) -> RunKind:
    """The kind of run that trains `members`: the one that names their choice, else one
    model or an ensemble (`ONE_RUN`)."""
    choice = None if members is None else members.kind
    return next((k for k in KINDS if choice in k.choices), ONE_RUN)


@dataclasses.dataclass
class Finished(Generic[Outcome]):
    """What [`Training.run`][eqx_fmnist.runs.training.Training.run] returns: the
    `outcome` its kind trained (a run's [`RunResult`][eqx_fmnist.runs.one_run.RunResult],
    a sweep's `SweepResult`, cross-validation's `CrossValidation`) and the `summary`
    written to `summary.json`."""

    outcome: Outcome
    summary: dict[str, Any]


@dataclasses.dataclass
class Training(Job, Generic[Outcome]):
    """A run ready to train in its folder (a [`Job`][eqx_fmnist.runs.kind.Job]); make one
    with [`Training.new`][eqx_fmnist.runs.training.Training.new] or
    [`Training.resume`][eqx_fmnist.runs.training.Training.resume]."""

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
        checkpoint_every: CheckpointEvery | str | None = None,
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
        - `overwrite`, `checkpoint_every` (or its text: `"60s"`, `"500steps"`; `None`:
            every minute), `tensorboard`: as for [`RunFolder`][eqx_fmnist.runs.RunFolder].

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
        config = kind_for(members).config(config)
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
        checkpoint_every: CheckpointEvery | str | None = None,
        tensorboard: bool = False,
    ) -> "Training":
        """The run of `checkpoint` (a file or its folder), ready to train on from its
        step, with the saved config, members, state and teacher, in its own folder or
        in `out` (which then takes its history), checkpointed as it was (or as
        `checkpoint_every` says, when given). `kind`: the kind of run it must be
        (`"train"`, `"sweep"` or `"cv"`; see
        [`Training.kind`][eqx_fmnist.runs.training.Training.kind]), or `None`; `data` as
        for `Training.new` (a function is called once the kind is checked).

        **Raises:**

        `RunError` before a file is written: no checkpoint, another kind of run than
        `kind`, a run that has finished (its summary written; `overwrite` finishes it
        again), a teacher gone, or cross-validation's checkpoint on other data.
        """
        run = Run.open(checkpoint)
        found = kind_for(run.choice).name
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
        """Its kind's name: `"sweep"` (a `Grid`), `"cv"` (`Folds`) or `"train"` (one run
        or an ensemble)."""
        return self.run_kind.name

    @property
    def run_kind(self) -> RunKind[Outcome]:
        """Its [`RunKind`][eqx_fmnist.runs.kind.RunKind]: how it trains and finishes."""
        return kind_for(self.members)

    def describe(self) -> str:
        """Where and what trains, as the command line says it first: the folder; what
        trains (a sweep's grid and seeds, cv's folds, else the length, precision, seeds,
        held-out images and teacher); the checkpoint cadence; the data; a resume's step."""
        folder = self.folder
        kind = self.run_kind
        lines = [
            f"{kind.noun} folder {folder.folder}: {kind.what(self)}, checkpoint every "
            f"{folder.checkpoint_every}",
            f"data: {self.data.source} ({self.data.origin})",
        ]
        if self.start:
            lines.append(f"resuming at step {self.start:,} of {self.total_steps:,}")
        return "\n".join(lines)

    def run(
        self, callbacks: Sequence[Callback] = (), *, profile: bool = False
    ) -> Finished[Outcome]:
        """Train in the folder, then finish it; `callbacks` are called after each
        logging interval, before the folder's own (history, checkpoint, stop).
        `profile`: trace intervals 2-3 ([`IntervalProfiler`][eqx_fmnist.runs.profile.IntervalProfiler])
        into `RUN/profile` ([`trace`][eqx_fmnist.runs.training.Training.trace]).

        **Raises:**

        [`Interrupted`][eqx_fmnist.runs.Interrupted] after the checkpoint of a stop
        asked for (a first SIGINT, SIGTERM or SIGHUP, or `folder.request_stop()`): continue with
        `Training.resume(folder.checkpoint)`. `NonFiniteError`, as `fit` raises it.
        """
        traced = []
        if profile:
            intervals = self.folder.plan.intervals()
            traced = [IntervalProfiler(self.folder.folder / "profile", intervals)]
        with self.folder as folder, folder.stop_on_signals():
            try:
                kind = self.run_kind
                outcome = kind.train(self, [*callbacks, *traced, folder.callback])
                return Finished(outcome, kind.finish(self, outcome))
            finally:  # its trace in the folder's record, as the folder closes
                for profiler in traced:
                    profiler.stop()

    @property
    def trace(self) -> Path | None:
        """The Perfetto trace `run(profile=True)` wrote, if any."""
        return find_trace(self.folder.folder / "profile")


@dataclasses.dataclass(frozen=True)
class Resumed:
    """What a resume continues from: the checkpoint's path and what it holds."""

    checkpoint: Path
    saved: Checkpoint

    @property
    def cadence(self) -> CheckpointEvery:
        """The checkpoint cadence the run's folder recorded; every minute for a
        checkpoint written before folders recorded it."""
        recorded = self.saved.metadata.get("run_folder", {}).get("checkpoint_every")
        return EVERY_MINUTE if recorded is None else CheckpointEvery.parse(recorded)


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
    every = folder_options.get("checkpoint_every")
    if every is None:  # a resume keeps the cadence its run started with
        every = resume.cadence if resume else EVERY_MINUTE
    folder_options["checkpoint_every"] = CheckpointEvery.parse(every)
    data = loaded(data)
    try:
        splits = run_splits(config, data)
        num_train = len(splits.train)
        rows = None if members is None else members.rows(num_train, config)  # checks it
        if rows is not None:
            num_train = rows.size
        if resume and rows is not None and resume.saved.num_train != num_train:
            raise ValueError(
                f"{resume.checkpoint} was not written by this {kind_for(members).name} run "
                f"on these data (it trained on {resume.saved.num_train:,} rows, these data "
                f"give {num_train:,})."
            )
    except ValueError as e:
        raise RunError(str(e)) from None
    scratch = None
    if jax.process_index() != 0:
        scratch = tempfile.TemporaryDirectory(prefix="eqx-fmnist-")
        out = scratch.name
        folder_options["overwrite"] = True
    step = resume.saved.step if resume else 0
    kind = kind_for(members)
    folder = RunFolder(
        out,
        config,
        num_train=num_train,
        start_step=step,
        members=members,
        teacher=teacher[0] if teacher else None,
        resume_from=resume.checkpoint.parent if resume else None,
        files=kind.files,
        by=kind.name,
        **folder_options,
    )
    state = resume.saved.state if resume else None
    path, model = teacher if teacher else (None, None)
    return Training(folder, config, members, data, splits, state, step, path, model, scratch)


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
    names = RunFolder.written_names(ONE_RUN.files, student)
    Record.read(out).refuse_foreign(names, overwrite=overwrite, keep=where)
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
