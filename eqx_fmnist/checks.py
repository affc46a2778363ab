"""Checks of a number a caller gave, each a `ValueError` that names the field and what
it must be: the one wording of the library's refusals of numbers."""

import math
from typing import Any


def positive_int(name: str, value: Any, *, low: int = 1, high: int | None = None) -> None:
    """`value` is an int of at least `low` (1: positive; 0: non-negative) and at most
    `high`, the largest a PRNG key's seed takes."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        kind = "a positive" if low else "a non-negative"
        raise ValueError(f"`{name}` must be {kind} int, but got {value!r}.")
    if high is not None and value > high:
        raise ValueError(f"`{name}` must be at most {high:,} (2**32 - 1), but got {value!r}.")


def number(name: str, value: Any, *, low: float, high: float = math.inf, low_open=False):
    """`value` is a finite int or float in `[low, high]` (`(low, high]` if `low_open`)."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (value > low if low_open else value >= low) and value <= high
    if not ok:
        bound = f"{'>' if low_open else '>='} {low}" + (
            f" and <= {high}" if high < math.inf else ""
        )
        raise ValueError(f"`{name}` must be a finite number {bound}, but got {value!r}.")
