"""Checks of a value a caller gave, each a `ValueError` that names the field and what it
must be: the one wording of the library's refusals of numbers and of JSON values."""

import math
import types
import typing
from typing import Any, Literal


def plain(value: Any) -> Any:
    """A numpy or JAX scalar as the Python number it holds (`np.int64(20)` is `20`), a
    tuple or list of them as a tuple of such numbers; anything else as it is. The doors
    of the library take numpy's numbers as numbers."""
    if isinstance(value, tuple | list):
        return tuple(plain(v) for v in value) if any(map(_scalar, value)) else value
    return value.item() if _scalar(value) else value


def _scalar(value: Any) -> bool:
    return getattr(value, "shape", None) == () and hasattr(value, "item")


def positive_int(
    name: str, value: Any, *, low: int = 1, high: int | None = None, why: str = "2**32 - 1"
) -> None:
    """`value` is an int of at least `low` (1: positive; 0: non-negative) and at most
    `high` (the largest a PRNG key's seed takes, or another ceiling, `why` says which)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        kind = "a positive" if low else "a non-negative"
        raise ValueError(f"`{name}` must be {kind} int, but got {value!r}.")
    if high is not None and value > high:
        raise ValueError(f"`{name}` must be at most {high:,} ({why}), but got {value!r}.")


def number(name: str, value: Any, *, low: float, high: float = math.inf, low_open=False):
    """`value` is a finite int or float in `[low, high]` (`(low, high]` if `low_open`)."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (value > low if low_open else value >= low) and value <= high
    if not ok:
        bound = f"{'>' if low_open else '>='} {low}" + (
            f" and <= {high}" if high < math.inf else ""
        )
        raise ValueError(f"`{name}` must be a finite number {bound}, but got {value!r}.")


def split_optional(hint: Any) -> tuple[Any, bool]:
    """`(type, optional)` of a type hint: the type without `None`, and whether `None` is
    allowed."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return args[0], len(args) < len(typing.get_args(hint))
    return hint, False


def coerce_json(what: str, hint: Any, value: Any) -> Any:
    """Check a JSON value against the type `hint` (`ValueError` naming `what`, never
    `TypeError`), converting where JSON cannot say it (an int for a float, a list for a
    tuple of ints)."""
    kind, optional = split_optional(hint)
    if value is None and optional:
        return None
    is_int = isinstance(value, int) and not isinstance(value, bool)
    exact = {bool: isinstance(value, bool), int: is_int, str: isinstance(value, str)}
    if exact.get(kind) or (typing.get_origin(kind) is Literal and value in typing.get_args(kind)):
        return value
    if kind is float and isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:
            pass
    if typing.get_origin(kind) is tuple and isinstance(value, tuple | list):
        if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return tuple(value)
    expected = {bool: "true or false", int: "an int", float: "a number", str: "a string"}
    expected = expected.get(kind, str(kind))
    if typing.get_origin(kind) is Literal:
        expected = "one of " + ", ".join(map(repr, typing.get_args(kind)))
    elif typing.get_origin(kind) is tuple:
        expected = "a list of ints"
    expected += " or null" if optional else ""
    raise ValueError(f"{what} must be {expected}, but got {value!r}.")


COVERAGE = 0.9
"""The share of new images whose set holds the true class, unless told otherwise."""


def check_coverage(coverage: float) -> float:
    """`coverage` as a float in (0, 1), or `ValueError` naming it."""
    if isinstance(coverage, bool) or not isinstance(coverage, (int, float)):
        raise ValueError(f"`coverage` must be a number in (0, 1), but got {coverage!r}.")
    if not 0.0 < coverage < 1.0:
        raise ValueError(f"`coverage` must be in (0, 1), e.g. 0.9, but got {coverage!r}.")
    return float(coverage)
