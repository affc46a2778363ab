"""The benchmark harness, beside the scripts that use it and outside the installed
package (as Flax keeps its training benchmark beside its example): the timing
(`timing`: medians of interleaved repetitions, the machine a figure came from, the
matmul bound), the device's peaks and the step's roofline (`roofline`), the library's
training paths measured side by side (`suite`) and their tables and figure (`report`).

Every comparison is measured in one process, in interleaved repetitions, as a median;
every report names the machine it came from. The scripts import it from their folder
(`from harness import machine_line`); `python benchmarks/throughput.py` adds the loops
the library replaces (the codelab's and PyTorch's, `baselines.py`) to the library's
paths.
"""

from .report import (
    BenchmarkReport as BenchmarkReport,
    Cadence as Cadence,
    write_results as write_results,
)
from .roofline import (
    DevicePeaks as DevicePeaks,
    Roofline as Roofline,
    measure_peaks as measure_peaks,
    step_roofline as step_roofline,
    step_traffic as step_traffic,
)
from .suite import (
    TRAINERS as TRAINERS,
    compare_training as compare_training,
    fit_cadence as fit_cadence,
    library_fused_trainer as library_fused_trainer,
    library_step_trainer as library_step_trainer,
    main_job_rows as main_job_rows,
    run_benchmark as run_benchmark,
)
from .timing import (
    TOKENS_PER_EXAMPLE as TOKENS_PER_EXAMPLE,  # from eqx_fmnist.runs
    MatmulBound as MatmulBound,
    Throughput as Throughput,
    machine_facts as machine_facts,
    machine_line as machine_line,
    matmul_bound as matmul_bound,
    matmul_flops_per_example as matmul_flops_per_example,
    matmul_shapes as matmul_shapes,
    measure as measure,
    measure_interleaved as measure_interleaved,
)
