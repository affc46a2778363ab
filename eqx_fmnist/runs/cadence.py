"""When a run folder saves a checkpoint ([`CheckpointEvery`][eqx_fmnist.runs.CheckpointEvery])
and how a stop asked for ends the training ([`Interrupted`][eqx_fmnist.runs.Interrupted]),
and what to say of a stop ([`why_stopped`][eqx_fmnist.runs.cadence.why_stopped])."""

import dataclasses
import re
import shlex
from pathlib import Path

import jax

from ..intervals import NonFiniteError
from ..parallel import is_lost_process
from .layout import RunError


class Interrupted(Exception):
    """Training stopped on request, after the checkpoint at `step` was written."""

    def __init__(self, message: str, *, step: int, checkpoint: Path):
        super().__init__(message)
        self.step = step
        self.checkpoint = checkpoint


@dataclasses.dataclass(frozen=True)
class CheckpointEvery:
    """How often a run folder saves a checkpoint: after `seconds` of training, or after
    `steps` steps, whichever is set, checked at the end of each logging interval. The
    end of a run and a requested stop always save."""

    seconds: float | None = 60.0
    steps: int | None = None

    @classmethod
    def parse(cls, text: "str | CheckpointEvery") -> "CheckpointEvery":
        """`"60s"`, `"5m"` (or a bare `"60"`: seconds) or `"500steps"` (a cadence given
        as one already is returned as it is)."""
        if isinstance(text, CheckpointEvery):
            return text
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(s|m|steps?)?\s*", str(text))
        if not match or float(match.group(1)) <= 0:
            raise RunError(
                f"checkpoint_every must look like 60s, 5m or 500steps, but got {text!r}."
            )
        value = float(match.group(1))
        unit = match.group(2) or "s"
        if unit.startswith("step"):
            if not value.is_integer():
                raise RunError(f"checkpoint_every in steps must be whole, but got {text!r}.")
            return cls(seconds=None, steps=int(value))
        return cls(seconds=value * (60 if unit == "m" else 1), steps=None)

    def due(self, *, steps_since: int, seconds_since: float) -> bool:
        if self.steps is not None:
            return steps_since >= self.steps
        return self.seconds is not None and seconds_since >= self.seconds

    def __str__(self) -> str:
        return f"{self.steps} steps" if self.steps is not None else f"{self.seconds:g} s"

    def to_text(self) -> str:
        """The text `parse` reads back: `"500steps"`, `"60s"`."""
        return f"{self.steps}steps" if self.steps is not None else f"{self.seconds:g}s"


EVERY_MINUTE = CheckpointEvery()
"""The default cadence: a checkpoint after every 60 seconds of training."""


def why_stopped(
    e: BaseException,
    command: str,
    saved_step: int | None = None,
    checkpoint: Path | None = None,
    *,
    again: str | None = None,
) -> tuple[int, str]:
    """Why a run of `eqx-fmnist COMMAND` stopped on `e` (a stop asked for, a non-finite
    loss, a lost process of a multi-process run) and what was kept: the exit status
    (1, or 130 for a stop asked for) and one line. `saved_step`: the last checkpoint's
    step at `checkpoint` (`0`: none written; `None`: no run folder at hand). `again`:
    the command that continues the run, when it is not `eqx-fmnist COMMAND --resume
    CHECKPOINT` (a recipe of two runs continues with its own command); paths are
    quoted for a shell."""
    kept = "no checkpoint was written"
    if saved_step:
        kept = f"the last checkpoint (step {saved_step:,}) is {checkpoint}"
    resume = shlex.quote(f"--resume={checkpoint}")  # `=`: a path may start with a dash
    again = again or f"eqx-fmnist {command} {resume}"
    if is_lost_process(e):
        first = re.sub(r"\[[^\]]*\.cc:\d+\] ", "", str(e).strip().splitlines()[0])[:160]
        what = f"another process of this {jax.process_count()}-process run was lost ({first})"
        if saved_step is None or jax.process_index() != 0:
            return 1, f"error: {what}; process 0 keeps the run folder: start every process again."
        with_it = f" with {resume}" if saved_step else ""
        return 1, f"error: {what}; {kept}: start every process again{with_it}."
    if isinstance(e, NonFiniteError):
        return 1, f"error: {e} No result was written; {kept}."
    if saved_step:
        return 130, f"{e or 'interrupted'}; continue with `{again}`."
    return 130, "interrupted before the first checkpoint."
