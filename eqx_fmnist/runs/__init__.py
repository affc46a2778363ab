"""Runs: what a training run is on disk and how the command line makes one.

The modules: `folder` ([`RunFolder`][eqx_fmnist.runs.RunFolder]: the lock, the config,
one history line per logging interval, checkpoints on a cadence of their own, clean
stops, the summary and the figures), `report` (the test report a folder writes and `evaluate` shows: [`run_report`][eqx_fmnist.runs.report.run_report]), `summary` (the summary's numbers, TensorBoard,
[`RunError`][eqx_fmnist.runs.RunError]) and `run` (the splits a config asks for, the
training, and the calibration after it). Nothing here prints.
"""

from .folder import (
    FIGURES as FIGURES,
    LOCK_NAME as LOCK_NAME,
    RESULT_FILES as RESULT_FILES,
    SWEEP_FILES as SWEEP_FILES,
    CheckpointEvery as CheckpointEvery,
    Interrupted as Interrupted,
    RunFolder as RunFolder,
    default_folder as default_folder,
    read_history as read_history,
)
from .report import RunReport as RunReport, run_report as run_report
from .run import RunResult as RunResult, run_splits as run_splits, train_run as train_run
from .summary import (
    CHECKPOINT_NAME as CHECKPOINT_NAME,
    TOKENS_PER_EXAMPLE as TOKENS_PER_EXAMPLE,
    RunError as RunError,
    summarise as summarise,
    tensorboard_writer as tensorboard_writer,
)
