"""Runs: what a training run is on disk, and how one is started, trained and read back.

The write side: `training` ([`Training.new`][eqx_fmnist.runs.training.Training.new],
[`Training.resume`][eqx_fmnist.runs.training.Training.resume] and
[`Training.run`][eqx_fmnist.runs.training.Training.run]: a run started or resumed,
trained in its folder and finished by its kind) over the kinds of run (`kind`: the
[`RunKind`][eqx_fmnist.runs.kind.RunKind] record; `one_run`, `sweep_run`, `cv_run`: one
module each, in one registry, [`KINDS`][eqx_fmnist.runs.training.KINDS]) over `writing`
([`RunFolder`][eqx_fmnist.runs.RunFolder]: the lock, the config, one history line per
logging interval, checkpoints on a cadence of their own, clean stops, the summary and
the figures). The read side: `reading` (a run folder read back,
[`Run.open`][eqx_fmnist.runs.reading.Run.open]: its model, calibration, views, answer,
export and teacher; the splits and data a run uses), which imports nothing of the write
side. Beside them: `layout` (what a run folder holds, and the readers of the files a
run reads back), `record` (the folder's record of what its commands wrote: what
`--overwrite` removes, and the rule that no command writes over what it did not
write), `report` (the test report a folder writes and `evaluate` shows, and its program:
[`run_report`][eqx_fmnist.runs.report.run_report]), `summary` (the summary's numbers
and where the run's time went), `cadence` (when to checkpoint, why a run
stopped), `files` (`audit_run` and what an audit writes)
and `profile` (`train --profile`'s trace). Nothing here prints.
"""

from .cadence import CheckpointEvery as CheckpointEvery, Interrupted as Interrupted
from .cv_run import CV_FILES as CV_FILES, write_cross_validation as write_cross_validation
from .files import (
    MAX_TOP as MAX_TOP,
    audit_run as audit_run,
    read_out_of_fold as read_out_of_fold,
    suspect_files as suspect_files,
    write_suspects as write_suspects,
)
from .kind import Job as Job, RunKind as RunKind
from .layout import (
    CHECKPOINT_NAME as CHECKPOINT_NAME,
    FIGURES as FIGURES,
    LOCK_NAME as LOCK_NAME,
    OUT_OF_FOLD as OUT_OF_FOLD,
    TEACHER_FILE as TEACHER_FILE,
    RunError as RunError,
    distinct_stems as distinct_stems,
    read_history as read_history,
    read_teacher as read_teacher,
)
from .one_run import RunResult as RunResult, train_run as train_run
from .reading import (
    DataSource as DataSource,
    Run as Run,
    checkpoint_path as checkpoint_path,
    open_teacher as open_teacher,
    run_splits as run_splits,
)
from .record import Record as Record, refuse_overwriting as refuse_overwriting
from .report import (
    RunReport as RunReport,
    report_program as report_program,
    run_report as run_report,
)
from .summary import (
    TIME_SPLIT as TIME_SPLIT,
    TOKENS_PER_EXAMPLE as TOKENS_PER_EXAMPLE,
    summarise as summarise,
    tensorboard_writer as tensorboard_writer,
    time_split as time_split,
)
from .sweep_run import (
    SWEEP_FILES as SWEEP_FILES,
    sweep_heatmap as sweep_heatmap,
    write_sweep as write_sweep,
)
from .training import (
    KINDS as KINDS,
    TEACHER_FOLDER as TEACHER_FOLDER,
    Finished as Finished,
    Training as Training,
    kind_for as kind_for,
    teacher_training as teacher_training,
)
from .writing import (
    RunFolder as RunFolder,
    default_folder as default_folder,
    refuse_results as refuse_results,
)
