"""Accuracy on the real data, all 10,000 test images. These train for real: slow."""

import pytest

pytestmark = pytest.mark.optimized  # compiled as a user's run is: what the numbers are of


@pytest.mark.slow
def test_codelab_reference_run_reaches_0_85(real_splits):
    from eqx_fmnist.config import TrainConfig
    from eqx_fmnist.train import fit

    result = fit(TrainConfig.codelab(), real_splits)
    assert result.test.count == 10_000
    assert result.test.accuracy >= 0.85, result.test


@pytest.mark.slow
def test_the_recommended_recipe_cut_to_15_epochs_reaches_0_875(real_splits):
    """The default recipe (augmentation, label smoothing, warm-up and cosine decay, the
    weight average) cut to 15 of its 80 epochs, about 11 s here. Measured on a 2-core
    AMD EPYC (AVX-512): 0.8835, 0.8842 and 0.8825 for seeds 0, 1 and 2; the threshold
    leaves 0.0075 for other CPUs' rounding. The whole recipe's 0.90 is a benchmark
    (`benchmarks/accuracy.py`), not a test."""
    from eqx_fmnist.config import TrainConfig
    from eqx_fmnist.train import fit

    result = fit(TrainConfig(epochs=15), real_splits)
    assert result.test.count == 10_000
    assert result.test.accuracy >= 0.875, result.test
