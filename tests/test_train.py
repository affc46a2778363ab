"""`fit`, the one loop: reproducible, resumable, its history and callbacks, its
schedules."""

import dataclasses

import numpy as np

from helpers import tree_allclose


def small_config(**kw):
    from eqx_fmnist.config import TrainConfig

    base = dict(steps=16, batch_size=32, hidden_sizes=(32,), schedule="constant")
    return TrainConfig(**(base | kw))


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
    from eqx_fmnist.config import TrainConfig
    from eqx_fmnist.optim import make_optimizer, make_schedule

    c = TrainConfig(steps=100, schedule="warmup_cosine", warmup_steps=10, learning_rate=1e-2)
    unit = make_schedule(c, 100)
    lrs = [c.learning_rate * float(unit(s)) for s in (0, 5, 10, 55, 100)]
    assert lrs[0] == 0 and abs(lrs[1] - 5e-3) < 1e-9 and abs(lrs[2] - 1e-2) < 1e-9
    assert abs(lrs[3] - 5e-3) < 1e-4 and lrs[4] == 0
    assert make_optimizer(dataclasses.replace(c, grad_clip=1.0)) is not None


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
