"""Integrated gradients: against a float64 finite-difference path integral written in
numpy, complete (the attributions sum to the score's change) to within a midpoint-rule
error that shrinks with the steps, for one model and an ensemble, and not what a model
with random weights says."""

import numpy as np
import pytest

from helpers import numpy_gelu


def _logits64(model, x):
    """The MLP's logits in float64 numpy, for rows of `x` in [0, 1]."""
    for i, layer in enumerate(model.layers):
        w, b = np.asarray(layer.weight, np.float64), np.asarray(layer.bias, np.float64)
        x = x @ w.T + b
        if i < len(model.layers) - 1:
            x = numpy_gelu(x)
    return x


def _reference_ig(model, x, target, steps, h=1e-4):
    """Integrated gradients by central differences at the midpoints of the path from the
    blank image, all in float64: no JAX gradient anywhere."""
    d = x.shape[0]
    grads = np.zeros(d)
    for alpha in (np.arange(steps) + 0.5) / steps:
        point = alpha * x
        plus = point[None, :] + h * np.eye(d)
        minus = point[None, :] - h * np.eye(d)
        grads += (_logits64(model, plus)[:, target] - _logits64(model, minus)[:, target]) / (2 * h)
    return x * grads / steps


@pytest.fixture(scope="module")
def tiny():
    import jax

    import eqx_fmnist as ef

    return ef.MLP(hidden_sizes=(8,), key=jax.random.PRNGKey(3))


@pytest.fixture(scope="module")
def images():
    rng = np.random.default_rng(0)
    return rng.integers(0, 256, (3, 784), dtype=np.uint8)


def test_attributions_match_a_float64_finite_difference_path_integral(tiny, images):
    import eqx_fmnist as ef

    e = ef.explain(tiny, images, steps=16)
    x = images.astype(np.float64) / 255
    predicted = _logits64(tiny, x).argmax(axis=-1)
    np.testing.assert_array_equal(e.target, predicted)
    for i in range(len(images)):
        ref = _reference_ig(tiny, x[i], int(predicted[i]), steps=16)
        np.testing.assert_allclose(e.attributions[i], ref, atol=2e-5 * np.abs(ref).max(), rtol=0)
    blank = _logits64(tiny, np.zeros((1, 784)))[0]
    change = _logits64(tiny, x)[np.arange(3), predicted] - blank[predicted]
    np.testing.assert_allclose(e.score_change, change, rtol=1e-4, atol=1e-5)


def test_completeness_error_shrinks_as_the_midpoint_rule_refines(tiny, images):
    import eqx_fmnist as ef

    errors = [ef.explain(tiny, images, steps=s).completeness_error.max() for s in (2, 8, 32)]
    # The midpoint rule's error falls as 1/steps**2: 16x per 4x more steps (float32 noise
    # aside), so at least 8x here.
    assert errors[0] > 8 * errors[1] > 64 * errors[2], errors
    e = ef.explain(tiny, images, steps=32)
    assert (e.completeness_error <= 1e-3 * np.abs(e.score_change) + 1e-5).all()


def test_a_chosen_class_is_explained_and_bad_arguments_are_refused(tiny, images):
    import eqx_fmnist as ef

    e = ef.explain(tiny, images, target=[4, 0, 9], steps=8)
    np.testing.assert_array_equal(e.target, [4, 0, 9])
    x = images.astype(np.float64) / 255
    ref = _reference_ig(tiny, x[2], 9, steps=8)
    np.testing.assert_allclose(e.attributions[2], ref, atol=2e-5 * np.abs(ref).max(), rtol=0)
    with pytest.raises(ValueError, match="`steps` must be a positive int"):
        ef.explain(tiny, images, steps=0)
    with pytest.raises(ValueError, match="`target` must be a class 0-9"):
        ef.explain(tiny, images, target=10)


def test_an_ensemble_explains_its_log_mean_probability(images):
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    import eqx_fmnist as ef

    keys = jax.random.split(jax.random.PRNGKey(0), 2)
    stack = eqx.filter_vmap(lambda k: ef.MLP(hidden_sizes=(8,), key=k))(keys)
    e = ef.explain(stack, images, steps=64)
    scores = np.asarray(ef.predict_logits(stack, jnp.asarray(images)))  # the ensemble's
    blank = np.asarray(ef.predict_logits(stack, jnp.zeros((1, 784), jnp.uint8)))[0]
    np.testing.assert_array_equal(e.target, scores.argmax(axis=-1))
    np.testing.assert_allclose(
        e.score_change, scores[np.arange(3), e.target] - blank[e.target], rtol=1e-4, atol=1e-5
    )
    # numpy: the log of the members' mean softmax, by finite differences, at one pixel.
    x = images[0].astype(np.float64) / 255
    members = [ef.select_members(stack, i) for i in range(2)]

    def score(v):
        z = np.stack([_logits64(m, v[None])[0] for m in members])
        p = np.exp(z - z.max(axis=-1, keepdims=True))
        return np.log((p / p.sum(axis=-1, keepdims=True)).mean(axis=0))[e.target[0]]

    pixel, h = int(np.argmax(x)), 1e-4
    grad = 0.0
    for alpha in (np.arange(64) + 0.5) / 64:
        step = np.zeros(784)
        step[pixel] = h
        grad += (score(alpha * x + step) - score(alpha * x - step)) / (2 * h)
    np.testing.assert_allclose(e.attributions[0, pixel], x[pixel] * grad / 64, rtol=1e-3, atol=1e-6)


@pytest.mark.slow  # cold: compiles several programs or trains on the real data
def test_a_trained_model_and_random_weights_attribute_differently(real_data, real_splits):
    """The randomisation check (Adebayo et al., 2018): a method that only outlined the
    input would give the same map for any weights."""
    import jax

    import eqx_fmnist as ef

    trained = ef.fit(ef.TrainConfig(steps=150, hidden_sizes=(64,), log_every=150), real_splits)
    assert trained.test.accuracy > 0.75
    random = ef.MLP(hidden_sizes=(64,), key=jax.random.PRNGKey(7))
    images = real_data.test_images[:20].reshape(20, -1)
    a = ef.explain(trained.model, images, steps=32).attributions
    b = ef.explain(
        random, images, target=ef.explain(trained.model, images, steps=4).target, steps=32
    ).attributions

    def ranks(v):
        return np.argsort(np.argsort(v))

    # Spearman's rank correlation over each image's inked pixels (the blank ones get no
    # attribution from any model: x - baseline is 0 there).
    ink = images > 0
    rho = np.array(
        [np.corrcoef(ranks(x[m]), ranks(y[m]))[0, 1] for x, y, m in zip(a, b, ink, strict=True)]
    )
    assert np.median(np.abs(rho)) < 0.5, rho
