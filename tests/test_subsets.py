"""Row tables: members that train on their own rows of the training set (K folds, bootstrap samples)."""

import numpy as np
import pytest


@pytest.mark.parametrize("n, k", [(60, 5), (61, 5), (10, 3), (7, 7)])
def test_the_folds_partition_the_examples(n, k):
    from eqx_fmnist.subsets import kfold

    s = kfold(n, k, seed=3)
    held = np.concatenate(s.held_out)
    assert np.array_equal(np.sort(held), np.arange(n))  # every example in exactly one fold
    assert max(map(len, s.held_out)) - min(map(len, s.held_out)) <= 1
    assert s.train.shape == (k, n - -(-n // k))
    for i, fold in enumerate(s.held_out):
        assert not set(s.train[i]) & set(fold)  # a member never trains on its fold
        assert len(set(s.train[i])) == s.size  # nor on a row twice
        others = set(range(n)) - set(fold)
        assert len(others - set(s.train[i])) <= 1  # at most one row trimmed


def test_folds_and_bootstrap_refuse_what_does_not_divide():
    from eqx_fmnist.subsets import bootstrap, kfold

    for bad in (1, 0, True):
        with pytest.raises(ValueError, match="at least 2 folds"):
            kfold(100, bad)
    with pytest.raises(ValueError, match="folds empty"):
        kfold(3, 5)
    sample = bootstrap(50, 3, seed=1)
    assert sample.train.shape == (3, 50) and sample.held_out is None
    assert 0 <= sample.train.min() and sample.train.max() < 50
    assert len(set(sample.train[0])) < 50  # drawn with replacement
