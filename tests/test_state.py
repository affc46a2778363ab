"""The training state: one run, or members stacked on a leading axis; its numbers as
arrays; taking members; what cannot share a program."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import helpers
from helpers import same_arrays, small_config as config, tree_allclose


def test_each_initial_member_is_the_single_runs_initial_state_exactly():
    from eqx_fmnist.state import init_members, init_state, select_members

    configs = [config(seed=s) for s in (3, 0)]
    stacked = init_members(configs, 256)
    assert stacked.step.shape == (2,) and stacked.num_members == 2
    for i, c in enumerate(configs):
        one = init_state(c, 256)
        assert one.num_members is None
        assert same_arrays(select_members(stacked, i), one)


def test_the_numbers_are_arrays_in_the_state_for_one_run_and_for_members():
    from eqx_fmnist.state import init_members, init_state

    configs = [config(learning_rate=1e-3, label_smoothing=0.0), config(learning_rate=2e-3)]
    stacked = init_members(configs, 256)
    np.testing.assert_allclose(stacked.hyperparams["learning_rate"], [1e-3, 2e-3])
    np.testing.assert_allclose(stacked.hyperparams["weight_decay"], [0.05, 0.05])
    np.testing.assert_allclose(stacked.hyperparams["label_smoothing"], [0.0, 0.1])
    one = init_state(configs[1], 256)
    assert {k: float(v) for k, v in one.hyperparams.items()} == pytest.approx(
        {"learning_rate": 2e-3, "weight_decay": 0.05, "label_smoothing": 0.1}
    )


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(hidden_sizes=(16,)), "hidden_sizes"),
        (dict(batch_size=16), "batch_size"),
        (dict(precision="p=f32,c=bf16,o=f32"), "precision"),
    ],
)
def test_members_that_would_change_the_program_are_refused(change, message):
    from eqx_fmnist.state import check_members

    with pytest.raises(ValueError, match=f"differ in {message}.*only in seed"):
        check_members([config(), config(**change)])


def test_select_members_keeps_the_stack_or_takes_one():
    from eqx_fmnist.state import init_members, init_state, select_members

    stacked = init_members([config(seed=s) for s in range(4)], 256)
    two = select_members(stacked, [3, 1])
    assert two.step.shape == (2,) and two.num_members == 2
    assert same_arrays(select_members(two, 0), select_members(stacked, 3))
    assert tree_allclose(select_members(two, 1).model, select_members(stacked, 1).model)
    assert jnp.array_equal(two.key[1], stacked.key[1])
    assert same_arrays(select_members(stacked, 2), init_state(config(seed=2), 256))
    # numpy leaves (weights read back into numpy) are taken in numpy, not moved to JAX
    weights = jax.tree.map(np.asarray, eqx.filter(stacked.model, eqx.is_array))
    taken = select_members(weights, [2, 0])
    for got, whole in zip(jax.tree.leaves(taken), jax.tree.leaves(weights), strict=True):
        assert type(got) is np.ndarray and np.array_equal(got, whole[[2, 0]])


def test_a_state_needs_its_numbers_and_says_how_many_members_it_holds():
    import jax.random as jr

    from eqx_fmnist.model import MLP, num_members
    from eqx_fmnist.optim import make_optimizer
    from eqx_fmnist.state import init_members

    with pytest.raises(ValueError, match="needs label_smoothing, learning_rate, weight_decay"):
        from eqx_fmnist.state import TrainState

        TrainState(MLP(key=jr.key(0)), make_optimizer(config()), key=jr.key(1), hyperparams={})
    stacked = init_members([config(seed=s) for s in range(3)], 256)
    assert stacked.num_members == 3 == num_members(stacked.model)
    assert stacked.global_step == 0 and stacked.hyperparams["learning_rate"].shape == (3,)


def test_per_member_runs_a_function_on_each_member_of_a_stack_or_on_one_model():
    """`per_member(fn, model, *args)`: each member's own output, on a leading axis,
    as a loop over `select_members` computes it in numpy; one model is a stack of one."""
    from eqx_fmnist.model import per_member
    from eqx_fmnist.state import init_members, select_members

    stacked = init_members([config(seed=s) for s in range(3)], 256).model
    x = np.random.default_rng(0).random((5, 784)).astype(np.float32)

    def first_layer(m, images, scale):  # one member: (its weight @ x.T).T * scale
        z = jnp.matmul(images, m.layers[0].weight.T, precision="highest")  # float32 anywhere
        return {"z": z * scale, "b": m.layers[0].bias}

    out = per_member(first_layer, stacked, jnp.asarray(x), 2.0)
    for i in range(3):
        w = np.asarray(select_members(stacked, i).layers[0].weight, np.float64)
        atol = 2.0 * helpers.f32_matmul_atol(x, w.T)  # float32's rounding of a 784-term sum
        np.testing.assert_allclose(out["z"][i], x @ w.T * 2.0, rtol=0, atol=atol)
        assert jnp.array_equal(out["b"][i], select_members(stacked, i).layers[0].bias)
    one = select_members(stacked, 1)
    alone = per_member(first_layer, one, jnp.asarray(x), 2.0)
    assert alone["z"].shape == (1, 5, one.layers[0].weight.shape[0])
    assert jnp.array_equal(alone["z"][0], first_layer(one, jnp.asarray(x), 2.0)["z"])


@pytest.mark.slow  # cold: compiles several programs or trains on the real data
def test_the_weight_average_is_the_hand_computed_ema(small):
    from eqx_fmnist.state import init_state
    from eqx_fmnist.step import train_step, train_steps

    # ema_decay 0.2: the warm-up (1 + t) / (10 + t) rules steps 0 and 1, the cap 0.2
    # steps 2 to 4 (with 0.5 the cap never bound in 5 steps).
    config = helpers.small_config(steps=5, ema_decay=0.2)
    state = init_state(config, len(small))
    params = lambda m: [np.asarray(p) for p in jax.tree.leaves(eqx.filter(m, eqx.is_inexact_array))]  # noqa: E731
    average = params(state.model)
    x, y = small.images[:32], small.labels[:32]
    for t in range(5):
        state, _ = train_step(state, x, y)
        d = min(0.2, (1 + t) / (10 + t))
        average = [d * a + (1 - d) * p for a, p in zip(average, params(state.model), strict=True)]
    for got, want in zip(params(state.average), average, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    assert state.eval_model is state.average
    fused, _ = train_steps(init_state(config, len(small)), small, batch_size=32, num_steps=2)
    assert fused.average is not None and not tree_allclose(fused.average, fused.model)
    assert init_state(config.with_changes(ema_decay=0.0), len(small)).average is None
