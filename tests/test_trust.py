"""The trust flag: the smallest Mahalanobis distance to a class mean, per class and move."""

import numpy as np
import pytest

from helpers import f32_matmul_atol, moved_numpy, numpy_gelu


def test_the_trust_score_is_the_smallest_mahalanobis_distance():
    """Against the plain formula `(f - m)' P (f - m)`, computed class by class."""
    from eqx_fmnist.trust import Trust

    rng = np.random.default_rng(3)
    feats, means = rng.normal(size=(40, 6)), rng.normal(size=(10, 6))
    a = rng.normal(size=(6, 6))
    precision = a @ a.T + np.eye(6)
    trust = Trust(means, precision, 1.0, (0.0, 1.0), 0.0)
    want = np.array([min((f - m) @ precision @ (f - m) for m in means) for f in feats])
    np.testing.assert_allclose(trust.scores(feats), want, rtol=1e-9)


def test_trust_fitted_on_moved_images_has_a_mean_per_class_and_move(small, small_run):
    """`moves=trust_moves(config)`: one class mean per move, of the hidden activations of
    the training images moved in numpy and pushed through a numpy forward pass, and one
    covariance pooled over the residuals of every move."""
    import jax.random as jr

    import eqx_fmnist as ef
    from eqx_fmnist.trust import fit_trust

    from helpers import small_config

    moves = ef.trust_moves(small_config(shift=1))
    assert moves == (
        (0, 0, False),
        (0, 0, True),
        (1, 0, False),
        (-1, 0, False),
        (0, 1, False),
        (0, -1, False),
    )
    model = small_run.model
    train, held = small.split(64, key=jr.PRNGKey(0))
    trust = fit_trust(model, train, held, moves=moves)
    assert trust.means.shape == (60, 32)
    w = np.asarray(model.layers[0].weight, np.float64)
    b = np.asarray(model.layers[0].bias, np.float64)
    y, x = np.asarray(train.labels), np.asarray(train.images)
    means, residuals = [], []
    for move in moves:
        z = moved_numpy(x, *move).astype(np.float64) / 255.0 @ w.T + b
        f = numpy_gelu(z)
        m = np.stack([f[y == c].mean(0) for c in range(10)])
        means.append(m), residuals.append(f - m[y])
    atol = 1.13 * f32_matmul_atol(x / 255.0, w.T) + 1e-5
    np.testing.assert_allclose(trust.means, np.concatenate(means), rtol=0, atol=atol)
    r = np.concatenate(residuals)
    cov = r.T @ r / len(r)
    cov += 1e-6 * np.trace(cov) / len(cov) * np.eye(len(cov))
    np.testing.assert_allclose(
        np.linalg.inv(trust.precision), cov, rtol=0, atol=100 * atol * np.abs(r).max()
    )
    with pytest.raises(ValueError, match="moves must be distinct"):
        fit_trust(model, train, held, moves=((0, 0, False), (0, 0, False)))


def test_ink_and_contrast_are_numpys_mean_and_std_of_the_pixels():
    from eqx_fmnist.trust import contrast, ink

    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (300, 784), dtype=np.uint8)
    images[0] = 7  # one flat grey: no contrast at all
    images[1, ::2], images[1, 1::2] = 0, 255  # the most there is: 0.5
    reference = images.astype(np.float64)
    np.testing.assert_allclose(ink(images), reference.mean(1) / 255, rtol=1e-14)
    np.testing.assert_allclose(contrast(images), reference.std(1) / 255, rtol=1e-12, atol=1e-15)
    assert contrast(images)[0] == 0 and contrast(images)[1] == 0.5
    floats = reference / 255  # float pixels take numpy's own path
    np.testing.assert_allclose(
        contrast(floats) * 255, reference.std(1) / 255, rtol=1e-12, atol=1e-15
    )


def test_zero_images_have_an_empty_ink_and_contrast_and_an_empty_answer():
    """The features of no image are no numbers, not numpy's reshape error; an answer of
    zero images (calibrated: the flag's ink and contrast are computed) is empty."""
    import eqx_fmnist as ef
    from eqx_fmnist.calibration import Calibration
    from eqx_fmnist.trust import Trust, contrast, ink

    none = np.zeros((0, 28, 28), np.uint8)
    flat = none.reshape(0, 784)
    assert ink(flat).shape == (0,) and contrast(flat).shape == (0,)
    model = ef.MLP(hidden_sizes=(8,), key=__import__("jax").random.key(0))
    trust = Trust(np.zeros((10, 8)), np.eye(8), 1.0, (0.0, 1.0), 0.0)
    said = ef.answer(model, none, calibration=Calibration(1.0, trust, 100))
    assert said.probabilities.shape == (0, 10) and said.unusual.shape == (0,)
