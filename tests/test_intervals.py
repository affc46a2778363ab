"""Intervals: the finite check that stops or skips a step with a NaN or infinite loss or gradient."""

import numpy as np
import pytest

from helpers import small_config


def test_a_nan_stops_fit_naming_the_step_and_metric(small):
    from eqx_fmnist.dataset import Splits
    from eqx_fmnist.intervals import NonFiniteError
    from eqx_fmnist.train import fit

    seen = []
    with pytest.raises(NonFiniteError) as info:
        fit(
            small_config(log_every=4, learning_rate=1e30),
            Splits(small, small),
            callback=lambda e, s: seen.append(e["step"]),
        )
    assert info.value.metric in ("loss", "gradient norm")
    assert 1 <= info.value.step <= 16 and f"step {info.value.step}" in str(info.value)
    assert all(s < info.value.step for s in seen)  # the bad interval was never reported
    assert "on_nonfinite='skip'" in str(info.value)


@pytest.mark.slow  # cold: compiles several programs or trains on the real data
def test_skip_leaves_the_parameters_of_bad_steps_unchanged(small):
    import equinox as eqx
    import jax.numpy as jnp

    from eqx_fmnist.state import init_state
    from eqx_fmnist.step import train_steps

    c = small_config(log_every=4, on_nonfinite="skip")
    state = init_state(c, len(small))
    # A NaN bias makes every loss and gradient NaN: every step must be skipped.
    state = eqx.tree_at(
        lambda s: s.model.layers[0].bias, state, state.model.layers[0].bias * jnp.nan
    )
    before = np.asarray(state.model.layers[0].weight).copy()
    new, metrics = train_steps(state, small, batch_size=32, num_steps=4)
    assert bool(metrics["skipped"].all()) and int(new.step) == 4
    np.testing.assert_array_equal(np.asarray(new.model.layers[0].weight), before)


def test_skip_stops_when_the_parameters_themselves_give_a_nan(small):
    """Skipping protects the parameters from a bad step, not from a bad start: once the
    parameters give a non-finite loss, every later step would be skipped, and the run
    stops (it once trained to the end, then failed drawing its figures)."""
    from eqx_fmnist.dataset import Splits
    from eqx_fmnist.intervals import NonFiniteError
    from eqx_fmnist.train import fit

    config = small_config(log_every=4, on_nonfinite="skip", learning_rate=1e30)
    with pytest.raises(NonFiniteError, match="the parameters themselves now give") as info:
        fit(config, Splits(small, small))
    assert info.value.metric == "loss" and info.value.step % 4 == 0


def test_a_plans_lengths_and_count_are_its_listed_chunks():
    """`Plan.lengths` and `Plan.intervals` say what listing `Plan.chunks` would (the
    distinct lengths in order, their count) for 2,000 random plans and starts, and a
    plan of 2**31 - 1 steps logged every step answers at once (nothing listed)."""
    import numpy as np

    from eqx_fmnist.config import MAX_STEPS
    from eqx_fmnist.intervals import Plan

    rng = np.random.default_rng(0)
    for _ in range(2000):
        total, interval = int(rng.integers(1, 300)), int(rng.integers(1, 80))
        start = int(rng.integers(0, total + 3))
        plan = Plan(total, 10, interval, 8)
        listed = list(plan.chunks(start))
        assert plan.lengths(start) == list(dict.fromkeys(listed))
        assert plan.intervals(start) == len(listed)
    huge = Plan(MAX_STEPS, 100, 1, 8)
    assert huge.lengths(5) == [1] and huge.intervals(5) == MAX_STEPS - 5


def test_more_steps_than_the_step_counter_holds_are_refused(small):
    import eqx_fmnist as ef
    from eqx_fmnist.config import MAX_STEPS

    with pytest.raises(ValueError, match="the step counter is an int32"):
        ef.TrainConfig(steps=MAX_STEPS + 1)
    with pytest.raises(ValueError, match="train fewer epochs"):
        ef.fit(ef.TrainConfig(epochs=MAX_STEPS, batch_size=32), ef.Splits(small))


def test_the_memory_a_run_may_use_is_the_processs_not_the_hosts(monkeypatch, tmp_path):
    """On a CPU the memory check compares with the least of the host's RAM, the cgroup's
    limit (a container's; `max` is none) and `RLIMIT_AS`, and names which bound it: a
    model that fits the host but not the container is refused in one line, before
    anything is allocated."""
    import resource

    import jax

    import eqx_fmnist.intervals as intervals
    from eqx_fmnist.intervals import check_memory, process_memory

    host, _ = process_memory()
    limit = tmp_path / "memory.max"
    monkeypatch.setattr(intervals, "CGROUP_LIMITS", (str(limit),))
    limit.write_text("max\n")
    assert process_memory()[0] <= host
    limit.write_text(f"{2**30}\n")
    assert process_memory() == (2**30, "its cgroup allows")
    monkeypatch.setattr(resource, "getrlimit", lambda which: (2**29, resource.RLIM_INFINITY))
    assert process_memory() == (2**29, "its address-space limit (RLIMIT_AS) allows")
    big = small_config(hidden_sizes=(4096, 4096), batch_size=4096)
    with pytest.raises(ValueError, match="address-space limit") as caught:
        check_memory([big], 60_000, device=jax.devices("cpu")[0])
    assert "\n" not in str(caught.value)


def test_float16_products_are_refused_on_a_tpu(monkeypatch):
    """A TPU has no float16 multiplier: `c=f16` (or `float16`) would train in bfloat16
    products under another name, so a run is refused before anything is allocated; a
    CPU computes them and plans the run."""
    import jax

    import eqx_fmnist as ef
    from eqx_fmnist.intervals import plan_run

    for precision in ("p=f32,c=f16,o=f32", "float16"):
        config = ef.TrainConfig(steps=4, batch_size=8, precision=precision)
        if jax.default_backend() != "tpu":
            assert plan_run([config], 64).total_steps == 4
        monkeypatch.setattr(jax, "default_backend", lambda: "tpu")
        with pytest.raises(ValueError, match="a TPU has no float16 multiplier.*use c=bf16"):
            plan_run([config], 64)
        monkeypatch.undo()
