"""Honest throughput: the harness (`timing`), the loops the library replaces
(`baselines`), the suite of comparisons (`suite`) and its tables (`report`).

Every comparison is measured in one process, in interleaved repetitions, as a median;
every report names the machine it came from.
"""

from .baselines import codelab_trainer as codelab_trainer, pytorch_trainer as pytorch_trainer
from .report import BenchmarkReport as BenchmarkReport, Cadence as Cadence
from .suite import (
    compare_training as compare_training,
    fit_cadence as fit_cadence,
    library_fused_trainer as library_fused_trainer,
    library_step_trainer as library_step_trainer,
    run_benchmark as run_benchmark,
    time_to_accuracy as time_to_accuracy,
)
from .timing import (
    TOKENS_PER_EXAMPLE as TOKENS_PER_EXAMPLE,  # from eqx_fmnist.runs
    MatmulBound as MatmulBound,
    Throughput as Throughput,
    machine_facts as machine_facts,
    matmul_bound as matmul_bound,
    matmul_flops_per_example as matmul_flops_per_example,
    matmul_shapes as matmul_shapes,
    measure as measure,
    measure_interleaved as measure_interleaved,
)
