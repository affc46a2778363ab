"""Checks of a value a caller gave, each a `ValueError` or `TypeError` that names the
field and what it must be: the one wording of the library's refusals of numbers, of JSON
values, and of arrays at a public door (`door`: shapes and dtypes by their annotations)."""

import functools
import math
import re
import types
import typing
from collections.abc import Callable
from typing import Any, Literal, TypeVar

import jaxtyping

F = TypeVar("F", bound=Callable)


def door(f: F, name: str | None = None) -> F:
    """`f` with its annotations checked at every call by jaxtyping and beartype (shapes
    and dtypes, the named axes tied across its arguments), as jaxtyping's import hook
    checks them in the tests; inside compiled code the check runs once, at trace time.
    A refusal is a `TypeError` (jaxtyping's `TypeCheckError`) whose first line names the
    parameter, what it got and what it takes, and holds no repr of a large value; `name`:
    the function it names (defaults to `f`'s). The checker is built at the first call:
    importing the library does not import beartype."""
    checked = None

    @functools.wraps(f)
    def call(*args, **kwargs):
        nonlocal checked
        if checked is None:
            from beartype import beartype

            checked = jaxtyping.jaxtyped(typechecker=beartype)(f)
        try:
            return checked(*args, **kwargs)
        except jaxtyping.TypeCheckError as e:
            raise jaxtyping.TypeCheckError(refusal(name or f.__qualname__, str(e))) from None

    return typing.cast(F, call)


def check_features(function: str, x: Any, size: int) -> None:
    """`TypeError` unless `x` holds `size` features (one example of a model that takes
    `size`; shapes are static, so inside compiled code this runs as it is traced)."""
    if tuple(x.shape) != (size,):
        raise TypeError(
            f"{function}: `x` must be one example of shape ({size},) (a batch goes through "
            f"`jax.vmap`), but got shape {tuple(x.shape)}."
        )


def refusal(function: str, message: str) -> str:
    """jaxtyping's message about a call of `function` as the library's one line: the
    parameter, what it got (its dtype and shape, or its type), what it takes and the
    sizes its named axes were bound to."""
    name = re.search(r"typechecking parameter '(\w+)'", message)
    got = re.search(r"Actual value: (.*)", message)
    wanted = re.search(r"Expected type: <class '(.*)'>", message) or re.search(
        r"Expected type: (.*?)\.?$", message, re.M
    )
    if not (name and got and wanted):
        return " ".join(message.split("\n----")[0].split())
    value = got.group(1)
    if len(value) > 40 or value[-1:] in "([{":  # a large value's repr: its type
        value = re.match(r"[\w.]*", value).group(0)[:40] or _OPENED[value[0]]  # type: ignore
    array = re.fullmatch(r"(?:weak_)?(\w+?)(\d*)\[([\d,]*)\](\(\w+\))?", value)  # f32[8](numpy)
    if array and array.group(1) in _DTYPES:
        kind, bits, shape, _ = array.groups()
        value = f"{_DTYPES[kind]}{bits} of shape {_shape(shape.split(','))}"
    hint = " (pass its `.model`)" if value in ("Checkpoint", "Run") else ""
    takes = re.sub(r"(?:\w+\.)+(\w+)", r"\1", wanted.group(1))  # eqx_fmnist.x.Name: Name
    if shaped := re.fullmatch(r"(\w+)\[Array, '(.*)'\]", takes):
        kind, axes = shaped.groups()
        takes = f"{_KINDS.get(kind, kind)} array of shape {_shape(axes.split())}"
    else:
        kinds = [k for k in takes.split(" | ") if k != "None"]
        kinds = [re.sub(r"^(Sequence\[)?Callable\[.*", r"\1Callable", k) for k in kinds]
        takes = " or ".join(_NAMES.get(k, f"{'an' if k[0] in 'AEIOU' else 'a'} {k}") for k in kinds)
        takes += " (or None)" if len(kinds) < len(wanted.group(1).split(" | ")) else ""
    if value.startswith("uint8") and takes.startswith("a float"):
        hint = " (pixels are floats in [0, 1]: divide by 255)"
    bound = message.split("are as follows.\n")[-1] if "are as follows." in message else ""
    sizes = ", ".join(line for line in bound.splitlines() if "=" in line)
    return (
        f"{function}: `{name.group(1)}` must be {takes}"
        + (f" (here {sizes})" if sizes else "")
        + f", but got {value}{hint}."
    )


def _shape(dims: list[str]) -> str:
    """`(a, b)`, `(a,)` or `()`, as Python writes a shape."""
    dims = [d for d in dims if d]
    return f"({dims[0]},)" if len(dims) == 1 else f"({', '.join(dims)})"


_DTYPES = {"f": "float", "bf": "bfloat", "i": "int", "u": "uint", "bool": "bool", "c": "complex"}
_NAMES = {
    "Module": "a model (an `eqx.Module`)",
    "Members": "a Members choice (ef.ensemble.Seeds, Grid, Folds)",
    "Callable": "a function",
    "Sequence[Callable": "a sequence of functions",
}
_OPENED = {"[": "a list", "(": "a tuple", "{": "a dict"}
_KINDS = {"Float": "a float", "Int": "an integer", "Shaped": "an", "Bool": "a boolean"}


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
