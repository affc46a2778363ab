"""Accuracy on moved images against a numpy forward pass on numpy-moved images, and the
moves' logits as one program."""

import jax.numpy as jnp
import numpy as np
import pytest

from helpers import mlp_logits_atol


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


def test_the_report_program_scores_each_member_and_the_ensemble_as_numpy_does(small):
    """`scored_moves` (a run's test report) gives the moved logits and, from the same
    program, `evaluate`'s numbers on the images as they are: here against a float64
    numpy forward pass of each member and of their mean probability, on a ragged last
    batch (100 images in batches of 64)."""
    import equinox as eqx
    import jax

    import eqx_fmnist as ef
    from eqx_fmnist.dataset import ArrayDataset
    from eqx_fmnist.robustness import compile_scored_moves, robustness_moves, scored_moves

    from helpers import moved_numpy, numpy_reference

    configs = [ef.TrainConfig(steps=4, hidden_sizes=(16,), seed=s) for s in (0, 1, 2)]
    stack = ef.init_members(configs, len(small)).model
    images, labels = np.asarray(small.images)[:100], np.asarray(small.labels)[:100]
    moves = robustness_moves((2,))
    logits, result = scored_moves(stack, ArrayDataset(images, labels), moves, batch_size=64)

    assert logits.shape == (len(moves), 100, 10) and result.count == 100
    members = [ef.select_members(stack, i) for i in range(3)]
    views = [moved_numpy(images, int(dx), int(dy), bool(m)) for dx, dy, m in moves]
    d = max(mlp_logits_atol(m, v) for m in members for v in views)
    for view, got in zip(views, logits, strict=True):
        np.testing.assert_allclose(got, numpy_reference(stack, view)["logits"], rtol=0, atol=2 * d)

    def scored(z):  # (loss, accuracy, share of near-ties whose answer may differ)
        z = z - z.max(1, keepdims=True)
        log_p = z - np.log(np.exp(z).sum(1, keepdims=True))
        top2 = np.sort(z, axis=1)[:, -2:]
        tied = np.mean(top2[:, 1] - top2[:, 0] <= 2 * d)
        return -log_p[np.arange(100), labels].mean(), np.mean(z.argmax(1) == labels), tied

    for got, m in zip((result, *result.members), (stack, *members), strict=True):
        loss, acc, tied = scored(numpy_reference(m, images)["logits"])
        assert got.loss == pytest.approx(loss, abs=2 * d + 1e-6)
        assert got.accuracy == pytest.approx(acc, abs=tied + 1e-7)  # a float32 mean
    assert len(result.members) == 3

    # Compiled ahead of time on zeros shaped like the stack (as a run does while it
    # trains), the program gives the same bits.
    like = jax.tree.map(lambda x: np.zeros(x.shape, x.dtype) if eqx.is_array(x) else x, stack)
    program = compile_scored_moves(like, ArrayDataset(images, labels), moves, batch_size=64)
    again, scored_again = program(stack)
    np.testing.assert_array_equal(again, logits)
    assert scored_again == result
