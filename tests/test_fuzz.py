"""Property-based tests of every parser of user input: arbitrary bytes and strings either
parse or raise the library's documented error, never another exception, never a hang."""

import argparse
import json

import pytest
from hypothesis import HealthCheck, event, given, settings, strategies as st

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


IMAGE_FORMATS = {  # every format Pillow writes that a photo could come in, by its mode
    "PNG": "RGB",
    "JPEG": "RGB",
    "GIF": "P",
    "TIFF": "RGB",
    "BMP": "RGB",
    "WEBP": "RGB",
    "ICO": "RGB",
    "PPM": "RGB",
    "TGA": "RGB",
    "DDS": "RGB",
    "SPIDER": "F",
    "IM": "RGB",
    "PCX": "RGB",
    "SGI": "RGB",
    "QOI": "RGB",
    "MSP": "1",
}


@pytest.fixture(scope="module")
def image_files():
    """A small noise image in every format of `IMAGE_FORMATS`, as bytes."""
    import io
    import warnings

    import numpy as np
    from PIL import Image

    pixels = (np.random.default_rng(0).random((20, 16, 3)) * 255).astype(np.uint8)
    files = {}
    for fmt, mode in IMAGE_FORMATS.items():
        out = io.BytesIO()
        with warnings.catch_warnings():  # the IM writer warns that it is deprecated
            warnings.simplefilter("ignore", DeprecationWarning)
            Image.fromarray(pixels).convert(mode).save(out, format=fmt)
        files[fmt] = out.getvalue()
    return files


@pytest.mark.slow  # prepares 4 x EXAMPLES mutated images
@settings(max_examples=4 * EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_a_mutated_image_of_any_format_prepares_or_is_one_line(image_files, tmp_path_factory, data):
    """`prepare_image` on an image of any format Pillow reads with a few bytes changed
    (more often in the header, where the decoders' branches are): Fashion-MNIST pixels,
    or one `DataError` line naming the file, whatever the decoder raised. The cases
    fuzzing found first are kept in `test_images.py`."""
    import numpy as np

    from eqx_fmnist.data import DataError, prepare_image

    fmt = data.draw(st.sampled_from(sorted(image_files)), label="format")
    raw = bytearray(image_files[fmt])
    span = data.draw(st.sampled_from([min(len(raw), 128), len(raw)]), label="span")
    for at, byte in data.draw(
        st.lists(st.tuples(st.integers(0, span - 1), st.integers(0, 255)), min_size=1, max_size=4),
        label="changes",
    ):
        raw[at] = byte
    path = tmp_path_factory.mktemp("image") / f"photo.{fmt.lower()}"
    path.write_bytes(raw)
    try:
        prepared = prepare_image(path)
    except DataError as e:
        event(f"{fmt}: refused")
        assert str(path) in str(e) and "\n" not in str(e), str(e)
    else:
        event(f"{fmt}: prepared")
        assert prepared.pixels.shape == (28, 28) and prepared.pixels.dtype == np.uint8


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
    from eqx_fmnist.cli.flags import _comma_separated
    from eqx_fmnist.config import TrainConfig

    try:
        sizes = TrainConfig(hidden_sizes=_comma_separated(int)(text)).hidden_sizes
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


# --------------------------------------------------------------------------- the files
# Every file the library writes and reads back, mutated field by field (deleted, or
# replaced by any JSON value): each is read or refused with the reader's own error,
# which the command line prints as one line; never another exception.

FIELD_EXAMPLES = 150
fields = settings(
    max_examples=FIELD_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def _mutated(obj: dict, data) -> dict:
    """`obj` with one field (at the top, or one level down) deleted or replaced."""
    obj = json.loads(json.dumps(obj))
    target = obj
    nested = [k for k, v in obj.items() if isinstance(v, dict) and v]
    if nested and data.draw(st.booleans()):
        target = obj[data.draw(st.sampled_from(sorted(nested)))]
    key = data.draw(st.sampled_from(sorted(target)))
    if data.draw(st.booleans()):
        del target[key]
    else:
        target[key] = data.draw(json_values)
    return obj


def _dumps(obj) -> str | None:
    try:
        return json.dumps(obj)
    except ValueError:
        return None  # a value JSON cannot hold (an out-of-range float): nothing to write


@fields
@given(data=st.data())
def test_a_checkpoint_header_mutated_field_by_field_loads_or_is_refused(
    checkpoint_blob, tmp_path_factory, data
):
    from eqx_fmnist.checkpoint import MAGIC, CheckpointError, load_checkpoint

    start = len(MAGIC) + 8
    length = int.from_bytes(checkpoint_blob[len(MAGIC) : start], "little")
    header = json.loads(checkpoint_blob[start : start + length])
    if (text := _dumps(_mutated(header, data))) is None:
        return
    head = text.encode()
    path = tmp_path_factory.mktemp("header") / "c.eqx"
    path.write_bytes(
        MAGIC + len(head).to_bytes(8, "little") + head + checkpoint_blob[start + length :]
    )
    try:
        loaded = load_checkpoint(path)
    except CheckpointError as e:
        assert str(path) in str(e)
        return
    assert loaded.step == json.loads(head)["step"]


@fields
@given(data=st.data(), lines=st.lists(json_values, max_size=4))
def test_a_history_of_any_lines_reads_or_is_refused_naming_the_line(tmp_path_factory, data, lines):
    from eqx_fmnist.runs import RunError, read_history

    folder = tmp_path_factory.mktemp("history")
    good = [{"step": 4 * (i + 1), "loss": 1.0, "accuracy": 0.5} for i in range(3)]
    written = [_dumps(x) for x in (*good, *lines)]
    (folder / "history.jsonl").write_text("".join(t + "\n" for t in written if t is not None))
    try:
        records = read_history(folder)
    except RunError as e:
        assert "history.jsonl, line " in str(e) and int(str(e).split("line ")[1][0]) > 3
        return
    assert all(type(r["step"]) is int for r in records)
    assert all(type(r["loss"]) in (int, float) for r in records if "members" not in r)


@fields
@given(named=json_values)
def test_a_teacher_file_of_any_json_names_a_teacher_or_is_refused(tmp_path_factory, named):
    import shutil

    from eqx_fmnist.runs import TEACHER_FILE, RunError, read_teacher

    if (text := _dumps(named)) is None:
        return
    folder = tmp_path_factory.mktemp("teacher")
    (folder / TEACHER_FILE).write_text(text)
    try:
        found = read_teacher(folder)
    except RunError as e:
        assert TEACHER_FILE in str(e)
        return
    finally:
        shutil.rmtree(folder)
    assert isinstance(named, dict) and isinstance(named["teacher"], str) and found.name


@pytest.fixture(scope="module")
def artifact(tmp_path_factory, real_data):
    """A calibrated model's StableHLO artifact (manifest: trust, sets, views)."""
    import jax.random as jr

    import eqx_fmnist as ef

    from helpers import calibrate_on_training_images

    model = ef.MLP(hidden_sizes=(8,), key=jr.key(0))
    calibration = calibrate_on_training_images(model, real_data, coverage=0.9)
    path = tmp_path_factory.mktemp("artifact") / "m.stablehlo"
    images = real_data.test_images[:50].reshape(50, -1)
    config = ef.TrainConfig(hidden_sizes=(8,), calibration_size=5000, coverage=0.9)
    ef.export.export_model(
        model, ef.FLOAT32, config, path, check_images=images, calibration=calibration
    )
    return path, images


@fields
@given(data=st.data())
def test_an_export_manifest_mutated_field_by_field_answers_or_is_refused(artifact, data):
    from eqx_fmnist.export import ExportError, load_artifact, manifest_path, read_manifest

    path, images = artifact
    manifest_file = manifest_path(path)
    original = manifest_file.read_text()
    if (text := _dumps(_mutated(json.loads(original), data))) is None:
        return
    try:
        manifest_file.write_text(text)
        try:
            read_manifest(path)
            loaded = load_artifact(path)
            said = loaded.answer(images)
            assert isinstance(loaded.views, str) and said.probabilities.shape == (50, 10)
        except ExportError as e:
            assert path.name in str(e)
    finally:
        manifest_file.write_text(original)


# ------------------------------------------------------------- a run folder, at the CLI
# The same mutations reach the command line through a whole run folder: every file a
# command reads back (the checkpoint's header and the calibration for `evaluate`; the
# history for `train --resume`, of a run stopped after its last checkpoint), changed one
# field, one byte or one cut at a time, is read (exit 0) or refused in one line naming
# that file (exit 2, nothing written).

CLI_EXAMPLES = 40
at_the_cli = settings(
    max_examples=CLI_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
READ_BACK = {"checkpoint.eqx": "evaluate", "calibration.safetensors": "evaluate"}
READ_BACK["history.jsonl"] = "resume"


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory, real_data):
    """A tiny calibrated run stopped after its last checkpoint (resumable), trained, as
    every command of this module's tests reads it, on a slice of the real data (2,048
    training and 500 test images: each of the 120 commands evaluates its test images)."""
    from helpers import run_cli_here, use_a_slice

    with pytest.MonkeyPatch.context() as patch:
        use_a_slice(real_data, patch, 2048, 500)
        out = tmp_path_factory.mktemp("fuzzed") / "run"
        tiny = ["--steps", 4, "--log-every", 2, "--hidden", 8, "--calibrate", 500]
        done = run_cli_here("train", *tiny, "--out", out, "--data-dir", real_data.source)
        assert done.returncode == 0, done.stderr
        (out / "summary.json").unlink()  # stopped after its last checkpoint: resumable
        yield out


def _json_part(raw: bytes, name: str, data) -> tuple[int, int]:
    """Where a JSON object lies in a file the library writes: a line of the history;
    after the magic and a length in a checkpoint; after the 8-byte length in a
    safetensors file."""
    if name == "history.jsonl":
        lines = raw.splitlines(keepends=True)
        i = data.draw(st.integers(0, len(lines) - 1))
        start = sum(map(len, lines[:i]))
        return start, start + len(lines[i].rstrip(b"\n"))
    if name == "checkpoint.eqx":
        from eqx_fmnist.checkpoint import MAGIC

        start = len(MAGIC) + 8
        return start, start + int.from_bytes(raw[len(MAGIC) : start], "little")
    return 8, 8 + int.from_bytes(raw[:8], "little")


def _mutated_file(raw: bytes, name: str, data) -> bytes | None:
    """`raw` with one JSON field changed (a header's length kept consistent), one byte
    made invalid UTF-8, or the file cut short."""
    start, end = _json_part(raw, name, data)
    how = data.draw(st.sampled_from(["field", "encoding", "truncation"]))
    if how == "truncation":
        return raw[: data.draw(st.integers(0, len(raw) - 1))]
    if how == "encoding":
        at = data.draw(st.integers(start, end - 1))
        return raw[:at] + b"\xff" + raw[at + 1 :]
    text = _dumps(_mutated(json.loads(raw[start:end]), data))
    if text is None:
        return None
    head = text.encode()
    if name == "history.jsonl":
        return raw[:start] + head + raw[end:]
    length = len(head).to_bytes(8, "little")
    if name == "checkpoint.eqx":
        from eqx_fmnist.checkpoint import MAGIC

        return MAGIC + length + head + raw[end:]
    return length + head + raw[end:]


def _files(folder) -> dict:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(READ_BACK))
@at_the_cli
@given(data=st.data())
def test_a_run_folder_file_mutated_is_read_or_refused_in_one_line(
    run_folder, name, data, tmp_path_factory, real_data
):
    import os
    import shutil
    from unittest import mock

    from helpers import run_cli_here, use_a_slice

    folder = tmp_path_factory.mktemp("mutated") / "run"
    shutil.copytree(run_folder, folder)
    original = (folder / name).read_bytes()
    if (mutated := _mutated_file(original, name, data)) is None:
        return
    (folder / name).write_bytes(mutated)
    before = _files(folder)
    # The data found where the user keeps them (Debian's folder, or $EQX_FMNIST_DATA),
    # the slice the run was trained on.
    with (
        mock.patch.dict(os.environ, {"EQX_FMNIST_DATA": str(real_data.source)}),
        pytest.MonkeyPatch.context() as patch,
    ):
        use_a_slice(real_data, patch, 2048, 500)
        if READ_BACK[name] == "evaluate":
            done = run_cli_here("evaluate", folder)
        else:
            done = run_cli_here("train", "--resume", folder / "checkpoint.eqx")
    event("read" if done.returncode == 0 else "refused")  # --hypothesis-show-statistics
    try:
        if done.returncode == 0:
            return
        assert done.returncode == 2, done.stderr[-2000:]
        (line,) = done.stderr.strip().splitlines()
        assert name in line, line
        assert _files(folder) == before  # refused: nothing written
    finally:
        shutil.rmtree(folder.parent)
