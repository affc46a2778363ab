"""When a run folder saves a checkpoint ([`CheckpointEvery`][eqx_fmnist.runs.CheckpointEvery])
and how a stop asked for ends the training ([`Interrupted`][eqx_fmnist.runs.Interrupted])."""

import dataclasses
import re
from pathlib import Path

from .summary import RunError


class Interrupted(Exception):
    """Training stopped on request, after the checkpoint at `step` was written."""

    def __init__(self, message: str, *, step: int, checkpoint: Path):
        super().__init__(message)
        self.step, self.checkpoint = step, checkpoint


@dataclasses.dataclass(frozen=True)
class CheckpointEvery:
    """How often a run folder saves a checkpoint: after `seconds` of training, or after
    `steps` steps, whichever is set, checked at the end of each logging interval. The
    end of a run and a requested stop always save."""

    seconds: float | None = 60.0
    steps: int | None = None

    @classmethod
    def parse(cls, text: str) -> "CheckpointEvery":
        """`"60s"`, `"5m"` (or a bare `"60"`: seconds) or `"500steps"`."""
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(s|m|steps?)?\s*", str(text))
        if not match or float(match.group(1)) <= 0:
            raise RunError(
                f"checkpoint_every must look like 60s, 5m or 500steps, but got {text!r}."
            )
        value, unit = float(match.group(1)), match.group(2) or "s"
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


EVERY_MINUTE = CheckpointEvery()
"""The default cadence: a checkpoint after every 60 seconds of training."""
