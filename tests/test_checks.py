"""The number checks name the field, the bound and the value given."""

import math

import pytest

from eqx_fmnist.checks import number, positive_int


@pytest.mark.parametrize(
    ("value", "low", "high", "message"),
    [
        (0, 1, None, "`n` must be a positive int, but got 0."),
        (-1, 0, None, "`n` must be a non-negative int, but got -1."),
        (True, 1, None, "`n` must be a positive int, but got True."),
        (2.0, 1, None, "`n` must be a positive int, but got 2.0."),
        (2**32, 0, 2**32 - 1, "`n` must be at most 4,294,967,295 (2**32 - 1), but got 4294967296."),
    ],
)
def test_an_int_out_of_bounds_is_named(value, low, high, message):
    with pytest.raises(ValueError) as raised:
        positive_int("n", value, low=low, high=high)
    assert str(raised.value) == message


def test_an_int_in_bounds_passes():
    for value, low in ((1, 1), (0, 0), (2**32 - 1, 0)):
        positive_int("n", value, low=low, high=2**32 - 1)


@pytest.mark.parametrize(
    ("value", "kwargs", "bound"),
    [
        (0.0, dict(low=0.0, low_open=True), "> 0.0"),
        (-0.5, dict(low=0.0), ">= 0.0"),
        (1.5, dict(low=0.0, high=1.0), ">= 0.0 and <= 1.0"),
        (math.nan, dict(low=0.0), ">= 0.0"),
        (math.inf, dict(low=0.0), ">= 0.0"),
        (False, dict(low=0.0), ">= 0.0"),
        ("0.1", dict(low=0.0), ">= 0.0"),
    ],
)
def test_a_number_out_of_bounds_is_named(value, kwargs, bound):
    with pytest.raises(ValueError, match=f"^`x` must be a finite number {bound}, but got"):
        number("x", value, **kwargs)


def test_a_number_at_a_closed_bound_passes():
    number("x", 0.0, low=0.0)
    number("x", 1, low=0.0, high=1.0)
    number("x", 1e-9, low=0.0, low_open=True)
