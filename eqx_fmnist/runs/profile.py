"""Where a compiled chunk spends its time: a `jax.profiler` trace, summed by the
`jax.named_scope`s of the training step.

The step names its parts: `gather` (the batch's indices and rows), `forward` (the
model and the loss), the backward pass (JAX names it `transpose(jvp(forward))`) and
`optimizer` (AdamW). A trace records each XLA operation under its HLO name (such as
`ynn_fusion.4`); the compiled program's HLO text says which scope every operation came
from. [`time_by_scope`][eqx_fmnist.runs.profile.time_by_scope] joins the two.
"""

import gzip
import json
import os
import re
from pathlib import Path

SCOPES = ("gather", "forward", "backward", "optimizer", "other")
"""The parts of a training step, as a profile summary names them."""

_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=.*?op_name=\"([^\"]*)\"")


def scope_of(op_name: str) -> str:
    """The part of the step an operation belongs to, from its `op_name` (the JAX name
    stack, e.g. `jit(_steps)/while/body/transpose(jvp(forward))/dot_general`)."""
    parts = op_name.split("/")
    if "gather" in parts:
        return "gather"
    if any(p.startswith("transpose(") and "forward" in p for p in parts):
        return "backward"
    if any(p in ("forward", "jvp(forward)") for p in parts):
        return "forward"
    if "optimizer" in parts:
        return "optimizer"
    return "other"


def hlo_op_scopes(hlo_text: str) -> dict[str, str]:
    """`{HLO instruction name: scope}` for every instruction of a compiled program's
    text (`compiled.as_text()`) that carries an `op_name`."""
    scopes = {}
    for line in hlo_text.splitlines():
        match = _INSTRUCTION.match(line)
        if match:
            scopes[match.group(1)] = scope_of(match.group(2))
    return scopes


def find_trace(folder: str | os.PathLike) -> Path | None:
    """The newest `perfetto_trace.json.gz` that `jax.profiler` wrote under `folder`."""
    found = sorted(Path(folder).glob("plugins/profile/*/perfetto_trace.json.gz"))
    return found[-1] if found else None


def time_by_scope(
    trace: str | os.PathLike, hlo_text: str, *, module: str = "jit__steps"
) -> dict[str, float]:
    """Seconds of XLA operations per step scope in a Perfetto trace.

    **Arguments:**

    - `trace`: a `perfetto_trace.json.gz` written by `jax.profiler` with
        `create_perfetto_trace=True`.
    - `hlo_text`: the compiled chunk's HLO (`compile_steps(...).compiled.as_text()`).
    - `module`: the HLO module whose operations count. Defaults to the fused chunk's.

    **Returns:**

    `{scope: seconds}` for every scope of [`SCOPES`][eqx_fmnist.runs.profile.SCOPES].
    Operations run on several threads at once, so the sum can exceed the wall time.
    """
    with gzip.open(trace, "rt") as f:
        events = json.load(f)["traceEvents"]
    scopes = hlo_op_scopes(hlo_text)
    seconds: dict[str, float] = dict.fromkeys(SCOPES, 0.0)
    for event in events:
        args = event.get("args") or {}
        if args.get("hlo_module") == module and "hlo_op" in args:
            seconds[scopes.get(args["hlo_op"], "other")] += event.get("dur", 0.0) / 1e6
    return dict(seconds)


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
        self.folder, self.seen, self.on = Path(folder), 0, False
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
