"""The one optimiser path: Optax's AdamW with its schedule, numbers injected as arrays of the state."""

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest


@pytest.mark.slow  # cold: compiles several programs or trains on the real data
@pytest.mark.parametrize("schedule", ["constant", "cosine", "warmup_cosine"])
@pytest.mark.parametrize("grad_clip", [None, 0.5])
def test_the_one_optimiser_path_is_optax_adamw_with_its_schedule(schedule, grad_clip):
    """The library's step (numbers injected as arrays of the state, the rate of each step
    written by the step) takes the steps Optax's own `adamw` takes with the schedule and
    weight decay compiled in; and changing the state's numbers changes the steps as the
    plain optimiser with those numbers would."""
    import equinox as eqx
    import jax
    import optax

    from eqx_fmnist.config import TrainConfig
    from eqx_fmnist.dataset import ArrayDataset, normalize
    from eqx_fmnist.losses import cross_entropy
    from eqx_fmnist.precision import optax_promotion
    from eqx_fmnist.state import init_state
    from eqx_fmnist.step import train_step

    from helpers import at_once, f32_sum_atol, synthetic_arrays

    config = TrainConfig(
        steps=20,
        schedule=schedule,
        grad_clip=grad_clip,
        warmup_steps=5,
        hidden_sizes=(8,),
        batch_size=16,
        label_smoothing=0.0,
        # No augmentation: train_step would move the batch the plain loop uses.
        shift=0,
        mirror=False,
    )
    a = synthetic_arrays(n_train=16)
    data = ArrayDataset(a["train_images"], a["train_labels"])

    def plain_rate(c):
        return {
            "constant": optax.constant_schedule(c.learning_rate),
            "cosine": optax.cosine_decay_schedule(c.learning_rate, 20),
            "warmup_cosine": optax.warmup_cosine_decay_schedule(
                0.0, c.learning_rate, 5, 20, end_value=0.0
            ),
        }[schedule]

    def plain(c):  # Optax as a user writes it: the schedule at the peak, compiled in
        tx = optax.adamw(plain_rate(c), weight_decay=c.weight_decay)
        return optax.chain(optax.clip_by_global_norm(grad_clip), tx) if grad_clip else tx

    def by_hand(c, steps=6):
        """The parameters after `steps` of Optax's own optimiser, and how far a rounding
        of the gradients could move each one: Adam divides by sqrt(v) + eps, so where a
        gradient is tiny a float32 rounding of it (a batch sum of per-example terms, on
        their magnitudes) moves the update by lr * rounding / (sqrt(v) + eps)."""
        params, static = eqx.partition(init_state(c, 16).model, eqx.is_inexact_array)
        tx = plain(c)
        opt = tx.init(params)

        def loss(p, x=data.images, y=data.labels):
            logits = jax.vmap(eqx.combine(p, static))(normalize(x))
            return cross_entropy(logits, y)

        per_example = at_once(
            jax.vmap(jax.grad(loss), in_axes=(None, 0, 0)),
            params,
            data.images[:, None],
            data.labels[:, None],
        )
        rounding = jax.tree.map(lambda g: f32_sum_atol(16 * 64, np.abs(g).mean(0)), per_example)
        reach = jax.tree.map(np.zeros_like, rounding)

        @eqx.filter_jit  # one program for Optax's step, not one per operation
        def plain_step(params, opt):
            with optax_promotion():
                u, opt = tx.update(jax.grad(loss)(params), opt, params)
            return optax.apply_updates(params, u), opt

        for t in range(steps):
            params, opt = plain_step(params, opt)
            rate, correction = float(plain_rate(c)(t)), 1 - 0.999 ** (t + 1)
            nu = optax.tree_utils.tree_get(opt, "nu")
            reach = jax.tree.map(
                lambda r, e, v, rate=rate, k=correction: (
                    r + rate * e / (np.sqrt(np.asarray(v) / k) + 1e-8)
                ),
                reach,
                rounding,
                nu,
            )
        return params, reach

    def library(state, steps=6):
        for _ in range(steps):
            state, _ = train_step(state, data.images, data.labels)
        return eqx.filter(state.model, eqx.is_inexact_array)

    def assert_close(a, b_and_reach):
        b, reach = b_and_reach
        for x, y, r in zip(*map(jax.tree.leaves, (a, b, reach)), strict=True):
            np.testing.assert_array_less(
                np.abs(np.asarray(x) - np.asarray(y)), 1e-6 + 1e-5 * np.abs(np.asarray(y)) + r
            )

    assert_close(library(init_state(config, 16)), by_hand(config))
    other = config.with_changes(learning_rate=1e-2, weight_decay=0.2)
    state = init_state(config, 16)
    held = {
        **state.hyperparams,
        "learning_rate": jnp.float32(1e-2),
        "weight_decay": jnp.float32(0.2),
    }
    assert_close(library(eqx.tree_at(lambda s: s.hyperparams, state, held)), by_hand(other))


def test_schedules_reach_zero_and_warm_up():
    from eqx_fmnist.config import TrainConfig
    from eqx_fmnist.optim import make_optimizer, make_schedule
    from eqx_fmnist.precision import optax_promotion

    c = TrainConfig(steps=100, schedule="warmup_cosine", warmup_steps=10, learning_rate=1e-2)
    unit = make_schedule(c, 100)
    lrs = [c.learning_rate * float(unit(s)) for s in (0, 5, 10, 55, 100)]
    assert lrs[0] == 0 and abs(lrs[1] - 5e-3) < 1e-9 and abs(lrs[2] - 1e-2) < 1e-9
    # The cosine's end, (1 + cos(pi)) / 2, is 0 within float32's rounding of cos(pi)
    # (a TPU's cosine is a few ulp off -1).
    assert abs(lrs[3] - 5e-3) < 1e-4 and abs(lrs[4]) < 1e-2 * 1e-6
    # Clipping comes before AdamW: a gradient of norm 10 counts as norm 1 in the moments,
    # so a second, small gradient weighs as much against it as a gradient of norm 1
    # would (Adam's first update alone cannot show it: it does not see the scale).
    clipped = make_optimizer(dataclasses.replace(c, grad_clip=1.0, weight_decay=0.0))
    params = {"w": jnp.zeros((2, 2), jnp.float32)}
    grads = [np.full((2, 2), 5.0, np.float32), np.array([[0.1, -0.1], [0.2, 0.0]], np.float32)]
    opt = clipped.init(params)
    for g in grads:
        with optax_promotion():
            update, opt = clipped.update({"w": jnp.asarray(g)}, opt, params)
    m, v = np.zeros((2, 2)), np.zeros((2, 2))
    for g in grads:  # numpy: clip to global norm 1, then Adam's moments
        g = g * min(1.0, 1.0 / np.linalg.norm(g))
        m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g**2
    expected = -1e-2 * (m / (1 - 0.9**2)) / (np.sqrt(v / (1 - 0.999**2)) + 1e-8)
    # Adam's bias correction 1 - 0.999**2 = 0.002 magnifies the rounding of 0.999**2 by
    # 500: an ulp of it is 3e-5 of the update, and an accelerator's power (exp and log,
    # a few ulps off) moved it by 2.8e-4 on a TPU; a clip to norm 2 instead of 1 moves it
    # by 14%.
    np.testing.assert_allclose(np.asarray(update["w"]), expected, rtol=1e-3)


def test_the_optimizers_count_is_its_own_or_the_states_step():
    """Adam's state keeps a count (a skipped step does not move it); a chain's state is a
    tuple, whose `count` is the tuple's method, not a count: the state's step then."""
    import jax.numpy as jnp
    import optax

    from eqx_fmnist.optim import optimizer_count

    params = {"w": jnp.zeros(3)}
    step = jnp.asarray(7)
    adam = optax.adam(1e-3).init(params)
    assert int(optimizer_count(adam[0], step)) == 0
    chained = optax.chain(optax.clip_by_global_norm(1.0), optax.sgd(0.1)).init(params)
    assert optimizer_count(chained, step) is step
