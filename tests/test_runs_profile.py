"""`runs.profile`: `IntervalProfiler`, `train --profile`'s callback, traces logging
intervals 2 and 3 (the steady state) of a run in the library, and a run of one interval
whole: the trace's own record of which compiled chunks ran says so."""

import gzip
import json
import re

import pytest


def _chunks_traced(trace) -> int:
    """How many runs of the training chunk (`jit(_steps)`) the Perfetto trace holds: on a
    CPU its operations name their module (`hlo_module`); on a TPU the device's line holds
    one event per run of the module, named `jit__steps(<fingerprint>)`."""
    with gzip.open(trace, "rt") as f:
        events = json.load(f)["traceEvents"]
    runs = {
        e["args"]["run_id"]
        for e in events
        if e.get("args", {}).get("hlo_module") == "jit__steps"
        or re.fullmatch(r"jit__steps\(\d+\)", e.get("name", ""))
    }
    return len(runs)


@pytest.mark.parametrize("steps", [32, 8])
def test_the_profiler_traces_intervals_two_and_three_or_a_lone_interval_whole(
    small, tmp_path, steps
):
    """Four intervals: the trace starts after the first (whose chunk has finished: its
    metrics were read) and the profiler ends it after the third, so it holds the second
    and third chunks, and perhaps the fourth, already started; one interval: the whole
    run, until `stop` (compiled before: a trace that spans XLA's compile of the run holds
    about a million events of it, the profiler's limit, and drops the chunk's own)."""
    import eqx_fmnist as ef
    from eqx_fmnist.runs.profile import IntervalProfiler

    from helpers import small_config

    config = small_config(steps=steps)  # intervals of 8 steps: 4 of them, or 1
    intervals = steps // config.log_every
    ef.fit(config, ef.Splits(small))  # the programs compiled, outside the trace
    profiler = IntervalProfiler(tmp_path / "profile", total_intervals=intervals)
    assert profiler.on == (intervals == 1)  # a lone interval is traced from the start
    try:
        ef.fit(config, ef.Splits(small), callback=profiler)
        assert profiler.on == (intervals == 1)  # after the third: ended by itself
    finally:
        trace = profiler.stop()
    assert not profiler.on and trace is not None and trace == profiler.trace
    assert _chunks_traced(trace) in ({2, 3} if intervals == 4 else {1})
