"""Property-based tests of every parser of user input: arbitrary bytes and strings either
parse or raise the library's documented error, never another exception, never a hang."""

import argparse
import json

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from helpers import idx_bytes

EXAMPLES = 300
fuzz = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def idx_like():
    """Bytes that start like an IDX file often enough to reach the deeper checks."""
    header = st.builds(
        lambda zero, code, ndim, dims: (
            zero + bytes([code, ndim]) + b"".join(d.to_bytes(4, "big") for d in dims)
        ),
        st.sampled_from([b"\x00\x00", b"\x00\x01"]),
        st.sampled_from([0x08, 0x09, 0x0D]),
        st.integers(0, 4),
        st.lists(st.integers(0, 40), max_size=4),
    )
    return st.one_of(
        st.binary(max_size=64), st.builds(bytes.__add__, header, st.binary(max_size=200))
    )


@fuzz
@given(idx_like())
def test_idx_parser_parses_or_raises_data_error(raw):
    import numpy as np

    from eqx_fmnist.data import DataError, parse_idx

    try:
        arr = parse_idx(raw, name="fuzz")
    except DataError as e:
        assert "fuzz" in str(e)
    else:
        assert arr.dtype == np.uint8 and arr.size == len(raw) - 4 - 4 * arr.ndim


@fuzz
@given(st.integers(1, 3).flatmap(lambda d: st.lists(st.integers(0, 5), min_size=d, max_size=d)))
def test_idx_round_trip(shape):
    import numpy as np

    from eqx_fmnist.data import parse_idx

    arr = np.arange(int(np.prod(shape)), dtype=np.uint32).astype(np.uint8).reshape(shape)
    np.testing.assert_array_equal(parse_idx(idx_bytes(arr)), arr)


policy_text = st.one_of(
    st.text(max_size=40),
    st.lists(
        st.tuples(
            st.sampled_from(["p", "c", "o", "params", "compute", "output", "x", ""]),
            st.sampled_from(["=", ":", "=="]),
            st.sampled_from(["f32", "bf16", "f16", "float64", "int8", "", "F32 "]),
        ),
        max_size=4,
    ).map(lambda parts: ",".join(k + s + v for k, s, v in parts)),
)


@fuzz
@given(policy_text)
def test_policy_strings_parse_or_raise_value_error(text):
    from eqx_fmnist.precision import Policy

    try:
        p = Policy.from_string(text)
    except ValueError:
        return
    assert Policy.from_string(str(p)) == p


@fuzz
@given(
    st.one_of(
        st.text(max_size=30),
        st.lists(st.integers(-5, 3000), max_size=5).map(lambda v: ",".join(map(str, v))),
    )
)
def test_hidden_flag_parses_or_raises_a_clear_error(text):
    from eqx_fmnist.cli.flags import _int_tuple
    from eqx_fmnist.config import TrainConfig

    try:
        sizes = TrainConfig(hidden_sizes=_int_tuple(text)).hidden_sizes
    except (argparse.ArgumentTypeError, ValueError):
        return
    assert sizes and all(isinstance(s, int) and s > 0 for s in sizes)


json_values = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(-10, 10**400), st.floats(), st.text(max_size=10)
    ),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=6,
)
field_names = st.sampled_from(
    [
        "epochs",
        "steps",
        "batch_size",
        "learning_rate",
        "weight_decay",
        "schedule",
        "warmup_steps",
        "hidden_sizes",
        "precision",
        "seed",
        "log_every",
        "grad_clip",
        "label_smoothing",
        "validation_size",
        "devices",
        "on_nonfinite",
        "lr",
    ]
)


@fuzz
@given(st.one_of(st.dictionaries(field_names, json_values, max_size=5), json_values))
def test_config_json_parses_or_raises_value_error(obj):
    from eqx_fmnist.config import TrainConfig

    try:
        text = json.dumps(obj)
    except ValueError:
        return  # not JSON-serialisable (e.g. NaN is, huge ints are): nothing to test
    try:
        config = TrainConfig.from_json(text)
    except ValueError:
        return
    assert TrainConfig.from_json(config.to_json()) == config


@pytest.fixture(scope="module")
def checkpoint_blob(tmp_path_factory):
    from eqx_fmnist.checkpoint import save_checkpoint
    from eqx_fmnist.config import TrainConfig
    from eqx_fmnist.state import init_state

    c = TrainConfig(steps=2, hidden_sizes=(4,))
    path = tmp_path_factory.mktemp("ckpt") / "c.eqx"
    save_checkpoint(path, init_state(c, 1024), c, num_train=1024)
    return path.read_bytes()


@fuzz
@given(data=st.data())
def test_checkpoints_load_or_raise_checkpoint_error(checkpoint_blob, tmp_path_factory, data):
    from eqx_fmnist.checkpoint import CheckpointError, load_checkpoint

    blob = bytearray(checkpoint_blob)
    how = data.draw(st.sampled_from(["flip", "cut", "header", "random"]))
    if how == "flip":
        for i in data.draw(st.lists(st.integers(0, len(blob) - 1), min_size=1, max_size=4)):
            blob[i] ^= data.draw(st.integers(1, 255))
    elif how == "cut":
        blob = blob[: data.draw(st.integers(0, len(blob) - 1))]
    elif how == "header":
        start = blob.index(b"{")
        end = blob.index(b"}", start) + 1
        blob[start:end] = data.draw(st.binary(max_size=end - start + 20))
    else:
        blob = bytearray(data.draw(st.binary(max_size=300)))
    path = tmp_path_factory.mktemp("fuzz") / "c.eqx"
    path.write_bytes(bytes(blob))
    try:
        load_checkpoint(path)
    except CheckpointError:
        pass
