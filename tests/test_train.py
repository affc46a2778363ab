import dataclasses
import json

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import jaxtyping
import numpy as np
import pytest

from helpers import feistel_order, tree_allclose


def small_config(**kw):
    from eqx_fmnist.config import TrainConfig

    base = dict(steps=16, batch_size=32, hidden_sizes=(32,), schedule="constant")
    return TrainConfig(**(base | kw))


# ----------------------------------------------------------------------------- config


def test_config_round_trips_through_json():
    from eqx_fmnist.config import TrainConfig

    c = TrainConfig(epochs=3, hidden_sizes=(64, 32), precision="p=f32,c=bf16,o=f32", grad_clip=1.0)
    again = TrainConfig.from_json(c.to_json())
    assert again == c and isinstance(again.hidden_sizes, tuple)
    assert json.loads(c.to_json())["hidden_sizes"] == [64, 32]


def test_codelab_config_is_the_reference_run():
    from eqx_fmnist.config import TrainConfig

    c = TrainConfig.codelab()
    assert (c.batch_size, c.learning_rate, c.weight_decay, c.steps) == (512, 3e-3, 1e-4, 400)
    assert c.schedule == "constant" and c.policy.compute_dtype == jnp.float32
    assert c.epochs is None and c.label_smoothing == 0.0
    assert TrainConfig().epochs is not None and TrainConfig().steps is None


@pytest.mark.parametrize(
    "kw, field",
    [
        (dict(batch_size=0), "batch_size"),
        (dict(batch_size=-512), "batch_size"),
        (dict(learning_rate=0.0), "learning_rate"),
        (dict(learning_rate=float("nan")), "learning_rate"),
        (dict(weight_decay=-1.0), "weight_decay"),
        # Under the suite's type checker the `Literal` annotation refuses it first.
        (dict(schedule="linear"), "schedule"),
        (dict(epochs=2, steps=10), "epochs"),
        (dict(steps=0), "steps"),
        (dict(hidden_sizes=(256, -1)), "hidden_sizes"),
        (dict(precision="p=f32,c=f8"), "f8"),
        (dict(label_smoothing=1.5), "label_smoothing"),
        (dict(log_every=0), "log_every"),
        (dict(grad_clip=0.0), "grad_clip"),
        (dict(seed=-1), "seed"),
    ],
)
def test_bad_config_raises_value_error_naming_the_field(kw, field):
    from eqx_fmnist.config import TrainConfig

    with pytest.raises((ValueError, jaxtyping.TypeCheckError), match=field):
        TrainConfig(**kw)


def test_from_dict_rejects_unknown_fields():
    from eqx_fmnist.config import TrainConfig

    with pytest.raises(ValueError, match="unknown TrainConfig fields \\['lr'\\]"):
        TrainConfig.from_dict({"lr": 0.1})


# ----------------------------------------------------------------------------- step


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
    grads = eqx.filter_grad(lambda m: cross_entropy(jax.vmap(m)(normalize(x)), y))(model0)
    # AdamW's first step: m = (1-b1) g, v = (1-b2) g^2, bias-corrected: update = g/|g|.
    eps = 1e-8

    def expected(p, g):
        return p - 0.01 * (g / (jnp.abs(g) + eps) + 0.01 * p)

    want = jax.tree.map(expected, eqx.filter(model0, eqx.is_inexact_array), grads)
    new, metrics = train_step(state, x, y)
    assert tree_allclose(eqx.filter(new.model, eqx.is_inexact_array), want, rtol=1e-4, atol=1e-6)
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


def test_runs_are_reproducible(small):
    from eqx_fmnist.train import fit

    a = fit(small_config(log_every=4), (small, small))
    b = fit(small_config(log_every=8), (small, small), callback=None)  # other chunking
    c = fit(small_config(seed=1), (small, small))
    assert tree_allclose(a.model, b.model, rtol=1e-5, atol=1e-6)
    assert not tree_allclose(a.model, c.model)
    assert [h["step"] for h in a.history] == [4, 8, 12, 16]


def test_fit_reports_history_and_calls_back(small):
    from eqx_fmnist.train import fit

    seen = []
    r = fit(
        small_config(log_every=8),
        (small, small),
        callback=lambda m, s: seen.append((m, int(s.step))),
    )
    assert [s for _, s in seen] == [8, 16] and [m for m, _ in seen] == r.history
    for key in ("loss", "accuracy", "grad_norm", "examples_per_sec", "learning_rate", "seconds"):
        assert all(np.isfinite(h[key]) for h in r.history)
    assert r.test.count == 256 and r.compile_seconds > 0 and r.train_seconds > 0
    assert r.history[-1]["loss"] < r.history[0]["loss"]


def test_fit_resumes_from_a_state_exactly(small):
    from eqx_fmnist.state import init_state
    from eqx_fmnist.step import train_steps
    from eqx_fmnist.train import fit

    config = small_config()
    straight = fit(config, (small, small))
    half = init_state(config, len(small))
    half, _ = train_steps(half, small, batch_size=32, num_steps=6)
    resumed = fit(config, (small, small), state=half)
    assert [h["step"] for h in resumed.history] == [8, 16]  # first to the epoch boundary
    assert tree_allclose(resumed.model, straight.model, rtol=1e-5, atol=1e-6)


def test_schedules_reach_zero_and_warm_up():
    from eqx_fmnist.config import TrainConfig, make_optimizer, make_schedule

    c = TrainConfig(steps=100, schedule="warmup_cosine", warmup_steps=10, learning_rate=1e-2)
    unit = make_schedule(c, 100)
    lrs = [c.learning_rate * float(unit(s)) for s in (0, 5, 10, 55, 100)]
    assert lrs[0] == 0 and abs(lrs[1] - 5e-3) < 1e-9 and abs(lrs[2] - 1e-2) < 1e-9
    assert abs(lrs[3] - 5e-3) < 1e-4 and lrs[4] == 0
    assert make_optimizer(dataclasses.replace(c, grad_clip=1.0)) is not None


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


def test_history_learning_rates_follow_the_schedule(small):
    from eqx_fmnist.train import fit

    config = small_config(schedule="warmup_cosine", warmup_steps=4, log_every=2, learning_rate=0.01)
    history = fit(config, (small, small)).history

    # Hand-written warm-up then cosine decay to 0 over 16 steps, at each interval's last step.
    def lr(s):
        return 0.01 * s / 4 if s < 4 else 0.01 * 0.5 * (1 + np.cos(np.pi * (s - 4) / 12))

    np.testing.assert_allclose(
        [h["learning_rate"] for h in history], [lr(h["step"] - 1) for h in history], atol=1e-7
    )
