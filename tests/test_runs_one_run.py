"""`runs.one_run`: `train_run`, one model's run and its test report, whose program `fit`
makes once, with its steps' programs, on the caller's thread."""

import threading

import numpy as np

from helpers import numpy_reference, run_config as config


def test_a_reports_program_is_made_once_on_the_callers_thread(small, monkeypatch):
    """The test report's program is made once, where `fit` compiles its steps (no thread
    of its own), and the report's plain logits are the trained model's (a float64 numpy
    forward pass); `result.test` is counted from them. Without a test set there is no
    report."""
    import eqx_fmnist.runs.one_run as one_run
    from eqx_fmnist.dataset import Splits
    from eqx_fmnist.runs import report_program, train_run

    calls = []

    def counted(*args, **kwargs):
        calls.append(threading.current_thread().name)
        return report_program(*args, **kwargs)

    monkeypatch.setattr(one_run, "report_program", counted)
    run = train_run(config(), Splits(small, small))
    assert calls == [threading.current_thread().name]
    assert run.report is not None and run.result.test.count == len(small)
    expected = numpy_reference(run.result.model, np.asarray(small.images))["logits"]
    np.testing.assert_allclose(run.report.logits, expected, rtol=1e-4, atol=1e-4)
    accuracy = np.mean(np.argmax(expected, -1) == np.asarray(small.labels))
    assert abs(run.result.test.accuracy - accuracy) <= 1 / len(small)
    untested = train_run(config(), Splits(small))
    assert untested.report is None and untested.result.test is None
