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


DOORS = r"""
import sys, tempfile
import numpy as np
import eqx_fmnist as ef

def said(call):
    try:
        call()
    except (TypeError, ValueError) as e:
        return f"{type(e).__name__}: {e}"
    return "accepted"

small = ef.TrainConfig(steps=np.int64(4), learning_rate=np.float32(0.5), hidden_sizes=(np.int64(8),))
print("config", type(small.steps).__name__, small.hidden_sizes, "steps" in small.to_json())
print("policy", said(lambda: ef.Policy(None)))
ds = ef.ArrayDataset(np.zeros((64, 784), np.uint8), np.zeros(64, np.int64))
splits = ef.Splits(ds, ds)
print("members", said(lambda: ef.fit(small, splits, members=[small, small])))
print("callback", said(lambda: ef.fit(small, splits, callback=5)))
out = tempfile.mkdtemp()
print("new", said(lambda: ef.runs.Training.new(out, "config")))
print("every", said(lambda: ef.runs.Training.new(out, ef.TrainConfig(steps=4), checkpoint_every="5m", data=lambda: sys.exit(3))))
"""


def test_the_doors_refuse_what_they_cannot_take_as_a_user_meets_them():
    """The library's public calls, run as a user runs them (without this suite's type
    checker, which would refuse these first): numpy's numbers are numbers, and a wrong
    type is one `TypeError` naming the argument before any work (`Training.new` with a
    cadence as text reaches its data, here a function that exits 3)."""
    import subprocess
    import sys

    ran = subprocess.run([sys.executable, "-c", DOORS], capture_output=True, text=True, timeout=300)
    lines = dict(line.split(" ", 1) for line in ran.stdout.splitlines())
    assert ran.returncode == 3, ran.stderr  # the cadence "5m" taken: the data were asked for
    assert lines["config"] == "int (8,) True"
    assert lines["policy"].startswith("TypeError: param_dtype must be a dtype or its name")
    assert lines["members"].startswith("TypeError: `members` must be a Members choice")
    assert lines["callback"].startswith("TypeError: `callback` must be a function")
    assert lines["new"] == "TypeError: `config` must be a TrainConfig, not str."
