"""Accuracy on the real data, all 10,000 test images. These train for real: slow."""

import pytest


@pytest.mark.slow
def test_codelab_reference_run_reaches_0_85(real_datasets):
    from eqx_fmnist.config import TrainConfig
    from eqx_fmnist.train import fit

    result = fit(TrainConfig.codelab(), real_datasets)
    assert result.test.count == 10_000
    assert result.test.accuracy >= 0.85, result.test


@pytest.mark.slow
def test_recommended_recipe_reaches_0_90(real_datasets):
    from eqx_fmnist.config import TrainConfig
    from eqx_fmnist.train import fit

    result = fit(TrainConfig(), real_datasets)
    assert result.test.count == 10_000
    assert result.test.accuracy >= 0.90, result.test
