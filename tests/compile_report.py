"""The suite's compile report: what XLA compiled, for which test, and at what cost.

JAX reports every backend compile through `jax.monitoring` (the duration event
`/jax/core/compile/backend_compile_duration`, which also spans a load from the persistent
cache; a load is told apart by the `/jax/compilation_cache/cache_hits` event fired inside
it). A listener registered once per process adds each to the test running at the time;
xdist workers send their totals to the controller, which prints one section at the end of
the run beside `--durations`: programs compiled and their seconds, programs loaded from
the persistent cache, time spent tracing and lowering, the ten tests that compiled the
most, the programs that cost the most to compile (by name: `jit(_steps)` is a training
chunk), the lines of the tests that asked for the most programs (an operation run
eagerly compiles one of its own for each shape it meets), and each process's resident
memory at the end. `EQX_FMNIST_COMPILE_DUMP=FILE` also writes every process's raw tallies (one JSON line each) for a closer look.

Subprocesses the tests start (the CLI in a process of its own, the two-process tests)
compile in their own interpreters; their time shows in `--durations`, not here.
"""

import json
import os
import resource
import sys
from collections import defaultdict

import jax

_COMPILE = "/jax/core/compile/backend_compile_duration"
_TRACE = "/jax/core/compile/jaxpr_trace_duration"
_LOWER = "/jax/core/compile/jaxpr_to_mlir_module_duration"
_HIT = "/jax/compilation_cache/cache_hits"

OUTSIDE = "(outside any test: collection, session fixtures' teardown)"
_TESTS = os.path.dirname(os.path.abspath(__file__))
_OWN = {os.path.join(_TESTS, name) for name in ("conftest.py", "compile_report.py")}


def _test_line() -> str:
    """Where in the tests the program being compiled was asked for: the innermost frame
    in a test file or a test helper (`test_x.py:LINE`), or `(library)` for a program a
    library thread compiled on its own."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith(_TESTS) and name not in _OWN:
            return f"{os.path.relpath(name, _TESTS)}:{frame.f_lineno}"
        frame = frame.f_back
    return "(library)"


class Tally:
    """Per-test totals: `compiled`, `compile_s`, `loaded`, `load_s`, `trace_s`."""

    def __init__(self):
        self.current = OUTSIDE
        self.tests: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.programs: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
        self.by_test: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.lines: dict[str, int] = defaultdict(int)
        self._hit = False

    def on_event(self, event: str, **kwargs) -> None:
        if event == _HIT:
            self._hit = True

    def on_duration(self, event: str, duration: float, **kwargs) -> None:
        row = self.tests[self.current]
        if event == _COMPILE:
            kind = "loaded" if self._hit else "compiled"
            row[kind] += 1
            row["load_s" if self._hit else "compile_s"] += duration
            if not self._hit:
                name = kwargs.get("fun_name", "?")
                program = self.programs[name]
                program[0] += 1
                program[1] += duration
                self.by_test[self.current][name] += 1
                self.lines[_test_line()] += 1
            self._hit = False
        elif event in (_TRACE, _LOWER):
            row["trace_s"] += duration

    def install(self) -> None:
        jax.monitoring.register_event_listener(self.on_event)
        jax.monitoring.register_event_duration_secs_listener(self.on_duration)

    def payload(self) -> str:
        with open("/proc/self/statm") as f:
            rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        return json.dumps(
            {
                "tests": {k: dict(v) for k, v in self.tests.items()},
                "programs": dict(self.programs),
                "by_test": {k: dict(v) for k, v in self.by_test.items()},
                "lines": dict(self.lines),
                "rss": rss,
                "peak": peak,
            }
        )


def merge(payloads: list[str]):
    """Every process's per-test rows in one table, its programs in another (name:
    `[count, seconds]`), the lines of the tests that asked for them (line: count), and
    each process's (rss, peak)."""
    tests: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    programs: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    lines: dict[str, int] = defaultdict(int)
    memory = []
    for text in payloads:
        data = json.loads(text)
        memory.append((data["rss"], data["peak"]))
        for line, count in data.get("lines", {}).items():
            lines[line] += count
        for name, row in data["tests"].items():
            for field, value in row.items():
                tests[name][field] += value
        for name, (count, seconds) in data["programs"].items():
            programs[name][0] += count
            programs[name][1] += seconds
    return tests, programs, lines, memory


def write_report(write_line, tests, programs, lines, memory, top: int = 10) -> None:
    total = defaultdict(float)
    for row in tests.values():
        for field, value in row.items():
            total[field] += value
    write_line(
        f"{int(total['compiled'])} programs compiled in {total['compile_s']:.1f} s; "
        f"{int(total['loaded'])} loaded from the persistent cache in {total['load_s']:.1f} s; "
        f"tracing and lowering {total['trace_s']:.1f} s"
    )
    costly = sorted(tests.items(), key=lambda kv: -kv[1].get("compile_s", 0.0))[:top]
    if costly:
        write_line(f"the {len(costly)} tests that compiled the most (seconds, programs):")
    for name, row in costly:
        write_line(f"  {row.get('compile_s', 0.0):7.1f} s {int(row.get('compiled', 0)):4d}  {name}")
    costly = sorted(programs.items(), key=lambda kv: -kv[1][1])[:top]
    write_line("the programs that cost the most to compile (seconds, times compiled):")
    for name, (count, seconds) in costly:
        write_line(f"  {seconds:7.1f} s {int(count):4d}  {name}")
    write_line("the lines of the tests that compiled the most programs (programs):")
    for line, count in sorted(lines.items(), key=lambda kv: -kv[1])[:top]:
        write_line(f"  {count:4d}  {line}")
    for i, (rss, peak) in enumerate(memory):
        write_line(
            f"process {i}: {rss / 2**30:.2f} GiB resident at the end (peak {peak / 2**30:.2f} GiB)"
        )
