"""What `fit` evaluates with: the run's `Evaluation`, and the end-of-run test program it
makes beside its steps and calls once on the trained model."""

import threading

import jax
import numpy as np
import pytest

from helpers import small_config


def _numpy_scores(model, dataset):
    """Loss and accuracy of `model` on `dataset`, from its logits in numpy (float64)."""
    from eqx_fmnist.dataset import normalize

    from helpers import at_once

    logits = at_once(lambda m, x: jax.vmap(m)(normalize(x)), model, dataset.images)
    logits = np.asarray(logits, np.float64)
    labels = np.asarray(dataset.labels)
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    loss = -log_probs[np.arange(len(labels)), labels].mean()
    return loss, (logits.argmax(axis=1) == labels).mean()


def test_the_default_program_scores_every_test_image(small):
    """`test_scores` gives the test loss and accuracy (a numpy reference) and nothing
    beside them."""
    from eqx_fmnist.dataset import Splits
    from eqx_fmnist.train import fit

    test = small.take(np.arange(200))  # not a whole number of evaluation batches of 64
    result = fit(small_config(), Splits(small, test), eval_batch_size=64)
    loss, accuracy = _numpy_scores(result.model, test)
    assert result.test.count == 200 and result.tested is None
    assert result.test.accuracy == pytest.approx(accuracy, abs=1e-7)
    assert result.test.loss == pytest.approx(loss, rel=1e-5)


def test_fit_tests_with_the_program_it_is_given(small):
    """A test program is made once, with the steps' programs and on the caller's thread
    (no thread of its own), from a model shaped like the trained one; its run is called
    once, on the trained model; what it gives is `result.test` and `result.tested`."""
    from eqx_fmnist.dataset import Splits
    from eqx_fmnist.evaluation import evaluate
    from eqx_fmnist.train import fit

    made, ran = [], []

    def program(like, test, evaluation):
        made.append((threading.current_thread().name, jax.tree.map(np.shape, like)))

        def run(model):
            ran.append(model)
            return evaluate(model, test, policy=evaluation.policy), np.arange(3)

        return run

    result = fit(small_config(), Splits(small, small), test_program=program)
    assert [name for name, _ in made] == [threading.current_thread().name]
    assert made[0][1] == jax.tree.map(np.shape, result.model)
    assert len(ran) == 1 and np.array_equal(result.tested, np.arange(3))
    loss, accuracy = _numpy_scores(result.model, small)
    assert result.test.accuracy == pytest.approx(accuracy, abs=1e-7)
    assert result.test.loss == pytest.approx(loss, rel=1e-5)


def test_a_program_that_cannot_be_made_raises_what_is_wrong(small):
    from eqx_fmnist.dataset import Splits
    from eqx_fmnist.train import fit

    def broken(like, test, evaluation):
        raise ValueError("this program needs a calibration")

    with pytest.raises(ValueError, match="needs a calibration"):
        fit(small_config(), Splits(small, small), test_program=broken)


def test_without_a_test_set_no_program_is_made(small):
    from eqx_fmnist.dataset import Splits
    from eqx_fmnist.train import fit

    def never(like, test, evaluation):
        raise AssertionError("made without a test set")

    result = fit(small_config(), Splits(small), test_program=never)
    assert result.test is None and result.tested is None


def test_an_evaluation_scores_none_as_none_and_a_dataset_whole(small):
    from eqx_fmnist.hooks import Evaluation
    from eqx_fmnist.precision import FLOAT32
    from eqx_fmnist.state import init_state

    model = init_state(small_config(), len(small)).model
    evaluation = Evaluation(FLOAT32, None, 100)
    assert evaluation(None, model) is None
    scores = evaluation(small, model)
    loss, accuracy = _numpy_scores(model, small)
    assert scores.count == len(small)
    assert scores.accuracy == pytest.approx(accuracy, abs=1e-7)
    assert scores.loss == pytest.approx(loss, rel=1e-5)
