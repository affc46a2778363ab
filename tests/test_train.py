"""`fit`, the one loop: reproducible, resumable, its history and callbacks, its
schedules."""

import numpy as np
import pytest

from helpers import small_config, tree_allclose


def test_runs_are_reproducible(small):
    from eqx_fmnist.dataset import Splits
    from eqx_fmnist.train import fit

    a = fit(small_config(log_every=4), Splits(small, small))
    b = fit(small_config(log_every=8), Splits(small, small), callback=None)  # other chunking
    c = fit(small_config(seed=1), Splits(small, small))
    assert tree_allclose(a.model, b.model, rtol=1e-5, atol=1e-6)
    assert not tree_allclose(a.model, c.model)
    assert [h["step"] for h in a.history] == [4, 8, 12, 16]


def test_fit_reports_history_and_calls_back(small):
    from eqx_fmnist.dataset import Splits
    from eqx_fmnist.train import fit

    seen = []
    r = fit(
        small_config(log_every=8),
        Splits(small, small),
        callback=lambda m, s: seen.append((m, int(s.step))),
    )
    assert [s for _, s in seen] == [8, 16] and [m for m, _ in seen] == r.history
    for key in ("loss", "accuracy", "grad_norm", "examples_per_sec", "learning_rate", "seconds"):
        assert all(np.isfinite(h[key]) for h in r.history)
    assert r.test.count == 256 and r.compile_seconds > 0 and r.train_seconds > 0
    assert r.history[-1]["loss"] < r.history[0]["loss"]


def test_fit_splits_its_wall_time(small):
    """Every part of `fit`'s time is there, in order; a callback's own time is counted
    as the callbacks' (a sleep, timed here), and the parts fit in the call's wall time,
    measured around it."""
    import time

    from eqx_fmnist.dataset import Splits
    from eqx_fmnist.train import FIT_SECONDS, fit

    start = time.perf_counter()
    r = fit(small_config(log_every=8), Splits(small, small), callback=lambda m, s: time.sleep(0.2))
    wall = time.perf_counter() - start
    # Only what the sleeps make certain is asserted: how fast the rest runs is the
    # benchmarks' (`benchmarks/time_to_accuracy.py`, the CLI's time line).
    assert list(r.seconds) == list(FIT_SECONDS) and min(r.seconds.values()) >= 0
    assert r.seconds["callbacks"] >= 0.4  # two intervals, a 0.2 s sleep each
    assert r.train_seconds == sum(h["seconds"] for h in r.history) > 0
    # The second chunk was queued before the first interval's callback slept, so the
    # sleep shows in the pace of the run (the second interval's wall).
    assert r.history[1]["seconds"] >= 0.2
    assert r.seconds["test"] > 0 and sum(r.seconds.values()) <= wall


def test_fit_queues_the_next_chunk_before_the_host_reads_this_one(small, monkeypatch):
    """The device never waits for the host between intervals: chunk k + 1 is called
    before chunk k's metrics are read and its callbacks run, and the state a callback
    gets (not donated) is the one at its interval's end, still readable then. Three
    chunks of one length are traced here and compiled once, before the first call, in
    a thread of their own while the test program is made here."""
    import threading

    import jax

    from eqx_fmnist import step as step_module, train as train_module
    from eqx_fmnist.dataset import Splits
    from eqx_fmnist.hooks import test_scores
    from eqx_fmnist.train import fit

    events = []
    call = step_module.CompiledSteps.__call__

    def logged(self, state):
        events.append(("call", int(state.step)))
        return call(self, state)

    monkeypatch.setattr(step_module.CompiledSteps, "__call__", logged)
    lower_steps, main = train_module.lower_steps, threading.current_thread()

    def lowered(*args, **kwargs):
        assert threading.current_thread() is main  # traced where the caller's settings hold
        make = lower_steps(*args, **kwargs)
        events.append(("lowered", kwargs["num_steps"]))

        def compiled():
            events.append(("compile", kwargs["num_steps"], threading.current_thread() is main))
            return make()

        return compiled

    monkeypatch.setattr(train_module, "lower_steps", lowered)
    steps = []

    def tested(*args):
        events.append(("test program", threading.current_thread() is main))
        return test_scores(*args)

    def callback(record, state):
        events.append(("callback", record["step"]))
        steps.append(int(state.step))
        jax.block_until_ready(state.model)  # not deleted by a donation

    fit(
        small_config(log_every=8, steps=24),
        Splits(small, small),
        callback=callback,
        test_program=tested,
    )
    assert sorted(events[1:3]) == [("compile", 8, False), ("test program", True)]  # at once
    assert events[:1] + events[3:] == [
        ("lowered", 8),
        ("call", 0),
        ("call", 8),
        ("callback", 8),
        ("call", 16),
        ("callback", 16),
        ("callback", 24),
    ]
    assert steps == [8, 16, 24]


@pytest.mark.slow  # cold: compiles several programs or trains on the real data
def test_fit_resumes_from_a_state_exactly(small):
    from eqx_fmnist.dataset import Splits
    from eqx_fmnist.state import init_state
    from eqx_fmnist.step import train_steps
    from eqx_fmnist.train import fit

    config = small_config()
    straight = fit(config, Splits(small, small))
    half = init_state(config, len(small))
    half, _ = train_steps(half, small, batch_size=32, num_steps=6)
    resumed = fit(config, Splits(small, small), state=half)
    assert [h["step"] for h in resumed.history] == [8, 16]  # first to the epoch boundary
    assert tree_allclose(resumed.model, straight.model, rtol=1e-5, atol=1e-6)


def test_history_learning_rates_follow_the_schedule(small):
    from eqx_fmnist.dataset import Splits
    from eqx_fmnist.train import fit

    config = small_config(schedule="warmup_cosine", warmup_steps=4, log_every=2, learning_rate=0.01)
    history = fit(config, Splits(small, small)).history

    # Hand-written warm-up then cosine decay to 0 over 16 steps, at each interval's last step.
    def lr(s):
        return 0.01 * s / 4 if s < 4 else 0.01 * 0.5 * (1 + np.cos(np.pi * (s - 4) / 12))

    np.testing.assert_allclose(
        [h["learning_rate"] for h in history], [lr(h["step"] - 1) for h in history], atol=1e-7
    )


def test_fit_takes_splits_and_refuses_other_data_or_other_sizes_before_training(small):
    import pytest

    import eqx_fmnist as ef
    from eqx_fmnist.train import _check_arguments

    # Under this suite's type checker `fit` itself refuses a tuple for `splits`; without
    # one, its own check says what to pass instead.
    with pytest.raises(TypeError, match="splits"):
        ef.fit(small_config(), (small, small))
    with pytest.raises(TypeError, match=r"not tuple: pass `ef\.split_data\(data\)`"):
        _check_arguments(small_config(), (small, small), None, [])
    # The config holds out 64 validation images; splits made without them are refused...
    held_out = small_config(validation_size=64)
    with pytest.raises(
        ValueError, match="validation_size is 64, but the splits' validation set holds 0"
    ):
        ef.fit(held_out, ef.Splits(small, small))
    # ...and so are splits of another size.
    other = ef.split_data((small, small), validation_size=32)
    with pytest.raises(ValueError, match="holds 32 images: make the splits from this config"):
        ef.fit(held_out, other)


def test_fits_door_names_a_list_of_configs_or_a_callback_that_is_not_one(small):
    """`fit(members=[cfg, cfg])` and `fit(callback=5)` ended deep inside with an
    AttributeError; the door names the argument and what it takes (called as `fit`
    calls it: under this suite's type checker `fit` itself refuses them first)."""
    import pytest

    import eqx_fmnist as ef
    from eqx_fmnist.train import _check_arguments

    splits = ef.Splits(small, small)
    with pytest.raises(TypeError, match=r"`members` must be a Members choice .*not list"):
        _check_arguments(small_config(), splits, [small_config()], [])
    with pytest.raises(TypeError, match="`callback` must be a function"):
        _check_arguments(small_config(), splits, None, 5)
    with pytest.raises(TypeError, match="`callback` must be a function"):
        _check_arguments(small_config(), splits, None, [print, 5])
    _check_arguments(small_config(), splits, ef.ensemble.Seeds(2), [print])
