"""`runs.summary`: the summary's numbers: where the run's time went (`time_split`)."""


def test_time_split_cuts_the_callbacks_into_checkpoints_and_logging():
    """`time_split`, by hand: `fit`'s parts carried over, its callbacks' time less the
    checkpoints written during training is logging, every part rounded to milliseconds,
    in `TIME_SPLIT`'s order."""
    from eqx_fmnist.runs import TIME_SPLIT, time_split

    fit_seconds = {
        "load": 1.0,
        "compile": 2.0,
        "steps": 30.0,
        "host_reads": 0.1,
        "validation": 0.0,
        "callbacks": 0.5,
        "test": 0.4,
    }
    got = time_split(fit_seconds, 0.2, 0.25, 0.03, 0.91234)
    assert list(got) == list(TIME_SPLIT)
    assert got["logging"] == 0.3 and got["checkpoints"] == 0.25 and got["figures"] == 0.912
    assert got["test"] == 0.4 and got["report"] == 0.03 and got["steps"] == 30.0
