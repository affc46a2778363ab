"""The chunk: what a compiled call of steps runs on, by name. Its checks refuse a bad
chunk when it is made, its block of prepared steps follows the platform, and the
members' `vmap` axes and `shard_map` specs name each member's own row table and share
the rest."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from helpers import small_config


@pytest.fixture
def state(small):
    from eqx_fmnist.state import init_state

    return init_state(small_config(), len(small))


@pytest.fixture
def members(small):
    from eqx_fmnist.state import init_members

    return init_members([small_config(seed=s) for s in range(2)], len(small))


def test_a_chunk_names_what_it_runs_on(state, small):
    from eqx_fmnist.chunk import Chunk

    chunk = Chunk.of(state, small, batch_size=32, num_steps=4)
    assert (chunk.dataset, chunk.batch_size, chunk.num_steps) == (small, 32, 4)
    assert chunk.teacher is None and chunk.subsets is None and chunk.mesh is None
    assert chunk.members is None
    # On a CPU each step gathers its own batch; on an accelerator all 4 steps' batches of
    # 32 are prepared at once (far below PREPARED_BYTES).
    assert chunk.block == (1 if jax.default_backend() == "cpu" else 4)


@pytest.mark.parametrize("steps", [0, -1, True])
def test_a_chunk_of_no_steps_is_refused_when_made(state, small, steps):
    from eqx_fmnist.chunk import Chunk

    with pytest.raises(ValueError, match="`num_steps` must be a positive int"):
        Chunk.of(state, small, batch_size=32, num_steps=steps)


def test_a_batch_larger_than_the_data_is_refused_when_made(state, small):
    from eqx_fmnist.chunk import Chunk

    with pytest.raises(ValueError, match="batch_size"):
        Chunk.of(state, small, batch_size=len(small) + 1, num_steps=1)


def test_row_tables_must_be_one_per_member(state, members, small):
    from eqx_fmnist.chunk import Chunk

    rows = jnp.zeros((3, 64), jnp.int32)  # three tables for two members
    with pytest.raises(ValueError, match=r"one row table per member, shape \(2, m\)"):
        Chunk.of(members, small, batch_size=32, num_steps=1, subsets=rows)
    with pytest.raises(ValueError, match="one row table per member"):
        Chunk.of(state, small, batch_size=32, num_steps=1, subsets=rows[:1])


def test_the_members_axes_map_only_their_row_tables(members, small):
    """`in_axes` by name: mapping the axes' leaves over the chunk pairs 0 with the row
    table and `None` with every other array."""
    import equinox as eqx

    from eqx_fmnist.chunk import Chunk

    rows = jnp.arange(128, dtype=jnp.int32).reshape(2, 64)
    chunk = Chunk.of(members, small, batch_size=32, num_steps=1, subsets=rows)
    axes = chunk.member_axes()
    assert axes.dataset.images is None and axes.dataset.labels is None
    resolved = axes.subsets(chunk.subsets)  # eqx.if_array(0): 0 for an array
    assert resolved == 0
    # What the axes map, found independently: vmap over them and read each member's rows.
    first = eqx.filter_vmap(lambda c: c.subsets[0], in_axes=(axes,))(chunk)
    np.testing.assert_array_equal(np.asarray(first), [0, 64])


def test_the_members_specs_split_only_their_row_tables(members, small):
    import equinox as eqx
    from jax.sharding import PartitionSpec as P

    from eqx_fmnist.chunk import Chunk

    rows = jnp.zeros((2, 64), jnp.int32)
    chunk = Chunk.of(members, small, batch_size=32, num_steps=1, subsets=rows)
    arrays = eqx.filter(chunk, eqx.is_array)
    specs = chunk.member_specs(arrays)
    assert specs.subsets == P("members")
    assert specs.dataset.images == P() and specs.dataset.labels == P()
    plain = Chunk.of(members, small, batch_size=32, num_steps=1)
    assert plain.member_specs(eqx.filter(plain, eqx.is_array)).subsets is None


def test_each_device_runs_the_chunk_without_the_mesh(members, small):
    from eqx_fmnist.chunk import Chunk
    from eqx_fmnist.parallel import MEMBERS, make_mesh

    mesh = make_mesh(1, axis=MEMBERS)  # one device: the mesh is all the chunk holds of it
    chunk = Chunk.of(members, small, batch_size=32, num_steps=2, mesh=mesh)
    local = chunk.on_each_device()
    assert local.mesh is None and chunk.mesh is mesh
    assert (local.num_steps, local.block, local.members) == (2, chunk.block, 2)
