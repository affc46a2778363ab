"""The kind of run `eqx-fmnist cv` makes: K-fold cross-validation, the folds as members
of one program, with the out-of-fold probabilities of every training image written for
`eqx-fmnist audit`."""

from collections.abc import Sequence
from typing import Any, cast

from ..ensemble import CrossValidation, Folds, cross_validate
from ..intervals import Callback
from .files import write_cross_validation
from .kind import Job, RunKind
from .report import report_program, run_report


def _train(job: Job, callbacks: Sequence[Callback]) -> CrossValidation:
    folds = cast(Folds, job.members)  # the registry gives this kind only folds
    return cross_validate(
        job.config,
        job.splits,
        folds.k,
        callback=callbacks,
        state=job.state,
        test_program=report_program,
    )


def _finish(job: Job, outcome: CrossValidation) -> dict[str, Any]:
    """The folds' ensemble's test report (from the program `fit` ran), the folder's
    files, and the out-of-fold file and the folds' figures."""
    result = outcome.result
    test = job.splits.test
    assert result.test is not None and test is not None, "a cv folder's run is tested"
    report = run_report(
        result.model,
        result.policy,
        test.images,
        test.labels,
        tta=job.config.views,
        scored=(result.test, result.tested),
    )
    summary = job.folder.finish(result, job.data, report)
    write_cross_validation(job.folder.folder, outcome)
    return summary


def _what(job: Job) -> str:
    folds = len(cast(Folds, job.members).configs(job.config))
    return (
        f"{folds} folds of {len(job.splits.train):,} images ({job.folder.num_train:,} "
        f"to train on each), {job.total_steps:,} steps, one program{job.spread()}"
    )


CV_RUN = RunKind("cv", "cv", frozenset({Folds.kind}), _train, _finish, _what)
"""K-fold cross-validation."""
