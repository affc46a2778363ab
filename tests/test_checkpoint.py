import json

import pytest

from helpers import small_config as config, tree_allclose


@pytest.mark.slow  # cold: compiles several programs or trains on the real data
@pytest.mark.parametrize("extra", [{}, {"ema_decay": 0.9, "shift": 2, "erase": 0.5}])
def test_save_load_continue_equals_straight_through(small, tmp_path, extra):
    """Exact, with the augmentation's choices and the weight average too."""
    from eqx_fmnist.checkpoint import load_checkpoint, save_checkpoint
    from eqx_fmnist.dataset import Splits
    from eqx_fmnist.state import init_state
    from eqx_fmnist.step import train_steps
    from eqx_fmnist.train import fit

    c = config(**extra)
    straight = fit(c, Splits(small, small))
    state = init_state(c, len(small))
    state, _ = train_steps(state, small, batch_size=32, num_steps=10)
    path = save_checkpoint(tmp_path / "ckpt.eqx", state, c, num_train=len(small))
    ckpt = load_checkpoint(path)
    assert ckpt.step == 10 and ckpt.config == c and ckpt.num_train == 256
    assert tree_allclose(ckpt.state.model, state.model, rtol=0, atol=0)
    assert tree_allclose(ckpt.state.opt_state, state.opt_state, rtol=0, atol=0)
    assert (ckpt.state.average is None) == (state.average is None) == ("ema_decay" not in extra)
    if state.average is not None:
        assert tree_allclose(ckpt.state.average, state.average, rtol=0, atol=0)
    resumed = fit(ckpt.config, Splits(small, small), state=ckpt.state)
    assert int(resumed.state.step) == 16
    assert tree_allclose(resumed.model, straight.model, rtol=1e-5, atol=1e-6)
    from eqx_fmnist.checkpoint import read_header

    meta, _ = read_header(path)
    assert meta["versions"]["jax"] and meta["format_version"] == 3


def _saved(small, tmp_path, **kw):
    from eqx_fmnist.checkpoint import save_checkpoint
    from eqx_fmnist.state import init_state

    c = config(**kw)
    return save_checkpoint(
        tmp_path / "ckpt.eqx", init_state(c, len(small)), c, num_train=len(small)
    )


def test_truncated_checkpoint_raises_and_the_file_is_untouched(small, tmp_path):
    from eqx_fmnist.checkpoint import CheckpointError, load_checkpoint

    path = _saved(small, tmp_path)
    blob = path.read_bytes()
    path.write_bytes(blob[:-1000])
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        load_checkpoint(path)
    assert path.read_bytes() == blob[:-1000]
    flipped = bytearray(blob)
    flipped[-5] ^= 0xFF  # same length, one byte changed: the checksum catches it
    path.write_bytes(bytes(flipped))
    with pytest.raises(CheckpointError, match="SHA-256"):
        load_checkpoint(path)


def test_other_architecture_raises_and_leaves_the_original(small, tmp_path):
    from eqx_fmnist.checkpoint import CheckpointError, load_checkpoint

    path = _saved(small, tmp_path, hidden_sizes=(64,))
    blob = path.read_bytes()
    with pytest.raises(CheckpointError, match=r"hidden_sizes \(64,\) \(config: \(32,\)\)"):
        load_checkpoint(path, expect=config())
    assert path.read_bytes() == blob
    assert load_checkpoint(path).config.hidden_sizes == (64,)


def test_a_header_that_lies_about_the_architecture_is_caught(small, tmp_path):
    """Arrays of a (64,) model under a header claiming (32,): shapes do not fit."""
    import hashlib

    from eqx_fmnist.checkpoint import MAGIC, CheckpointError, load_checkpoint, read_header
    from eqx_fmnist.fileio import digest

    path = _saved(small, tmp_path, hidden_sizes=(64,))
    header, payload = read_header(path)
    header["config"]["hidden_sizes"] = [32]
    header["payload_sha256"] = hashlib.sha256(payload).hexdigest()
    del header["header_sha256"]
    header["header_sha256"] = digest(header)  # sealed again: only the shapes can tell
    head = json.dumps(header).encode()
    path.write_bytes(MAGIC + len(head).to_bytes(8, "little") + head + payload)
    with pytest.raises(CheckpointError, match="do not fit"):
        load_checkpoint(path)


@pytest.mark.parametrize(
    "content", [b"", b"hello", b"EQX-FMNIST-CHECKPOINT\n\x05\x00\x00\x00\x00\x00\x00\x00{oops"]
)
def test_not_a_checkpoint(tmp_path, content):
    from eqx_fmnist.checkpoint import CheckpointError, load_checkpoint

    path = tmp_path / "x.eqx"
    path.write_bytes(content)
    with pytest.raises(CheckpointError, match=str(path)):
        load_checkpoint(path)
    with pytest.raises(CheckpointError, match="no checkpoint"):
        load_checkpoint(tmp_path / "missing.eqx")


def test_a_failed_save_keeps_the_previous_checkpoint(small, tmp_path, monkeypatch):
    import os

    from eqx_fmnist.checkpoint import load_checkpoint, save_checkpoint
    from eqx_fmnist.state import init_state

    path = _saved(small, tmp_path)
    blob = path.read_bytes()

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    c = config()
    with pytest.raises(OSError, match="No space"):
        save_checkpoint(path, init_state(c, len(small)), c, num_train=len(small))
    monkeypatch.undo()
    assert path.read_bytes() == blob and [p.name for p in tmp_path.iterdir()] == ["ckpt.eqx"]
    assert int(load_checkpoint(path).state.step) == 0


def test_loading_builds_the_skeleton_from_shapes_alone(tmp_path, caplog):
    """The skeleton comes from `eqx.filter_eval_shape`: loading a checkpoint compiles and
    runs no initialiser (the state saved here was built op by op, so a compiled
    initialiser could not come from a cache)."""
    import logging

    import jax
    import jax.numpy as jnp

    from eqx_fmnist.checkpoint import load_checkpoint, save_checkpoint
    from eqx_fmnist.config import TrainConfig
    from eqx_fmnist.state import HYPERPARAMS, _build

    config = TrainConfig(steps=4, hidden_sizes=(7,))  # a shape no other test compiles
    numbers = jnp.array([getattr(config, k) for k in HYPERPARAMS], jnp.float32)
    state = _build(config, 4, jnp.uint32(0), numbers)
    save_checkpoint(tmp_path / "c.eqx", state, config, num_train=64)
    jax.config.update("jax_log_compiles", True)
    try:
        with caplog.at_level(logging.WARNING):
            loaded = load_checkpoint(tmp_path / "c.eqx")
    finally:
        jax.config.update("jax_log_compiles", False)
    compiled = [r.getMessage() for r in caplog.records if "Compiling" in r.getMessage()]
    assert not any("init" in m for m in compiled), compiled
    assert int(loaded.state.step) == 0 and loaded.state.model.layers[0].weight.shape == (7, 784)
    assert bool(jnp.all(loaded.state.model.layers[0].weight == state.model.layers[0].weight))


@pytest.mark.parametrize(
    "field, value",
    [
        ("format_version", None),
        ("format_version", [3]),
        ("step", "12"),
        ("step", None),
        ("payload_bytes", 1.5),
        ("payload_sha256", 0),
    ],
)
def test_a_header_field_of_the_wrong_type_or_missing_is_named(small, tmp_path, field, value):
    """A header that parses but holds a field of the wrong type (or none, `None` here)
    is one `CheckpointError` naming the file and the field, never a traceback."""
    import json

    from eqx_fmnist.checkpoint import MAGIC, CheckpointError, load_checkpoint

    path = _saved(small, tmp_path)
    blob = path.read_bytes()
    start = len(MAGIC) + 8
    length = int.from_bytes(blob[len(MAGIC) : start], "little")
    header = json.loads(blob[start : start + length])
    del header["header_sha256"]  # as a checkpoint written before headers had a checksum
    if value is None:
        del header[field]
    else:
        header[field] = value
    head = json.dumps(header).encode()
    path.write_bytes(MAGIC + len(head).to_bytes(8, "little") + head + blob[start + length :])
    with pytest.raises(CheckpointError, match=rf"{path.name}: the header's `{field}` is"):
        load_checkpoint(path)


@pytest.mark.parametrize("edit", ["step", "learning_rate", "bit"])
def test_a_damaged_header_is_refused_and_one_without_a_checksum_is_read(small, tmp_path, edit):
    """The header's checksum covers every field: a step of 0 read as 9, a learning rate
    changed, one flipped bit anywhere in it is one `CheckpointError` naming the file; the
    same header without its checksum (written before headers had one) loads."""
    from eqx_fmnist.checkpoint import MAGIC, CheckpointError, load_checkpoint

    path = _saved(small, tmp_path)
    blob = path.read_bytes()
    start = len(MAGIC) + 8
    length = int.from_bytes(blob[len(MAGIC) : start], "little")
    head = blob[start : start + length]
    if edit == "step":
        damaged = head.replace(b'"step": 0,', b'"step": 9,')
    elif edit == "learning_rate":
        damaged = head.replace(b'"learning_rate": 0.003', b'"learning_rate": 0.001')
    else:
        i = head.index(b'"num_train": ') + len(b'"num_train": ')
        damaged = head[:i] + bytes([head[i] ^ 0x01]) + head[i + 1 :]  # 256 -> 356
    assert damaged != head and len(damaged) == len(head)
    path.write_bytes(blob[:start] + damaged + blob[start + length :])
    with pytest.raises(CheckpointError, match=rf"{path.name}: the header is damaged"):
        load_checkpoint(path)
    header = json.loads(head)
    del header["header_sha256"]
    old = json.dumps(header).encode()
    path.write_bytes(MAGIC + len(old).to_bytes(8, "little") + old + blob[start + length :])
    assert load_checkpoint(path).step == 0


def test_a_result_saves_itself_and_a_checkpoint_answers_with_the_model_evaluated(small, tmp_path):
    """`save_result` writes what `fit` returned (state, config, training-set size) with no
    more arguments; the loaded checkpoint's `.model` is the weight average the run
    evaluated (not the last step's raw weights), and the members of an ensemble load."""
    import jax
    import numpy as np

    import eqx_fmnist as ef

    c = config(steps=8, ema_decay=0.9)
    result = ef.fit(c, ef.Splits(small, small))
    back = ef.load_checkpoint(ef.save_result(tmp_path / "r.eqx", result))
    assert back.step == 8 and back.num_train == len(small) and back.config == c
    for got, want in zip(jax.tree.leaves(back.model), jax.tree.leaves(result.model), strict=True):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    raw = jax.tree.leaves(back.state.model)[0]
    assert not np.array_equal(np.asarray(raw), np.asarray(jax.tree.leaves(back.model)[0]))
    members = ef.fit(c, ef.Splits(small, small), members=ef.ensemble.Seeds(2))
    again = ef.load_checkpoint(ef.save_result(tmp_path / "m.eqx", members))
    assert again.members == members.configs and again.state.num_members == 2


@pytest.mark.parametrize("bit", [62, 40, 26])
def test_a_flipped_bit_in_the_header_length_is_one_line_not_an_allocation(small, tmp_path, bit):
    """A header length past the file's end or past `MAX_HEADER_BYTES` (one flipped bit
    of the 8-byte field) is refused naming the field, by the loader and by the reader of
    a payload's checksum alike, before anything that long is read."""
    from eqx_fmnist.checkpoint import (
        MAGIC,
        CheckpointError,
        load_checkpoint,
        payload_digest,
        save_checkpoint,
    )
    from eqx_fmnist.state import init_state

    c = config()
    path = save_checkpoint(tmp_path / "c.eqx", init_state(c, len(small)), c, num_train=256)
    blob = bytearray(path.read_bytes())
    field = len(MAGIC)
    length = int.from_bytes(blob[field : field + 8], "little") ^ (1 << bit)
    blob[field : field + 8] = length.to_bytes(8, "little")
    path.write_bytes(bytes(blob))
    for read in (load_checkpoint, payload_digest):
        with pytest.raises(CheckpointError, match="length field says") as caught:
            read(path)
        assert "\n" not in str(caught.value)
