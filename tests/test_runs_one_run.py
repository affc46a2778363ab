"""`runs.one_run`: `train_run`, one model's run and its test report, which `fit` compiles
aside and, where that fails, after training."""

import threading

import numpy as np

from helpers import run_config as config


def test_a_report_whose_program_could_not_be_compiled_aside_is_compiled_after(small, monkeypatch):
    """The test report's program compiled in a thread while the run trains is a saving,
    never a condition: where that fails, `fit` makes it again after training and the
    report gives the same numbers. Without a test set there is no report."""
    import eqx_fmnist.runs.one_run as one_run
    from eqx_fmnist.dataset import Splits
    from eqx_fmnist.runs import report_program, train_run

    aside = train_run(config(), Splits(small, small))
    calls = []

    def fails_in_the_thread(*args, **kwargs):
        calls.append(threading.current_thread().name)
        if len(calls) == 1:
            raise MemoryError("no room for a second program")
        return report_program(*args, **kwargs)

    monkeypatch.setattr(one_run, "report_program", fails_in_the_thread)
    after = train_run(config(), Splits(small, small))
    assert calls == ["test-program", threading.current_thread().name]
    assert after.report is not None and aside.report is not None
    assert after.result.test == aside.result.test and after.result.test.count == len(small)
    np.testing.assert_array_equal(after.report.logits, aside.report.logits)
    untested = train_run(config(), Splits(small))
    assert untested.report is None and untested.result.test is None
