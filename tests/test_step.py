"""The compiled step: one AdamW step by hand, the fused scan against a Python loop,
one compile per path, donated buffers, type checks, ahead-of-time compiling."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import jaxtyping
import numpy as np
import pytest

import helpers
from helpers import at_once, f32_sum_atol, feistel_order, tree_allclose


def small_config(**kw):
    # No augmentation: the hand-written references below gather plain batches.
    return helpers.small_config(**({"shift": 0, "mirror": False} | kw))


def test_train_step_does_one_adamw_step_by_hand(small):
    """One step equals a hand-written AdamW update of the reference gradients."""
    from eqx_fmnist.dataset import normalize
    from eqx_fmnist.losses import cross_entropy
    from eqx_fmnist.state import init_state
    from eqx_fmnist.step import train_step

    config = small_config(weight_decay=0.01, learning_rate=0.01, label_smoothing=0.0)
    state = init_state(config, len(small))
    model0 = state.model
    x, y = small.images[:32], small.labels[:32]

    def gradients(m, x, y):
        """The batch's gradient, and each example's (for the rounding below)."""
        whole = eqx.filter_grad(lambda m: cross_entropy(jax.vmap(m)(normalize(x)), y))(m)
        each = eqx.filter_vmap(
            eqx.filter_grad(lambda m, xi, yi: cross_entropy(m(normalize(xi))[None], yi[None])),
            in_axes=(None, 0, 0),
        )(m, x, y)
        return whole, each

    grads, per_example = at_once(gradients, model0, x, y)
    # AdamW's first step: m = (1-b1) g, v = (1-b2) g^2, bias-corrected: update = g/|g|.
    eps = 1e-8

    def expected(p, g):
        p, g = np.asarray(p, np.float64), np.asarray(g, np.float64)
        return p - 0.01 * (g / (np.abs(g) + eps) + 0.01 * p)

    want = jax.tree.map(expected, eqx.filter(model0, eqx.is_inexact_array), grads)
    # g / |g| is steep where |g| is near eps: a gradient entry rounded differently by the
    # two programs moves its update by lr * eps / (|g| + eps)^2 times that rounding. The
    # rounding of each entry: a sum over the batch of per-example terms (f32_sum_atol on
    # their magnitudes, with the backward pass's own sums folded into k).
    magnitude = jax.tree.map(lambda g: np.abs(np.asarray(g)).mean(0), per_example)
    new, metrics = train_step(state, x, y)  # donates `state` (and `model0`)
    got = eqx.filter(new.model, eqx.is_inexact_array)
    for g, m, a, b in zip(*map(jax.tree.leaves, (grads, magnitude, got, want)), strict=True):
        steepness = 0.01 * eps / (np.abs(np.asarray(g, np.float64)) + eps) ** 2
        atol = steepness * f32_sum_atol(32 * 64, m) + 1e-6
        np.testing.assert_array_less(np.abs(np.asarray(a) - np.asarray(b)), atol + 1e-6 * abs(b))
    assert int(new.step) == 1
    assert set(metrics) == {"loss", "accuracy", "grad_norm", "skipped", "learning_rate"}
    assert float(metrics["learning_rate"]) == pytest.approx(0.01)


def test_fused_steps_equal_a_python_loop_of_steps(small):
    """Over the same batches in the same order, scan and loop give the same parameters."""
    from eqx_fmnist.state import init_state
    from eqx_fmnist.step import train_epoch, train_step, train_steps

    config = small_config()
    fused = init_state(config, len(small))
    fused, m1 = train_epoch(fused, small, batch_size=32)  # 8 steps, one call
    fused, m2 = train_steps(fused, small, batch_size=32, num_steps=5)  # a chunk across epochs
    fused, m3 = train_steps(fused, small, batch_size=32, num_steps=3)

    from eqx_fmnist.dataset import FEISTEL_ROUNDS

    looped = init_state(config, len(small))
    key, losses = jnp.array(np.asarray(looped.key)), []  # a copy: the state is donated
    for epoch in range(2):  # the batch order, computed here independently
        round_keys = np.asarray(jr.bits(jr.fold_in(key, epoch), (FEISTEL_ROUNDS,), jnp.uint32))
        perm = feistel_order(round_keys, 256)
        for b in range(8):
            idx = perm[b * 32 : (b + 1) * 32]
            looped, m = train_step(looped, small.images[idx], small.labels[idx])
            losses.append(float(m["loss"]))
    assert int(fused.step) == int(looped.step) == 16
    assert tree_allclose(fused.model, looped.model, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        np.concatenate([m1["loss"], m2["loss"], m3["loss"]]), losses, rtol=1e-5
    )


def test_each_path_compiles_once(small):
    from eqx_fmnist import step
    from eqx_fmnist.state import init_state

    config = small_config()
    state = init_state(config, len(small))
    steps_before = eqx.debug.get_num_traces(step._steps_traced)
    step_before = eqx.debug.get_num_traces(step._step_traced)
    for _ in range(4):
        state, _ = step.train_epoch(state, small, batch_size=32)
    for i in range(6):
        state, _ = step.train_step(state, small.images[i : i + 32], small.labels[i : i + 32])
    assert eqx.debug.get_num_traces(step._steps_traced) - steps_before <= 1
    assert eqx.debug.get_num_traces(step._step_traced) - step_before <= 1


def test_state_buffers_are_donated(small):
    from eqx_fmnist.state import init_state
    from eqx_fmnist.step import train_epoch

    state = init_state(small_config(), len(small))
    old_weight = state.model.layers[0].weight
    train_epoch(state, small, batch_size=32)
    assert old_weight.is_deleted()


def test_type_checks_bite_on_mismatched_batches(small):
    from eqx_fmnist.state import init_state
    from eqx_fmnist.step import train_step

    state = init_state(small_config(), len(small))
    with pytest.raises(jaxtyping.TypeCheckError):
        train_step(state, small.images[:32], small.labels[:31])
    with pytest.raises(jaxtyping.TypeCheckError):
        train_step(state, small.images[:32].reshape(32, 28, 28), small.labels[:32])


def test_compile_steps_runs_the_same_chunk_without_retracing(small):
    from eqx_fmnist import step
    from eqx_fmnist.state import init_state

    config = small_config()
    a = init_state(config, len(small))
    b = init_state(config, len(small))
    run = step.compile_steps(a, small, batch_size=32, num_steps=5)
    traces = eqx.debug.get_num_traces(step._steps_traced)
    a, ma = run(a)
    a, _ = run(a)  # a second call: no new trace, and the state moves on
    b, mb = step.train_steps(b, small, batch_size=32, num_steps=5)
    b, _ = step.train_steps(b, small, batch_size=32, num_steps=5)
    assert eqx.debug.get_num_traces(step._steps_traced) - traces <= 1  # train_steps' own
    assert int(a.step) == int(b.step) == 10
    assert tree_allclose(a.model, b.model, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(ma["loss"], mb["loss"], rtol=1e-6)
    assert "flops" in str(run.compiled.cost_analysis())
