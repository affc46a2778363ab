"""Accuracy on moved images against a numpy forward pass on numpy-moved images, and the
moves' logits as one program."""

import jax.numpy as jnp
import numpy as np
import pytest


def test_robustness_matches_a_numpy_forward_pass_on_numpy_moved_images(codelab_run, real_data):
    from test_model import reference_mlp, reference_params

    from eqx_fmnist.dataset import ArrayDataset
    from eqx_fmnist.robustness import evaluate_robustness

    from helpers import moved_numpy

    n = 2000
    images, labels = real_data.test_images[:n].reshape(n, 784), real_data.test_labels[:n]
    r = evaluate_robustness(codelab_run.model, ArrayDataset(images, labels), shifts=(2,))

    def acc(x):
        logits = reference_mlp(
            reference_params(codelab_run.model), jnp.asarray(x / 255.0, jnp.float32)
        )
        return float((np.asarray(logits).argmax(1) == labels).mean())

    assert r.clean == pytest.approx(acc(images), abs=1e-4)
    assert r.mirrored == pytest.approx(acc(moved_numpy(images, mirror=True)), abs=1e-4)
    moves = [(2, 0), (-2, 0), (0, 2), (0, -2)]
    want = np.mean([acc(moved_numpy(images, dx, dy)) for dx, dy in moves])
    assert r.shifted[2] == pytest.approx(want, abs=1e-4)
    assert r.mirrored < r.clean - 0.1  # the codelab's model is not robust: the test can tell
    assert [name for name, _ in r.rows()][:2] == ["as they are", "mirrored left-right"]


def test_the_moves_are_the_image_its_mirror_and_four_directions_per_shift():
    from eqx_fmnist.robustness import robustness_moves

    moves = robustness_moves((1, 3))
    assert moves.tolist() == [
        [0, 0, 0],
        [0, 0, 1],
        [1, 0, 0],
        [-1, 0, 0],
        [0, 1, 0],
        [0, -1, 0],
        [3, 0, 0],
        [-3, 0, 0],
        [0, 3, 0],
        [0, -3, 0],
    ]


def test_robustness_counts_each_moves_accuracy_from_its_logits():
    """`Robustness.of`: the first move is the images as they are, the second mirrored,
    then each shift's four directions averaged (hand-made logits)."""
    from eqx_fmnist.robustness import Robustness

    labels = np.array([0, 1, 2, 3])
    right = np.eye(10)[labels]
    wrong = np.eye(10)[(labels + 1) % 10]
    half = np.concatenate([right[:2], wrong[2:]])
    logits = np.stack([right, wrong, right, half, wrong, right])  # clean, mirror, 1 px x 4
    r = Robustness.of(logits, labels, shifts=(1,))
    assert (r.clean, r.mirrored, r.count) == (1.0, 0.0, 4)
    assert r.shifted == {1: pytest.approx((1 + 0.5 + 0 + 1) / 4)}
