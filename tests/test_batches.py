"""What each step trains on: a step's batch against one made by hand (its indices,
its rows, its moves by the augmentation stream's key), how many steps' batches a chunk
prepares at once, and that a block prepared at once trains the very run that steps
gathering one by one train."""

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import helpers
from helpers import tree_allclose


def test_a_steps_batch_is_its_indices_rows_and_moves(small):
    """`step_batch` of global step 7: the rows `batch_indices` names for that step, moved
    by `augment` with the augmentation stream's key folded with 7 (an independent
    composition of the public pieces), and no teacher rows without a teacher."""
    from eqx_fmnist.augment import augment
    from eqx_fmnist.batches import augment_key, data_platform, step_batch
    from eqx_fmnist.dataset import batch_indices
    from eqx_fmnist.state import init_state

    config = helpers.small_config(shift=2, mirror=True)
    state = init_state(config, len(small))
    x, y, rows = helpers.at_once(
        lambda s, d: step_batch(s, jnp.int32(7), d, 32, None, None), state, small
    )

    def by_hand(state, data):
        idx = batch_indices(state.key, 7, len(data.images), 32)
        key = jr.fold_in(augment_key(state.key), 7)
        return augment(key, data.images[idx], state.settings.augmentation), idx

    want, idx = helpers.at_once(by_hand, state, small)
    np.testing.assert_array_equal(np.asarray(x), np.asarray(want))
    np.testing.assert_array_equal(np.asarray(y), np.asarray(small.labels[idx]))
    assert rows is None and data_platform(small) == jax.default_backend()


def test_a_block_of_steps_prepares_as_many_batches_as_fit_the_budget():
    """On a CPU each step gathers its own batch; elsewhere the largest divisor of the
    chunk whose batches (members x batch x 784 bytes) fit in `PREPARED_BYTES`."""
    from eqx_fmnist.batches import PREPARED_BYTES, block_steps

    assert block_steps(117, 512, 1, "cpu") == 1
    per_step = 512 * 784  # bytes of one member's batch
    assert PREPARED_BYTES // per_step == 167  # 64 MiB
    assert block_steps(117, 512, 1, "tpu") == 117  # 117 <= 167
    assert block_steps(117, 512, 8, "cuda") == 13  # <= 20: 13 divides 117, 20..14 do not
    assert block_steps(117, 512, 32, "tpu") == 3  # <= 5
    assert block_steps(117, 512, 128, "tpu") == 1
    assert block_steps(7, 32, 1, "tpu") == 7 and block_steps(1, 512, 1, "tpu") == 1


@pytest.mark.parametrize("members", [None, 2])
def test_steps_prepared_in_blocks_train_the_same_bits(small, monkeypatch, members):
    """A chunk whose batches are prepared a block at a time (the accelerators' way,
    forced here on the CPU) makes the very run that steps gathering one by one make:
    the same batch order, the same moves, bit for bit; one model or members."""
    import jax

    from eqx_fmnist import chunk as chunk_module  # it asks `block_steps` for its block
    from eqx_fmnist.config import TrainConfig
    from eqx_fmnist.state import init_members, init_state
    from eqx_fmnist.step import train_steps

    config = TrainConfig(
        steps=8, batch_size=32, hidden_sizes=(16,), shift=2, mirror=True, erase=0.3
    )

    def run(block):
        monkeypatch.setattr(chunk_module, "block_steps", lambda *_: block)
        if members:
            configs = [config.with_changes(seed=s) for s in range(members)]
            state = init_members(configs, len(small))
        else:
            state = init_state(config, len(small))
        state, metrics = train_steps(state, small, batch_size=32, num_steps=8)
        return jax.device_get((state.model, metrics))

    one_by_one = run(1)
    for block in (4, 8):
        blocked = run(block)
        assert tree_allclose(blocked, one_by_one, rtol=0, atol=0), block
