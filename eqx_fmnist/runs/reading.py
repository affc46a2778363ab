"""A run read back, and the data a run uses: the read side of `runs/`.

[`Run.open`][eqx_fmnist.runs.reading.Run.open] reads a run folder in one place (its
checkpoint, config, members, calibration, views and teacher) for every command that
opens a run: `evaluate`, `predict`, `export`, `audit`, a resume, a `--teacher`.
[`run_splits`][eqx_fmnist.runs.reading.run_splits] makes the splits a config asks for;
a `DataSource` is the data, or a function that loads them once the checks that need
none have passed. Nothing here starts or writes a run: that is
[`Training`][eqx_fmnist.runs.training.Training]'s (`runs/training.py`), which reads
through this module.
"""

import contextlib
import dataclasses
import json
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from jaxtyping import Array, Shaped

from ..answers import Answer, answer
from ..augment import Move
from ..calibration import CALIBRATION_FILE, Calibration
from ..checkpoint import Checkpoint, load_checkpoint
from ..config import TrainConfig
from ..data import FashionMNIST, load_fashion_mnist
from ..dataset import Splits, split_data, to_datasets
from ..distill import Teacher
from ..ensemble import members_from
from ..evaluation import evaluate
from ..export import FORMATS, export_model, manifest_path
from ..fileio import FolderInUse, FolderLock, remove_stale_parts
from ..hooks import Members
from ..model import Model
from ..precision import Policy
from ..state import TrainState, select_members
from ..views import TTA_VIEWS
from .layout import (
    CHECKPOINT_NAME,
    LOCK_NAME,
    RunError,
    digest_or_none,
    read_teacher,
)
from .record import Record, refuse_overwriting

DataSource = FashionMNIST | Callable[[], FashionMNIST] | None
"""The data a run uses: the data set, a function that loads it (called once the checks
that need no data have passed), or `None`:
[`load_fashion_mnist()`][eqx_fmnist.data.load_fashion_mnist]."""


def loaded(data: DataSource) -> FashionMNIST:
    """The data a `DataSource` gives: the data themselves, the function's, or (`None`)
    [`load_fashion_mnist`][eqx_fmnist.data.load_fashion_mnist]'s."""
    if callable(data):
        return data()
    return load_fashion_mnist() if data is None else data


def run_splits(config: TrainConfig, data: FashionMNIST | None = None) -> Splits:
    """The splits `config` asks for (its `validation_size` and `calibration_size`), made
    by [`split_data`][eqx_fmnist.dataset.split_data] from `data`; the library's one
    convenience load: `data` defaults to
    [`load_fashion_mnist()`][eqx_fmnist.data.load_fashion_mnist].

    !!! example

        ```python
        config = ef.TrainConfig(epochs=5, calibration_size=5000)
        result = ef.fit(config, ef.runs.run_splits(config))
        ```
    """
    held = config.validation_size + config.calibration_size
    splits = split_data(
        loaded(data),
        validation_size=config.validation_size,
        calibration_size=config.calibration_size,
    )
    if held and len(splits.train) < config.batch_size:
        raise ValueError(
            f"holding out {held:,} training images (validation_size "
            f"{config.validation_size:,}, calibration_size {config.calibration_size:,}) "
            f"leaves {len(splits.train):,} to train on, fewer than a batch of "
            f"{config.batch_size}: hold out fewer (--validation-size, --calibrate)."
        )
    return splits


def checkpoint_path(where: str | os.PathLike) -> Path:
    """The checkpoint of a run folder, or `where` itself if it is a checkpoint file."""
    path = Path(where)
    path = path / CHECKPOINT_NAME if path.is_dir() else path
    if not path.is_file():
        raise RunError(f"no checkpoint at {path}; give a run folder or a {CHECKPOINT_NAME} file.")
    return path


@dataclasses.dataclass(frozen=True)
class Run:
    """A run as its folder keeps it: open one with
    [`Run.open`][eqx_fmnist.runs.reading.Run.open].

    **Fields:** `checkpoint` (its path), `saved` (the
    [`Checkpoint`][eqx_fmnist.checkpoint.Checkpoint]: state, config, members) and
    `calibration` (the [`Calibration`][eqx_fmnist.calibration.Calibration] saved beside
    it, or `None` for a run trained without `calibration_size`).

    !!! example

        ```python
        run = ef.runs.Run.open("runs/a")
        said = run.answer(images)  # probabilities, trust flag, prediction sets
        ```
    """

    checkpoint: Path
    saved: Checkpoint
    calibration: Calibration | None

    @classmethod
    def open(cls, where: str | os.PathLike) -> "Run":
        """The run in folder `where` (or of the checkpoint file `where`).

        **Raises:**

        `RunError` when there is no checkpoint, a calibration beside it fitted for
        another checkpoint, or none beside a finished run that was calibrated; `CheckpointError` for one that is not a checkpoint of this
        library.
        """
        path = checkpoint_path(where)
        saved = load_checkpoint(path)
        file = path.parent / CALIBRATION_FILE
        calibration = Calibration.load(file) if file.is_file() else None
        held_out = saved.config.calibration_size
        if calibration is None and held_out and (path.parent / "summary.json").is_file():
            raise RunError(
                f"{file} is missing, though the run was calibrated (calibration_size "
                f"{held_out:,}): restore it, or train again with --calibrate."
            )
        if calibration is not None and calibration.checkpoint not in (
            None,
            saved.metadata["payload_sha256"],
        ):
            raise RunError(
                f"{file} was fitted for another checkpoint than {path} (a file left by an "
                "earlier run): delete it, or train again with --calibrate."
            )
        return cls(path, saved, calibration)

    @property
    def folder(self) -> Path:
        return self.checkpoint.parent

    @property
    def config(self) -> TrainConfig:
        return self.saved.config

    @property
    def members(self) -> tuple[TrainConfig, ...] | None:
        """The members' configs (an ensemble, cv's folds, a sweep's winner), else
        `None`."""
        members = self.saved.members
        winner = self.winner
        return members if members is None or winner is None else tuple(members[i] for i in winner)

    @property
    def winner(self) -> list[int] | None:
        """For a sweep, the members of the point its table ranks first (the `best` of
        its `summary.json`), one per seed: what its evaluation, answers and exports use;
        `None` for any other run.

        **Raises:**

        `RunError` for a sweep without a summary naming its winner (not finished).
        """
        choice = self.choice
        file = self.folder / "summary.json"
        if choice is None:
            return None
        try:
            return choice.answering(len(self.saved.members or ()), lambda: _json(file))
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise RunError(
                f"{self.folder} is a {choice.kind} run without a finished {file.name} naming "
                f"the members that answer for it ({e}): finish it (`--resume "
                f"{self.checkpoint}`) first."
            ) from None

    @property
    def choice(self) -> Members | None:
        """What its members are (`Seeds`, `Grid`, `Folds`, ...), as the checkpoint
        recorded it, for a resume; `None` for one run."""
        if self.saved.members is None:
            return None
        return members_from(self.saved.choice, self.saved.members)

    @property
    def step(self) -> int:
        return self.saved.step

    @property
    def state(self) -> TrainState:
        return self.saved.state

    @property
    def model(self) -> Model:
        """What evaluation uses: the weight average if the run kept one; a sweep's
        winner's members ([`winner`][eqx_fmnist.runs.reading.Run.winner])."""
        model = self.saved.state.eval_model
        winner = self.winner
        return model if winner is None else select_members(model, winner)

    @property
    def policy(self) -> Policy:
        return self.saved.state.policy

    def views(self, tta: str | None = None) -> tuple[Move, ...] | None:
        """The views to average over: those `tta` names (a name in `TTA_VIEWS`), else
        the run's (its calibration's, or its config's).

        **Raises:**

        `ViewsError` for views other than a calibration's
        ([`Calibration.views`][eqx_fmnist.calibration.Calibration.views]).
        """
        if tta is not None and tta not in TTA_VIEWS:
            raise ValueError(f"`tta` must be one of {', '.join(TTA_VIEWS)}, but got {tta!r}.")
        named = None if tta is None else TTA_VIEWS[tta]
        if self.calibration is None:
            return self.config.views if tta is None else named
        return self.calibration.views(None if tta is None else (named or ()))

    def answer(
        self,
        images: Shaped[Array | np.ndarray, "n ..."],
        *,
        tta: str | None = None,
        members: bool = False,
        attributions: bool = False,
    ) -> Answer:
        """[`answer`][eqx_fmnist.answers.answer] of the run's model on images `(n, 784)`
        or `(n, 28, 28)`, with its calibration and [`views`][eqx_fmnist.runs.reading.Run.views]."""
        return answer(
            self.model,
            images,
            policy=self.policy,
            calibration=self.calibration,
            tta=self.views(tta),
            members=members and self.members is not None,
            attributions=attributions,
        )

    def export(
        self,
        out: str | os.PathLike | None = None,
        *,
        format: str = "stablehlo",
        tta: str | None = None,
        data: DataSource = None,
        overwrite: bool = False,
    ) -> tuple[Path, dict[str, Any]]:
        """What `eqx-fmnist export` does: [`export_model`][eqx_fmnist.export.check.export_model]
        of the run's model (or ensemble; a sweep's winner) with its calibration and
        [`views`][eqx_fmnist.runs.reading.Run.views], checked on every test image of
        `data` (as for `Training.new`), its test accuracy and step in the manifest. `out`:
        defaults to `RUN/model.<suffix>`; an artifact or manifest there already is
        replaced only with `overwrite`, and what an export did not write never
        ([`refuse_overwriting`][eqx_fmnist.runs.record.refuse_overwriting]). The run is
        read and the artifact and its manifest written together under the run folder's
        lock ([`writing`][eqx_fmnist.runs.reading.Run.writing]).
        Returns the artifact's path and its manifest."""
        views = self.views(tta)
        suffix = FORMATS[format].suffix if format in FORMATS else ""  # else export_model says
        out = self.folder / f"model{suffix}" if out is None else Path(out)
        paths = [out, manifest_path(out)]
        refuse_overwriting(paths, own=self.folder, overwrite=overwrite, by="export")
        data = loaded(data)
        with self.writing(paths, by="export", overwrite=overwrite):
            return out, self._export(out, format, views, data)

    def _export(self, out: Path, format: str, views, data: FashionMNIST) -> dict[str, Any]:
        test = evaluate(self.model, to_datasets(data)[1], policy=self.policy, tta=views)
        images = data.test_images.reshape(len(data.test_images), -1)
        about = {"test_accuracy": test.accuracy, "step": self.step}
        return export_model(
            self.model,
            self.policy,
            self.config,
            out,
            format=format,
            calibration=self.calibration,
            tta=views or (),  # (): none, even if the config has some
            check_images=images,
            extra=about | {"trained": f"{self.step:,} steps"},
        )

    @contextlib.contextmanager
    def locked(self) -> Iterator["Run"]:
        """Hold the run folder's lock (as a run training there holds it) while a command
        writes into the folder (an export, `evaluate`'s figures, an audit): stale
        temporaries of a killed writer go first, and the run there must still be the one
        read (`RunError` if it was trained again meanwhile, or another process writes)."""
        try:
            with FolderLock(self.folder / LOCK_NAME):
                remove_stale_parts(self.folder)
                if digest_or_none(self.checkpoint) != self.saved.metadata["payload_sha256"]:
                    raise RunError(
                        f"{self.folder} holds another run than the one read (it was trained "
                        "again meanwhile): run the command again."
                    )
                yield self
        except FolderInUse as e:
            raise RunError(str(e)) from None

    @contextlib.contextmanager
    def writing(
        self, paths: Sequence[Path], *, by: str, overwrite: bool = False, lock: bool = True
    ) -> Iterator["Run"]:
        """While inside, the command `by` writes `paths`: with the run folder's lock held
        ([`locked`][eqx_fmnist.runs.reading.Run.locked]; always for those in the folder,
        else as `lock` says), the paths checked again under it
        ([`refuse_overwriting`][eqx_fmnist.runs.record.refuse_overwriting]), and those in
        the folder claimed in its [record][eqx_fmnist.runs.record.Record] before they are
        written and sealed after."""
        inside = [p.name for p in paths if p.parent.resolve() == self.folder.resolve()]
        with self.locked() if lock or inside else contextlib.nullcontext():
            refuse_overwriting(paths, own=self.folder, overwrite=overwrite, by=by)
            record = Record.read(self.folder)
            if inside:
                record.claim(inside, by)
            try:
                yield self
            finally:
                if inside:
                    record.seal()

    def teacher(self) -> Path | None:
        """The checkpoint of the teacher a distilled run learnt from (`teacher.json`),
        else `None` ([`read_teacher`][eqx_fmnist.runs.reading.read_teacher])."""
        return read_teacher(self.folder)


def open_teacher(where: str | os.PathLike, config: TrainConfig) -> tuple[Path, Model]:
    """`(checkpoint, model)` of the run `where` names as a teacher (its weight average,
    if it kept one), checked against the student's `config` before anything is written.

    **Raises:**

    `RunError` naming what is wrong: no checkpoint, not a checkpoint of this library,
    or a teacher this student cannot learn from.
    """
    try:
        run = Run.open(where)
    except RunError:
        raise
    except (ValueError, OSError) as e:
        raise RunError(f"{where} is not a run this library wrote: {e}") from None
    try:
        Teacher.for_student(run.model, config)
    except ValueError as e:
        raise RunError(str(e)) from None
    return run.checkpoint, run.model


def opened_teacher(
    where: str | os.PathLike | None, config: TrainConfig
) -> tuple[Path, Model] | None:
    """`open_teacher`'s answer for a run that names a teacher, its error naming it (for
    a new run and a resume)."""
    if where is None:
        return None
    try:
        return open_teacher(where, config)
    except RunError as e:
        raise RunError(f"the teacher {where}: {e}") from None


def _json(file: Path) -> Any:
    return json.loads(file.read_text())
