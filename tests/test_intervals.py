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
