"""A run folder as library code: a lock, the config, one history line per logging
interval, checkpoints on a cadence of their own, a summary and the figures (the files
are listed in `eqx_fmnist.runs.layout`). With `overwrite`, a new run removes the
folder's previous run (`clear_run`) once every check has passed and its lock is held,
before it writes its own first file: a run killed after that leaves only its own files.

The same folder holds an ensemble (`members`: one checkpoint of the stacked members;
the summary has the ensemble's and each member's test results) or a sweep.

A [`RunFolder`][eqx_fmnist.runs.RunFolder] is driven by [`fit`][eqx_fmnist.train.fit]
through its `callback`. Logging and checkpointing are separate: logging every 25 steps
writes a history line every 25 steps, and a checkpoint only when
[`CheckpointEvery`][eqx_fmnist.runs.CheckpointEvery] says so. A stop asked for from a
signal handler ([`request_stop`][eqx_fmnist.runs.writing.RunFolder.request_stop]) takes effect at
the end of the interval, after a checkpoint, so an interrupted run resumes exactly.
This module never prints; its errors are [`RunError`][eqx_fmnist.runs.RunError]s.

The module is kept whole: the write side of a run folder, its refusals before a file is
written and its cadence, read in one place.
"""

import contextlib
import datetime
import json
import math
import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
from matplotlib.figure import Figure

from ..calibration import CALIBRATION_FILE, Calibration
from ..checkpoint import payload_digest, save_checkpoint
from ..config import TrainConfig
from ..data import FashionMNIST
from ..evaluation import EvalResult
from ..fileio import FolderInUse, FolderLock, atomic_write, remove_stale_parts
from ..hooks import Members
from ..intervals import History, plan_run
from ..parallel import agreed, make_mesh
from ..plots import (
    plot_examples,
    plot_predictions,
    plot_training_curve,
    save_figure,
)
from ..state import TrainState
from ..train import TrainResult
from .cadence import EVERY_MINUTE, CheckpointEvery, Interrupted
from .layout import (
    CHECKPOINT_NAME,
    FIGURES,
    HOLDS_RESULTS,
    LOCK_NAME,
    PROFILE,
    TEACHER_FILE,
    TENSORBOARD,
    RunError,
    read_history,
    refuse_edited_config,
    teacher_record,
)
from .record import TEACHER_FOLDER, Record, below
from .report import RunReport
from .summary import summarise, tensorboard_writer, time_split


def default_folder() -> Path:
    """`runs/<YYYYmmdd-HHMMSS>` under the working folder, numbered (`-2`, ...) when a
    run of the same second has it."""
    path = Path("runs") / datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    k = 1
    while (found := path.with_name(f"{path.name}-{k}" if k > 1 else path.name)).exists():
        k += 1
    return found


def _write_text(path: Path, text: str) -> None:
    with atomic_write(path, "w") as f:
        f.write(text)


def refuse_results(
    folder: Path, own: bool = False, start_step: int = 0, total_steps: int = 0
) -> None:
    """`RunError` for a folder that holds results a run would overwrite: another run's
    (a new run, or a resume written elsewhere), or its own finished summary."""
    if own:
        if start_step >= total_steps and (folder / "summary.json").is_file():
            raise RunError(
                f"the run in {folder} has finished (step {start_step:,} of {total_steps:,}): "
                f"there is nothing to resume; `eqx-fmnist evaluate {folder}` shows its "
                "results (`--overwrite` finishes it again)."
            )
        return
    existing = [n for n in HOLDS_RESULTS if (folder / n).exists()]
    if existing:
        raise RunError(
            f"run folder {folder} already holds results ({', '.join(existing)}); "
            "choose another folder, or overwrite it (`overwrite=True`, `--overwrite`)."
        )


def refuse_reading_here(folder: Path, teacher: Path | None) -> None:
    """`RunError` where a run would write where it reads: its folder is its teacher's
    run folder, or inside it (a teacher inside the run's folder, as a distilled run's own
    `teacher/`, is not written by the run)."""
    if teacher is None:
        return
    held = teacher if teacher.is_dir() else teacher.parent
    out = folder.resolve()
    if held == out or held in out.parents:
        raise RunError(
            f"{folder} is (or is inside) the teacher's run {held}: a run never "
            "writes where it reads; give another --out."
        )


class RunFolder:
    """One training run's folder, written while [`fit`][eqx_fmnist.train.fit] runs.

    Use it as a context manager (it holds the folder's lock) and pass `run.callback` to
    `fit`; then call [`finish`][eqx_fmnist.runs.writing.RunFolder.finish] with the result
    and its test report.

    !!! example

        ```python
        with ef.runs.RunFolder("runs/a", config, num_train=60_000) as run:
            result = ef.fit(config, ef.split_data(data), callback=run.callback)
            report = ef.runs.run_report(
                result.model, result.policy, data.test_images, data.test_labels
            )
            run.finish(result, data, report)
        ```
    """

    def __init__(
        self,
        folder: str | os.PathLike,
        config: TrainConfig,
        *,
        num_train: int,
        start_step: int = 0,
        overwrite: bool = False,
        checkpoint_every: CheckpointEvery = EVERY_MINUTE,
        tensorboard: bool = False,
        members: Members | None = None,
        teacher: str | os.PathLike | None = None,
        resume_from: str | os.PathLike | None = None,
        files: Sequence[str] = FIGURES,
        by: str = "train",
    ):
        """**Arguments:**

        - `folder`: the run folder, created if needed.
        - `config`: the run's config (written to `config.json`).
        - `num_train`: training examples (saved with checkpoints, to rebuild the state).
        - `start_step`: the step a resumed run starts from; history past it is dropped
            (it was trained after the checkpoint and will be trained again). Defaults
            to `0`, a new run.
        - `overwrite`: reuse a folder that holds results. Defaults to `False`, which
            raises `RunError` (a resumed run continues its own folder).
        - `checkpoint_every`: the checkpoint cadence. Defaults to every 60 seconds.
        - `tensorboard`: also write scalars and hyperparameters for TensorBoard into
            `folder/tensorboard` (needs `pip install 'eqx_fmnist[tensorboard]'`).
        - `members`: the [`Members`][eqx_fmnist.hooks.Members] choice of an ensemble,
            sweep or cross-validation trained as one program (`config` is then the one
            they share; the checkpoint records the choice). Defaults to `None`: one run.
        - `teacher`: the checkpoint of the teacher a distilled run learns from, named in
            `teacher.json` so that a resume finds it. Defaults to `None`.
        - `resume_from`: the folder of the run a resume continues, when it is not
            `folder`: its history is carried over, and `folder` must hold no results
            (or `overwrite`). Defaults to `None`: a resume continues its own folder.
        - `files`: the files the run writes besides its config, history, checkpoint,
            summary, calibration and `teacher.json` (its kind's
            [`files`][eqx_fmnist.runs.kind.RunKind]). Defaults to a run's `FIGURES`.
        - `by`: the command the folder's [record][eqx_fmnist.runs.record.Record] says
            wrote them. Defaults to `"train"`.

        **Raises:**

        `RunError` before anything is written: a folder that holds another run's results
        or files no run wrote (without `overwrite`), a name the run writes that is not
        a file its folder's record lists, a resume of a run that has finished (its summary
        written; `overwrite` finishes it again), or members or a model too large for
        the device's memory.
        """
        # What would refuse the run refuses it before a file is written.
        self.members = None if members is None else members.configs(config)
        self._choice = None if members is None else members.to_dict()
        try:
            self.plan = plan_run(self.members or (config,), num_train)
            if config.devices > 1 or jax.process_count() > 1:
                make_mesh(config.devices)  # as many devices as it asks for
        except ValueError as e:
            raise RunError(str(e)) from None
        self.folder = Path(folder)
        if self.folder.exists() and not self.folder.is_dir():
            raise RunError(f"{self.folder} is a file, not a folder; give the run a folder.")
        source = self.folder if resume_from is None else Path(resume_from)
        own = bool(start_step) and source.resolve() == self.folder.resolve()
        if not overwrite:
            refuse_results(self.folder, own, start_step, self.plan.total_steps)
        if start_step:
            refuse_edited_config(source, config)
        # `overwrite` starts the folder afresh (its previous run removed once every
        # check has passed); a resume in its own folder continues it.
        self._clear = overwrite and not own
        self._own = own
        self._overwrite = overwrite
        self._teacher = None if teacher is None else Path(teacher).resolve()
        self._keep = None if self._teacher is None else self._teacher.parent
        self.names = self.written_names(files, config) + ([TEACHER_FILE] if teacher else [])
        self._by = by
        self._history_from = source if start_step else self.folder
        self.config = config
        self.num_train = num_train
        self.checkpoint_every = checkpoint_every
        self.checkpoint = self.folder / CHECKPOINT_NAME
        self.saved_step = start_step if start_step else None
        self._start_step = start_step
        self._last_save = time.monotonic()
        self._stop_reason: str | None = None
        self._tensorboard = tensorboard
        self._writer = None
        self._lock = FolderLock(self.folder / LOCK_NAME)
        refuse_reading_here(self.folder, self._teacher)
        self._check(Record.read(self.folder))  # and again under the lock
        self.checkpoint_seconds = 0.0
        """Wall seconds spent writing checkpoints so far (during training and the last)."""

    def __enter__(self) -> "RunFolder":
        self.folder.mkdir(parents=True, exist_ok=True)
        try:
            self._lock.__enter__()
        except FolderInUse as e:
            raise RunError(str(e)) from None
        try:
            self._inode = self.folder.stat().st_ino  # where it writes: _still_here
            remove_stale_parts(self.folder)  # a killed writer's: the lock is ours now
            record = Record.read(self.folder)
            self._check(record)
            if self._clear:
                record.clear(keep=self._keep)
            if self._keep is not None and self._keep == (self.folder / TEACHER_FOLDER).resolve():
                record.folders.append(TEACHER_FOLDER)  # its own record lists its files
            self._before = {sub: below(self.folder / sub) for sub in (TENSORBOARD, PROFILE)}
            old = read_history(self._history_from)  # refuses a damaged one: before a claim
            record.claim(self.names, self._by)
            self.record = record
            _write_text(self.folder / "config.json", self.config.to_json() + "\n")
            kept = [h for h in old if h["step"] <= self._start_step]
            _write_text(self.folder / "history.jsonl", "".join(json.dumps(h) + "\n" for h in kept))
            if self._teacher is not None:
                named = json.dumps(teacher_record(self.folder, self._teacher))
                _write_text(self.folder / TEACHER_FILE, named + "\n")
            if self._tensorboard:
                self._writer = tensorboard_writer(self.folder / TENSORBOARD)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        try:
            if self._writer is not None:
                self._writer.close()
            if hasattr(self, "record"):
                self._still_here()  # a record written into a moved folder would make it
                for sub, before in self._before.items():  # event files, a profile's trace
                    self.record.adopt(sub, before, self._by)
                self.record.seal()
        except RunError:
            pass  # the run stopped saying so
        finally:
            self._lock.__exit__()

    @staticmethod
    def written_names(files: Sequence[str], config: TrainConfig) -> list[str]:
        """The names a run writes (its kind's `files` besides the folder's own)."""
        names = ["config.json", "history.jsonl", CHECKPOINT_NAME, "summary.json", *files]
        if config.calibration_size:
            names.append(CALIBRATION_FILE)
        return names

    def _check(self, record: Record) -> None:
        """`Record.refuse_foreign` for a run that starts here (a resume in its own
        folder continues it), and what `--overwrite` would refuse to remove."""
        if self._tensorboard and (self.folder / TENSORBOARD).is_symlink():
            raise RunError(f"{self.folder / TENSORBOARD} is a link: a run writes only its own.")
        if not self._own:
            record.refuse_foreign(self.names, overwrite=self._overwrite, keep=self._keep)
        if self._clear:
            record.refuse_clearing(keep=self._keep)

    def request_stop(self, reason: str = "a stop was requested") -> None:
        """Stop at the end of the current interval, after a checkpoint. Safe to call from
        a signal handler: it only sets a flag."""
        self._stop_reason = reason

    @contextlib.contextmanager
    def stop_on_signals(self, signals=(signal.SIGINT, signal.SIGTERM, signal.SIGHUP)):
        """While inside, the first SIGINT, SIGTERM or SIGHUP (a closed terminal) asks the
        run to stop at the end of the interval, after a checkpoint; a second one acts at
        once, as usual. The previous handlers come back on exit. Call it from the main
        thread."""

        def request(signum, frame):
            self.request_stop(f"interrupted ({signal.Signals(signum).name})")
            for s in signals:
                signal.signal(
                    s, signal.default_int_handler if s == signal.SIGINT else signal.SIG_DFL
                )

        previous = {s: signal.signal(s, request) for s in signals}
        try:
            yield self
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)

    def save(self, state: TrainState, step: int) -> Path:
        """Write the checkpoint of `state` at `step` (atomically)."""
        self._still_here()
        start = time.perf_counter()
        save_checkpoint(
            self.checkpoint,
            state,
            self.config,
            num_train=self.num_train,
            members=self.members,
            choice=self._choice,
            run_folder={"checkpoint_every": self.checkpoint_every.to_text()},
        )
        self.saved_step = step
        self._last_save = time.monotonic()
        self.checkpoint_seconds += time.perf_counter() - start
        return self.checkpoint

    def _still_here(self) -> None:
        """`RunError` when the folder was moved or deleted since the run took it: the run
        stops, instead of a write making the folder again with part of a run in it."""
        try:
            here = self.folder.stat().st_ino == self._inode
        except OSError:
            here = False
        if not here:
            raise RunError(
                f"{self.folder} was moved or deleted while the run wrote into it: the run "
                "stopped; resume it from its checkpoint where the folder is now."
            )

    def callback(self, record: History, state: TrainState) -> None:
        """For `fit(..., callback=run.callback)`: one history line per interval, a
        checkpoint when due, and the requested stop."""
        # History first, then the checkpoint: a signal between the two leaves a history
        # line past the checkpoint, which a resume drops and trains again.
        self._still_here()
        with (self.folder / "history.jsonl").open("a") as f:
            f.write(json.dumps(record) + "\n")
        if self._writer is not None:
            for key, value in record.items():  # members' own records: under members/i/
                if key not in ("step", "steps", "members"):
                    self._writer.add_scalar(f"train/{key}", value, record["step"])
            for i, m in enumerate(record.get("members", ())):
                for key in ("loss", "accuracy", "valid_accuracy"):
                    if key in m:
                        self._writer.add_scalar(f"members/{i}/{key}", m[key], record["step"])
        since = record["step"] - (self.saved_step or 0)
        elapsed = time.monotonic() - self._last_save
        # Every process of a run decides together: a checkpoint of members split over
        # processes gathers them (a collective), and a stop must be every process's.
        stop = agreed(self._stop_reason is not None)
        if stop or agreed(self.checkpoint_every.due(steps_since=since, seconds_since=elapsed)):
            self.save(state, record["step"])
        if stop:
            raise Interrupted(
                f"{self._stop_reason or 'another process stopped'}; the checkpoint at step "
                f"{record['step']:,} is in "
                f"{self.checkpoint}",
                step=record["step"],
                checkpoint=self.checkpoint,
            )

    def finish(
        self,
        result: TrainResult,
        data: FashionMNIST,
        report: RunReport,
        calibration: Calibration | None = None,
    ) -> dict[str, Any]:
        """Save the final checkpoint, the calibration, the figures and `summary.json`.

        **Arguments:**

        - `result`: what `fit` returned, for one run or an ensemble.
        - `data`: the numpy data set (for the example and prediction grids).
        - `report`: the run's test [`RunReport`][eqx_fmnist.runs.report.RunReport]
            ([`run_report`][eqx_fmnist.runs.report.run_report]).
        - `calibration`: the run's [`Calibration`][eqx_fmnist.calibration.Calibration]
            (from [`calibrate`][eqx_fmnist.calibration.calibrate] after training),
            saved as `calibration.safetensors`. Defaults to `None`: raw probabilities.

        **Returns:**

        The summary, as written to `summary.json`; its `seconds` split the run's wall
        time ([`time_split`][eqx_fmnist.runs.summary.time_split]).
        """
        during = self.checkpoint_seconds  # written by the callbacks, while training
        self.save_final(result.state)
        start = time.perf_counter()
        if calibration is not None:
            owner = payload_digest(self.checkpoint)
            calibration.save(self.folder / CALIBRATION_FILE, checkpoint=owner)
        reported = time.perf_counter()
        summary = {
            **summarise(result, report.confusion, calibration, read_history(self.folder)),
            "calibration": report.calibration,
            "robustness": report.robustness.to_dict(),
            **({} if report.sets is None else {"prediction_sets": report.sets.to_dict()}),
        }
        pred = report.predictions
        self.save_figures(
            {
                **report.figures(),
                "examples.png": plot_examples(data.train_images, data.train_labels),
                "training_curve.png": self.training_curve(),
                "predictions.png": plot_predictions(data.test_images, data.test_labels, pred),
            }
        )
        drawn = time.perf_counter() - reported
        summary["seconds"] = time_split(
            result.seconds,
            during,
            self.checkpoint_seconds,
            report.seconds + reported - start,
            drawn,
        )
        self.write_summary(summary)
        if self._writer is not None and result.test is not None:
            self._hparams(self._writer, result.test)
        return summary

    def write_summary(self, summary: dict[str, Any]) -> dict[str, Any]:
        """Write `summary.json` (atomically): written last, a summary says the run
        finished, figures and all. Returns `summary`."""
        _write_text(self.folder / "summary.json", json.dumps(summary, indent=2) + "\n")
        return summary

    def save_figures(self, figures: dict[str, Figure]) -> None:
        """Draw `{file name: figure}` into the folder, each written atomically."""
        for name, figure in figures.items():
            save_figure(figure, self.folder / name)

    def _hparams(self, writer, test: EvalResult) -> None:
        """The config and the test figures on TensorBoard's hparams page."""
        hparams = {
            k: str(v) if isinstance(v, list | tuple) or v is None else v
            for k, v in self.config.to_dict().items()
        }
        metrics = {"hparam/test_accuracy": test.accuracy, "hparam/test_loss": test.loss}
        writer.add_hparams(hparams, metrics, name=".")

    def save_final(self, state: TrainState) -> None:
        """The checkpoint of the state training ended with, unless saved at its step."""
        step = state.global_step
        if self.saved_step != step:
            self.save(state, step)

    def training_curve(self) -> Figure:
        """The training curve of the folder's history (the members' mean)."""
        history = read_history(self.folder)
        kind = f", {len(self.members)} members (mean)" if self.members else ""
        return plot_training_curve(
            [h["step"] for h in history],
            [float(h.get("loss", math.nan)) for h in history],
            [float(h.get("accuracy", math.nan)) for h in history],
            title=f"Training: {self.config.precision}, batch {self.config.batch_size}{kind}",
        )
