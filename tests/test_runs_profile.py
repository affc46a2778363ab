"""`runs.profile`: `IntervalProfiler`, `train --profile`'s callback, traces logging
intervals 2 and 3 (the steady state) of a run in the library, and a run of one interval
whole: the trace's own record of which compiled chunks ran says so."""

import gzip
import json

import pytest


def _chunks_traced(trace) -> int:
    """How many runs of the training chunk (`jit(_steps)`) the Perfetto trace holds."""
    with gzip.open(trace, "rt") as f:
        events = json.load(f)["traceEvents"]
    runs = {
        e["args"]["run_id"] for e in events if e.get("args", {}).get("hlo_module") == "jit__steps"
    }
    return len(runs)


@pytest.mark.parametrize("steps, traced", [(32, 2), (8, 1)])
def test_the_profiler_traces_intervals_two_and_three_or_a_lone_interval_whole(
    small, tmp_path, steps, traced
):
    import eqx_fmnist as ef
    from eqx_fmnist.runs.profile import IntervalProfiler

    from helpers import small_config

    config = small_config(steps=steps)  # intervals of 8 steps: 4 of them, or 1
    intervals = steps // config.log_every
    profiler = IntervalProfiler(tmp_path / "profile", total_intervals=intervals)
    assert profiler.on == (intervals == 1)  # a lone interval is traced from the start
    try:
        ef.fit(config, ef.Splits(small), callback=profiler)
    finally:
        trace = profiler.stop()
    assert not profiler.on and trace is not None and trace == profiler.trace
    assert _chunks_traced(trace) == traced
