"""The kind of run `eqx-fmnist train` makes: one model, or an ensemble of seeds trained
as one program, evaluated on the test set by its report's program, and calibrated when
the run holds out a calibration split."""

import dataclasses
from collections.abc import Sequence
from typing import Any

from ..calibration import Calibration, calibrate
from ..config import TrainConfig
from ..dataset import Splits
from ..hooks import Members
from ..intervals import Callback
from ..model import Model
from ..state import TrainState
from ..train import TrainResult, fit
from .kind import Job, RunKind
from .layout import FIGURES
from .report import RunReport, report_program, run_report


@dataclasses.dataclass
class RunResult:
    """What [`train_run`][eqx_fmnist.runs.train_run] returns: the training's result,
    its calibration when the run held out a calibration split, and its test report
    (`None` without a test set)."""

    result: TrainResult
    calibration: Calibration | None
    report: RunReport | None = None


def train_run(
    config: TrainConfig,
    splits: Splits,
    *,
    members: Members | None = None,
    state: TrainState | None = None,
    callback: Callback | Sequence[Callback] | None = None,
    teacher: Model | None = None,
) -> RunResult:
    """Train on `splits` ([`fit`][eqx_fmnist.train.fit]: one run, or `members`), with
    the test report's program as `fit`'s test program
    ([`report_program`][eqx_fmnist.runs.report.report_program]: `result.test` and the
    report come from one program over the test images); if the splits hold a
    calibration set, calibrate the model or the ensemble on it
    ([`calibrate`][eqx_fmnist.calibration.calibrate]); then the test report
    ([`run_report`][eqx_fmnist.runs.report.run_report]). A `teacher` is distilled (see
    `fit`)."""
    result = fit(
        config,
        splits,
        members=members,
        state=state,
        callback=callback,
        teacher=teacher,
        test_program=report_program,
    )
    calibration = None
    if splits.calibration is not None:
        calibration = calibrate(
            result.model,
            splits.train,
            splits.calibration,
            policy=result.policy,
            coverage=config.coverage,
            per_class=config.per_class_sets,
            tta=config.views,
        )
    if splits.test is None or result.test is None:
        return RunResult(result, calibration)
    report = run_report(
        result.model,
        result.policy,
        splits.test.images,
        splits.test.labels,
        calibration,
        tta=config.views,
        scored=(result.test, result.tested),
    )
    return RunResult(result, calibration, report)


def _train(job: Job, callbacks: Sequence[Callback]) -> RunResult:
    return train_run(
        job.config,
        job.splits,
        members=job.members,
        state=job.state,
        callback=callbacks,
        teacher=job.teacher_model,
    )


def _finish(job: Job, outcome: RunResult) -> dict[str, Any]:
    assert outcome.report is not None, "a run folder's run is tested"
    return job.folder.finish(outcome.result, job.data, outcome.report, outcome.calibration)


def _what(job: Job) -> str:
    config = job.config
    members = job.members
    parts = [job.length, config.precision, f"seed {config.seed}"]
    if members is not None:
        configs = members.configs(config)
        seeds = _seeds(configs)
        parts[-1] = f"{len(configs)} members in one program (seeds {seeds}){job.spread()}"
    if config.calibration_size:
        parts.append(f"{config.calibration_size:,} images held out to calibrate")
    if job.teacher is not None:
        parts.append(f"distilled from {job.teacher}")
    return ", ".join(parts)


def _seeds(configs: Sequence[TrainConfig]) -> str:
    """The members' seeds: `0-4` for a range of more than two, else `0,2,3`."""
    seeds = sorted({c.seed for c in configs})
    if seeds == list(range(seeds[0], seeds[-1] + 1)) and len(seeds) > 2:
        return f"{seeds[0]}-{seeds[-1]}"
    return ",".join(map(str, seeds))


ONE_RUN = RunKind("train", "run", frozenset(), _train, _finish, _what, FIGURES)
"""One model, or members of any choice no other kind takes (seeds, bootstrap)."""
