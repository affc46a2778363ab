"""The test report: one compiled program over the test images as they are, mirrored
and moved, that also scores the test loss and accuracy, checked against numpy."""

import numpy as np
import pytest

from helpers import mlp_logits_atol


def test_the_report_program_scores_each_member_and_the_ensemble_as_numpy_does(small):
    """`report_program` (a run's test report, as `fit` runs it) gives the moved logits
    and, from the same program, `evaluate`'s numbers on the images as they are: here against a float64
    numpy forward pass of each member and of their mean probability, on a ragged last
    batch (100 images in batches of 64)."""
    import equinox as eqx
    import jax

    import eqx_fmnist as ef
    from eqx_fmnist.dataset import ArrayDataset
    from eqx_fmnist.hooks import Evaluation
    from eqx_fmnist.robustness import robustness_moves
    from eqx_fmnist.runs import report_program

    from helpers import moved_numpy, numpy_reference, small_config

    configs = [small_config(seed=s) for s in (0, 1, 2)]
    stack = ef.init_members(configs, len(small)).model
    images, labels = np.asarray(small.images)[:100], np.asarray(small.labels)[:100]
    moves = robustness_moves()
    test = ArrayDataset(images, labels)
    result, logits = report_program(stack, test, Evaluation(ef.FLOAT32, None, 64))(stack)

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

    # Compiled ahead of time on zeros shaped like the stack, the program gives the same bits.
    like = jax.tree.map(lambda x: np.zeros(x.shape, x.dtype) if eqx.is_array(x) else x, stack)
    scored_again, again = report_program(like, test, Evaluation(ef.FLOAT32, None, 64))(stack)
    np.testing.assert_array_equal(again, logits)
    assert scored_again == result
