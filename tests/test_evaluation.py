import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from helpers import F32_U, f32_sum_atol, mlp_logits_atol


@pytest.mark.slow  # cold: compiles several programs or trains on the real data
def test_evaluation_counts_all_10000_and_matches_numpy(codelab_run, real_datasets, real_data):
    from eqx_fmnist.evaluation import evaluate, predict_logits

    _, test = real_datasets
    for batch_size in (1000, 512, 333):  # 333 leaves a ragged last batch
        r = evaluate(codelab_run.model, test, batch_size=batch_size)
        assert r.count == 10_000
        logits = np.asarray(
            predict_logits(codelab_run.model, test.images, batch_size=batch_size), np.float64
        )
        labels = real_data.test_labels
        logp = logits - logits.max(1, keepdims=True)
        logp -= np.log(np.exp(logp).sum(1, keepdims=True))
        np.testing.assert_allclose(r.loss, -logp[np.arange(10_000), labels].mean(), rtol=1e-5)
        np.testing.assert_allclose(r.accuracy, (logits.argmax(1) == labels).mean(), rtol=1e-6)


def test_confusion_matrix_matches_numpy(codelab_run, real_datasets, real_data):
    from eqx_fmnist.evaluation import confusion_matrix, per_class_accuracy, predict

    _, test = real_datasets
    pred = np.asarray(predict(codelab_run.model, test.images))
    cm = np.asarray(confusion_matrix(test.labels, pred))
    expected = np.zeros((10, 10), int)
    for t, p in zip(real_data.test_labels, pred, strict=True):
        expected[t, p] += 1
    np.testing.assert_array_equal(cm, expected)
    assert cm.sum() == 10_000
    np.testing.assert_allclose(
        per_class_accuracy(jnp.asarray(cm)), expected.diagonal() / 1000, rtol=1e-6
    )
    assert codelab_run.test.accuracy == pytest.approx(expected.trace() / 10_000, abs=1e-6)


def test_predict_accepts_floats_and_pixels_alike(codelab_run):
    from eqx_fmnist.evaluation import predict, predict_proba

    pixels = jr.randint(jr.key(0), (7, 784), 0, 256).astype(jnp.uint8)
    a = predict(codelab_run.model, pixels)
    b = predict(codelab_run.model, pixels.astype(jnp.float32) / 255.0)
    np.testing.assert_array_equal(a, b)
    p = predict_proba(codelab_run.model, pixels)
    np.testing.assert_allclose(p.sum(1), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(p.argmax(1), a)


def test_most_confused_names_the_largest_off_diagonal_share():
    import numpy as np

    from eqx_fmnist.evaluation import most_confused

    cm = np.array([[8, 2, 0], [0, 5, 0], [1, 3, 6]])  # class 1 is never confused
    other, share = most_confused(cm)
    assert other[0] == 1 and share[0] == 0.2
    assert other[2] == 1 and share[2] == 0.3
    assert other[1] != 1 and share[1] == 0.0  # never itself, even with no mistakes


@pytest.mark.slow  # cold: compiles several programs or trains on the real data
def test_one_evaluation_for_a_model_and_for_a_stack_of_members(small):
    """A stack evaluates as each member alone (the same function, vmapped: equal up to
    the rounding of batched matmuls, bounded by `mlp_logits_atol`) and as their
    ensemble, the mean of their probabilities (numpy here)."""
    import eqx_fmnist as ef

    from helpers import small_config

    configs = [small_config(seed=s) for s in (0, 1, 2)]
    stack = ef.init_members(configs, len(small)).model
    result = ef.evaluate(stack, small, batch_size=100)  # a ragged last batch
    assert len(result.members) == 3 and result.count == len(small)
    probs, delta = [], 0.0
    for i, m in enumerate(result.members):
        one = ef.select_members(stack, i)
        assert ef.num_members(one) is None
        alone = ef.evaluate(one, small, batch_size=100)
        # Batched (the stack) against alone: logits within `d`, so each log-probability
        # within 2 d, and an image's answer can change only where its top two logits
        # are within 2 d of each other.
        d = mlp_logits_atol(one, small.images)
        delta = max(delta, d)
        z = np.asarray(ef.predict_logits(one, small.images), np.float64)
        top2 = np.sort(z, axis=1)[:, -2:]
        close = np.mean(top2[:, 1] - top2[:, 0] <= 2 * d)
        assert m.loss == pytest.approx(alone.loss, abs=2 * d + f32_sum_atol(len(z), alone.loss))
        assert m.accuracy == pytest.approx(alone.accuracy, abs=close + 1e-12)
        e = np.exp(z - z.max(1, keepdims=True))
        probs.append(e / e.sum(1, keepdims=True))
    mean, labels = np.mean(probs, axis=0), np.asarray(small.labels)
    assert result.accuracy == pytest.approx(np.mean(mean.argmax(1) == labels))
    assert result.loss == pytest.approx(
        -np.log(mean[np.arange(len(labels)), labels]).mean(), rel=1e-5
    )
    # Probabilities move by at most e^(2 d) - 1 of themselves when the logits move by d.
    atol = np.expm1(2 * delta) + 8 * F32_U
    np.testing.assert_allclose(ef.predict_proba(stack, small.images), mean, rtol=0, atol=atol)
    assert result.accuracy_mean == pytest.approx(np.mean([m.accuracy for m in result.members]))
