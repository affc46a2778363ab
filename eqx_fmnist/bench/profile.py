"""Where a compiled chunk spends its time: a `jax.profiler` trace, summed by the
`jax.named_scope`s of the training step.

The step names its parts: `gather` (the batch's indices and rows), `forward` (the
model and the loss), the backward pass (JAX names it `transpose(jvp(forward))`) and
`optimizer` (AdamW). A trace records each XLA operation under its HLO name (such as
`ynn_fusion.4`); the compiled program's HLO text says which scope every operation came
from. [`time_by_scope`][eqx_fmnist.bench.profile.time_by_scope] joins the two.
"""

import collections
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

    `{scope: seconds}` for every scope of [`SCOPES`][eqx_fmnist.bench.profile.SCOPES].
    Operations run on several threads at once, so the sum can exceed the wall time.
    """
    with gzip.open(trace, "rt") as f:
        events = json.load(f)["traceEvents"]
    scopes = hlo_op_scopes(hlo_text)
    seconds: dict[str, float] = collections.Counter(dict.fromkeys(SCOPES, 0.0))
    for event in events:
        args = event.get("args") or {}
        if args.get("hlo_module") == module and "hlo_op" in args:
            seconds[scopes.get(args["hlo_op"], "other")] += event.get("dur", 0.0) / 1e6
    return dict(seconds)
