"""A `jax.profiler` trace of a run's steady state: the callback of `eqx-fmnist train
--profile` ([`IntervalProfiler`][eqx_fmnist.runs.profile.IntervalProfiler]).

The training step names its parts with `jax.named_scope` (`gather`, `forward`,
`optimizer`; JAX names the backward pass `transpose(jvp(forward))`), so the trace,
opened at https://ui.perfetto.dev, shows where a compiled chunk spends its time.
"""

import os
from pathlib import Path


def find_trace(folder: str | os.PathLike) -> Path | None:
    """The newest `perfetto_trace.json.gz` that `jax.profiler` wrote under `folder`."""
    found = sorted(Path(folder).glob("plugins/profile/*/perfetto_trace.json.gz"))
    return found[-1] if found else None


class IntervalProfiler:
    """A `fit` callback that traces logging intervals 2 and 3 with `jax.profiler`: the
    steady state, after the first interval. A run of one interval is traced whole.

    Call [`stop`][eqx_fmnist.runs.profile.IntervalProfiler.stop] when `fit` returns or
    raises; the trace is then at [`trace`][eqx_fmnist.runs.profile.IntervalProfiler.trace].
    """

    def __init__(self, folder: str | os.PathLike, total_intervals: int):
        """**Arguments:**

        - `folder`: where `jax.profiler` writes (`folder/plugins/profile/<time>/`).
        - `total_intervals`: the run's logging intervals.
        """
        self.folder = Path(folder)
        self.seen = 0
        self.on = False
        if total_intervals < 2:
            self._start()

    def _start(self) -> None:
        import jax

        jax.profiler.start_trace(str(self.folder), create_perfetto_trace=True)
        self.on = True

    def __call__(self, record, state) -> None:
        self.seen += 1
        if self.seen == 1 and not self.on:
            self._start()
        elif self.on and self.seen >= 3:
            self.stop()

    def stop(self) -> Path | None:
        """End the trace, if one is running; returns the trace written, if any."""
        if self.on:
            import jax

            jax.profiler.stop_trace()
            self.on = False
        return self.trace

    @property
    def trace(self) -> Path | None:
        """The Perfetto trace written, if any."""
        return find_trace(self.folder)
