"""`runs.cadence`: when a run checkpoints (`CheckpointEvery`), and why a run stopped, in
one line and an exit status, with the command that continues it quoted for a shell."""

from pathlib import Path

import pytest


@pytest.mark.parametrize(
    "text, seconds, steps",
    [("60s", 60.0, None), ("60", 60.0, None), ("5m", 300.0, None), ("500steps", None, 500)],
)
def test_checkpoint_cadence_parses(text, seconds, steps):
    from eqx_fmnist.runs import CheckpointEvery

    every = CheckpointEvery.parse(text)
    assert (every.seconds, every.steps) == (seconds, steps)


@pytest.mark.parametrize("text", ["", "0s", "-5", "fast", "2.5steps"])
def test_bad_checkpoint_cadence_is_a_run_error(text):
    from eqx_fmnist.runs import CheckpointEvery, RunError

    with pytest.raises(RunError, match="checkpoint_every"):
        CheckpointEvery.parse(text)


@pytest.mark.parametrize(
    "stop, saved, status, said",
    [
        ("asked", 40, 130, "stop asked; continue with `eqx-fmnist cv --resume=R/checkpoint.eqx`."),
        ("asked", 0, 130, "interrupted before the first checkpoint."),
        ("nan", 40, 1, "error: bad. No result was written; the last checkpoint (step 40) is R/"),
        ("nan", 0, 1, "error: bad. No result was written; no checkpoint was written."),
    ],
)
def test_why_a_run_stopped_is_one_line_and_a_status(stop, saved, status, said):
    from eqx_fmnist.intervals import NonFiniteError
    from eqx_fmnist.runs import Interrupted
    from eqx_fmnist.runs.cadence import why_stopped

    checkpoint = Path("R/checkpoint.eqx")
    e = Interrupted("stop asked", step=saved, checkpoint=checkpoint)
    if stop == "nan":
        e = NonFiniteError("bad.", step=3, metric="loss")
    got = why_stopped(e, "cv", saved, checkpoint)
    assert got[0] == status and got[1].startswith(said) and "\n" not in got[1]


def test_the_hint_to_continue_is_quoted_for_a_shell():
    """A folder `my run [1]` or `-dash`: the command printed runs as printed."""
    import shlex

    from eqx_fmnist.runs import Interrupted
    from eqx_fmnist.runs.cadence import why_stopped

    for folder in ("my run [1]", "-dash"):
        checkpoint = Path(folder) / "checkpoint.eqx"
        stop = Interrupted("stop asked", step=8, checkpoint=checkpoint)
        status, line = why_stopped(stop, "train", 8, checkpoint)
        command = line.split("`")[1]
        assert status == 130 and shlex.split(command)[-1] == f"--resume={checkpoint}"
