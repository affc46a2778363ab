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
    assert lines["members"].startswith("TypeCheckError: fit: `members` must be a Members choice")
    assert lines["callback"].startswith("TypeCheckError: fit: `callback` must be a function")
    assert lines["new"] == "TypeError: `config` must be a TrainConfig, not str."


WRONG_INPUTS = r"""
import json, sys, tempfile
import jax, jax.numpy as jnp, numpy as np
import eqx_fmnist as ef

rng = np.random.default_rng(0)
model = ef.MLP(key=jax.random.key(0))
pixels = rng.random((8, 784), dtype=np.float32)
x8 = jnp.asarray(pixels)
y = jnp.asarray(rng.integers(0, 10, 8), jnp.int32)
logits = jnp.asarray(rng.normal(size=(8, 10)), jnp.float32)
images = rng.integers(0, 256, (16, 28, 28), dtype=np.uint8)
config = ef.TrainConfig(steps=2, batch_size=8, hidden_sizes=(16,), log_every=2)
state = ef.init_state(config, 16)
path = tempfile.mkdtemp() + "/c.eqx"
ef.save_checkpoint(path, ef.init_state(config, 16), config, num_train=16)
CASES = {
    "model uint8": lambda: model(jnp.asarray(images[0].reshape(-1))),
    "model int32": lambda: model(jnp.asarray(images[0].reshape(-1), jnp.int32)),
    "model 28x28": lambda: model(x8[0].reshape(28, 28)),
    "model 700": lambda: model(x8[0, :700]),
    "ce float labels": lambda: ef.cross_entropy(logits, y + 0.5),
    "ce 1-D logits": lambda: ef.cross_entropy(logits[0], y),
    "ce 7 labels": lambda: ef.cross_entropy(logits, y[:7]),
    "step float labels": lambda: ef.train_step(state, x8, y.astype(jnp.float32)),
    "step 28x28": lambda: ef.train_step(state, x8.reshape(8, 28, 28), y),
    "step 7 labels": lambda: ef.train_step(state, x8, y[:7]),
    "dataset float labels": lambda: ef.ArrayDataset(images[:2], np.array([2.7, 1.0])),
    "dataset jax 1..10": lambda: ef.ArrayDataset(images[:10], jnp.arange(1, 11)),
    "dataset NaN labels": lambda: ef.ArrayDataset(images[:2], np.array([np.nan, 1.0])),
    "dataset 7 labels": lambda: ef.ArrayDataset(images[:8], np.arange(7)),
    "predict a checkpoint": lambda: ef.predict(ef.load_checkpoint(path), images),
    "evaluate images": lambda: ef.evaluate(model, images),
    "fit a tuple": lambda: ef.fit(config, (images, np.arange(16) % 10)),
    "splits a tuple": lambda: ef.Splits((images, np.arange(16) % 10)),
    "dataset floats 0..255": lambda: ef.ArrayDataset(images.astype(np.float32), np.arange(16) % 10),
    "accuracy float labels": lambda: ef.accuracy(logits, y + 0.5),
    "cnn uint8": lambda: ef.CNN(key=jax.random.key(0))(jnp.asarray(images[0].reshape(-1))),
    "answer a checkpoint": lambda: ef.answer(ef.load_checkpoint(path), images),
    "train_steps arrays": lambda: ef.train_steps(state, (images, y), batch_size=8, num_steps=1),
}
said = {}
for name, case in CASES.items():
    try:
        case()
        said[name] = "accepted"
    except Exception as e:
        said[name] = f"{type(e).__name__}: {str(e).splitlines()[0]}"
print(json.dumps(said))
"""

FIRST_LINES = {
    "model uint8": r"MLP.__call__: `x` must be a float array of shape \(in_size,\), but got uint8 "
    r"of shape \(784,\) \(pixels are floats in \[0, 1\]: divide by 255\)\.$",
    "model int32": r"MLP.__call__: `x` must be a float array .*, but got int32 of shape \(784,\)",
    "model 28x28": r"MLP.__call__: `x` must be a float array .*, but got float32 of shape \(28, 28\)",
    "model 700": r"MLP: `x` must be one example of shape \(784,\) .*, but got shape \(700,\)\.$",
    "ce float labels": r"cross_entropy: `labels` must be an integer array of shape \(batch,\) "
    r"\(here batch=8, classes=10\), but got float32 of shape \(8,\)\.$",
    "ce 1-D logits": r"cross_entropy: `logits` must be a float array of shape \(batch, classes\), "
    r"but got float32 of shape \(10,\)\.$",
    "ce 7 labels": r"cross_entropy: `labels` must be .* \(here batch=8.*\), but got int32 of shape \(7,\)",
    "step float labels": r"train_step: `y` must be an integer array .*, but got float32 of shape \(8,\)",
    "step 28x28": r"train_step: `x` must be an array of shape \(batch, features\), but got float32 "
    r"of shape \(8, 28, 28\)\.$",
    "step 7 labels": r"train_step: `y` must be .* \(here batch=8.*\), but got int32 of shape \(7,\)",
    "dataset float labels": r"`labels` must be integer class numbers, but got float64",
    "dataset jax 1..10": r"`labels` must lie in 0..9, but labels\[9\] is 10",
    "dataset NaN labels": r"`labels` must be integer class numbers, but got float64",
    "dataset 7 labels": r"`labels` must have shape \(8,\), but got \(7,\)\.$",
    "predict a checkpoint": r"predict: `model` must be a model \(an `eqx.Module`\), but got "
    r"Checkpoint \(pass its `.model`\)\.$",
    "evaluate images": r"evaluate: `dataset` must be an ArrayDataset, but got uint8 of shape \(16, 28, 28\)",
    "fit a tuple": r"fit: `splits` must be a Splits, but got \(",
    "splits a tuple": r"Splits: `train` must be an ArrayDataset .*, but got tuple\.$",
    "dataset floats 0..255": r"`images` holds floats outside \[0, 1\] or not finite",
    "accuracy float labels": r"accuracy: `labels` must be an integer array .* but got float32",
    "cnn uint8": r"CNN.__call__: `x` must be a float array .*, but got uint8 of shape \(784,\)",
    "answer a checkpoint": r"answer: `model` must be a model .*, but got Checkpoint \(pass its `.model`\)",
    "train_steps arrays": r"train_steps: `dataset` must be an ArrayDataset, but got \(",
}


@pytest.fixture(scope="module")
def wrong_inputs() -> dict[str, str]:
    """Each wrong input's first line, from a process that imports the library as a user
    does: without this suite's jaxtyping hook."""
    import json
    import subprocess
    import sys

    ran = subprocess.run(
        [sys.executable, "-c", WRONG_INPUTS], capture_output=True, text=True, timeout=300
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    return json.loads(ran.stdout.splitlines()[-1])


@pytest.mark.slow  # a process of its own, importing JAX and compiling a few programs
@pytest.mark.parametrize("case", sorted(FIRST_LINES))
def test_a_wrong_input_at_a_door_is_refused_in_the_librarys_first_line(wrong_inputs, case):
    """Without the hook, each door refuses: a `TypeError` or `ValueError` whose first
    line names the function, the parameter, what it takes and what it got (dtype and
    shape), and never a repr of a large value; nothing is accepted silently."""
    import re

    kind, _, line = wrong_inputs[case].partition(": ")
    assert kind in ("TypeCheckError", "TypeError", "ValueError"), wrong_inputs[case]
    assert re.search(FIRST_LINES[case], line), line
    assert len(line) < 240 and "Module(" not in line and "Checkpoint(" not in line
