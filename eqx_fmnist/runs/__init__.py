"""Runs: what a training run is on disk and how the command line makes one.

The modules: `folder` ([`RunFolder`][eqx_fmnist.runs.RunFolder]: the lock, the config,
one history line per logging interval, checkpoints on a cadence of their own, clean
stops, the summary and the figures), `report` (the test report a folder writes and `evaluate` shows: [`run_report`][eqx_fmnist.runs.report.run_report]), `summary` (the summary's numbers, TensorBoard,
[`RunError`][eqx_fmnist.runs.RunError]), `run` (the splits a config asks for, the
training, and the calibration after it), `saved` (a run folder read back:
[`Run.open`][eqx_fmnist.runs.saved.Run.open], its model, calibration, views, answer and
teacher), `start` (a run started or resumed, trained in its folder and finished:
[`Run.new`][eqx_fmnist.runs.saved.Run.new], [`Run.resume`][eqx_fmnist.runs.saved.Run.resume],
[`Training`][eqx_fmnist.runs.start.Training]) and `files` (what a sweep, `cv` and `audit` write beside the folder's own files). Nothing here prints.
"""

from .cadence import CheckpointEvery as CheckpointEvery, Interrupted as Interrupted
from .files import (
    OUT_OF_FOLD as OUT_OF_FOLD,
    SWEEP_FILES as SWEEP_FILES,
    read_out_of_fold as read_out_of_fold,
    sweep_heatmap as sweep_heatmap,
    write_cross_validation as write_cross_validation,
    write_suspects as write_suspects,
    write_sweep as write_sweep,
)
from .folder import (
    FIGURES as FIGURES,
    LOCK_NAME as LOCK_NAME,
    RESULT_FILES as RESULT_FILES,
    TEACHER_FILE as TEACHER_FILE,
    RunFolder as RunFolder,
    default_folder as default_folder,
    refuse_results as refuse_results,
)
from .report import (
    TIME_SPLIT as TIME_SPLIT,
    RunReport as RunReport,
    run_report as run_report,
    time_split as time_split,
)
from .run import RunResult as RunResult, run_splits as run_splits, train_run as train_run
from .saved import (
    Run as Run,
    audit_run as audit_run,
    checkpoint_path as checkpoint_path,
    open_teacher as open_teacher,
    read_teacher as read_teacher,
)
from .start import (
    TEACHER_FOLDER as TEACHER_FOLDER,
    Finished as Finished,
    Outcome as Outcome,
    Training as Training,
    teacher_training as teacher_training,
)
from .summary import (
    CHECKPOINT_NAME as CHECKPOINT_NAME,
    TOKENS_PER_EXAMPLE as TOKENS_PER_EXAMPLE,
    RunError as RunError,
    read_history as read_history,
    summarise as summarise,
    tensorboard_writer as tensorboard_writer,
)
