"""The label audit: cleanlab's confident learning over out-of-sample probabilities, its ranking, and the one line without the extra."""

import numpy as np
import pytest

from helpers import run_cli_here


def test_the_audit_ranks_cleanlabs_issues_by_self_confidence():
    """The issues cleanlab finds, in the order of a numpy self-confidence, lowest first;
    planted flips on probabilities that know the truth come out on top."""
    pytest.importorskip("cleanlab")
    import eqx_fmnist as ef

    rng = np.random.default_rng(0)
    truth = rng.integers(0, 10, 2000)
    logits = rng.normal(0, 1, (2000, 10))
    logits[np.arange(2000), truth] += 6.0
    probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    given = truth.copy()
    planted = rng.choice(2000, 40, replace=False)
    given[planted] = (truth[planted] + rng.integers(1, 10, 40)) % 10
    found = ef.audit_labels(probs, given)
    confidence = probs[np.arange(2000), given]  # numpy's self-confidence
    assert np.all(np.diff(confidence[found.indices]) >= 0)  # ranked lowest first
    np.testing.assert_allclose(found.score, confidence[found.indices])
    assert np.array_equal(found.suggested, probs[found.indices].argmax(1))
    hits = len(set(found.indices.tolist()) & set(planted.tolist()))
    assert hits >= 0.9 * len(found.indices) and hits >= 0.8 * 40  # precision, recall (34, 34)
    with pytest.raises(Exception, match="one row per example|typechecking parameter"):
        ef.audit_labels(probs[:10], given)  # (the suite's runtime checker may come first)


def test_an_audit_without_cleanlab_is_one_line(monkeypatch, tmp_path):
    import sys

    monkeypatch.setitem(sys.modules, "cleanlab", None)
    monkeypatch.setitem(sys.modules, "cleanlab.filter", None)
    result = run_cli_here("audit", tmp_path / "nowhere")
    assert result.returncode == 2 and "pip install 'eqx_fmnist[audit]'" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.slow
@pytest.mark.optimized  # trains folds for real: the running time counts
def test_the_audit_finds_planted_flips_in_real_images(real_data):
    """2% of 12,000 training images relabelled at random; 3-fold out-of-fold
    probabilities of a short run; the planted flips among the top k suspects (k = the
    number planted). Measured 0.733 on a 2-core Xeon (0.696 with 8 epochs of a 128-wide
    model); the bound leaves room for another CPU's rounding."""
    pytest.importorskip("cleanlab")
    import jax.numpy as jnp

    import eqx_fmnist as ef

    rng = np.random.default_rng(0)
    images = jnp.asarray(real_data.train_images[:12_000].reshape(12_000, -1))
    labels = real_data.train_labels[:12_000].astype(np.int32)
    planted = rng.choice(12_000, 240, replace=False)
    noisy = labels.copy()
    noisy[planted] = (labels[planted] + rng.integers(1, 10, 240)) % 10
    splits = ef.Splits(ef.ArrayDataset(images, jnp.asarray(noisy)))
    cv = ef.cross_validate(ef.TrainConfig(epochs=15), splits, k=3)
    found = ef.audit_labels(cv.probabilities, noisy)
    hits = len(set(found.indices[:240].tolist()) & set(planted.tolist()))
    assert hits / 240 >= 0.65, hits
