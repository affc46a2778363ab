import jax.numpy as jnp
import numpy as np
import pytest

from helpers import F32_U, float32_widening


def np_cross_entropy(logits, labels, mask=None, smoothing=0.0):
    logits = np.asarray(logits, np.float64)
    logp = logits - logits.max(1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(1, keepdims=True))
    k = logits.shape[1]
    target = np.full(logits.shape, smoothing / k)
    target[np.arange(len(labels)), labels] += 1 - smoothing
    per = -(target * logp).sum(1)
    w = np.ones(len(labels)) if mask is None else np.asarray(mask, np.float64)
    return (per * w).sum() / w.sum()


def test_cross_entropy_and_accuracy_match_numpy():
    from eqx_fmnist.losses import accuracy, cross_entropy

    rng = np.random.default_rng(0)
    logits = rng.normal(size=(17, 10)).astype(np.float32) * 3
    labels = rng.integers(0, 10, 17)
    mask = rng.random(17) < 0.6
    for m in (None, mask):
        for s in (0.0, 0.1):
            got = cross_entropy(
                jnp.asarray(logits),
                jnp.asarray(labels),
                None if m is None else jnp.asarray(m),
                label_smoothing=s,
            )
            np.testing.assert_allclose(got, np_cross_entropy(logits, labels, m, s), rtol=1e-5)
    right = logits.argmax(1) == labels
    np.testing.assert_allclose(
        accuracy(jnp.asarray(logits), jnp.asarray(labels)), right.mean(), rtol=1e-6
    )
    np.testing.assert_allclose(
        accuracy(jnp.asarray(logits), jnp.asarray(labels), jnp.asarray(mask)),
        right[mask].mean(),
        rtol=1e-6,
    )


def test_masked_out_examples_count_for_nothing():
    from eqx_fmnist.losses import cross_entropy

    logits = jnp.array([[0.0, 5.0], [100.0, -100.0]])
    labels = jnp.array([1, 1])  # the second example would add a loss of 200
    mask = jnp.array([True, False])
    # The loss (0.0067) is logsumexp minus a logit, two numbers near 5: float32 rounds it
    # to a few of 5's ulps, wider on a TPU (`float32_widening`). Counting the masked
    # example would make the mean about 100; dividing by both rows would halve the loss.
    atol = 8 * F32_U * 5.0 * float32_widening()
    np.testing.assert_allclose(
        cross_entropy(logits, labels, mask), np_cross_entropy(logits[:1], [1]), rtol=0, atol=atol
    )


def test_loss_is_float32_for_low_precision_logits():
    from eqx_fmnist.losses import cross_entropy

    logits = jnp.ones((4, 10), jnp.bfloat16)
    assert cross_entropy(logits, jnp.zeros(4, jnp.int32)).dtype == jnp.float32


def test_label_smoothing_given_as_an_array_matches_numpy():
    """A sweep's members hold their smoothing as a (traced) array, including zero."""
    import jax

    from eqx_fmnist.losses import cross_entropy

    rng = np.random.default_rng(1)
    logits = rng.normal(size=(9, 10)).astype(np.float32)
    labels = rng.integers(0, 10, 9)
    f = jax.jit(
        lambda s: cross_entropy(jnp.asarray(logits), jnp.asarray(labels), label_smoothing=s)
    )
    for s in (0.0, 0.1, 0.3):
        np.testing.assert_allclose(
            f(jnp.float32(s)), np_cross_entropy(logits, labels, None, s), rtol=1e-5
        )


def test_soft_cross_entropy_matches_numpy():
    from eqx_fmnist.losses import soft_cross_entropy

    rng = np.random.default_rng(1)
    logits, t = rng.normal(size=(6, 10)), rng.normal(size=(6, 10))
    p = np.exp(t) / np.exp(t).sum(1, keepdims=True)
    log_q = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    got = soft_cross_entropy(jnp.asarray(logits, jnp.float32), jnp.asarray(np.log(p), jnp.float32))
    assert float(got) == pytest.approx(-(p * log_q).sum(1).mean(), rel=1e-5)


def test_the_loss_and_its_gradient_hold_no_gather_or_scatter():
    """The label's entry is picked by a select: lowered for a TPU, the loss's gradient
    holds neither a gather nor a scatter (each a slow operation there), and its value and
    gradient are numpy's (the gradient of the mean NLL: `(softmax - onehot) / n`)."""
    import jax

    from eqx_fmnist.losses import cross_entropy

    rng = np.random.default_rng(2)
    logits, labels = rng.normal(size=(7, 10)).astype(np.float32), rng.integers(0, 10, 7)
    grad = jax.jit(jax.value_and_grad(cross_entropy))
    text = grad.trace(jnp.asarray(logits), jnp.asarray(labels)).lower(lowering_platforms=("tpu",))
    assert "stablehlo.gather" not in text.as_text() and "stablehlo.scatter" not in text.as_text()
    value, g = grad(jnp.asarray(logits), jnp.asarray(labels))
    p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    want = (p - np.eye(10)[labels]) / 7
    assert float(value) == pytest.approx(np_cross_entropy(logits, labels, None, 0.0), rel=1e-5)
    np.testing.assert_allclose(g, want, atol=4 * F32_U * float32_widening())
