"""`runs.kind` and the registry of kinds (`runs.training.KINDS`): each choice of members
is trained by exactly one kind, the rest (one model, an ensemble) by the plain run; a
kind's names are its own; a `Job` says its length and spread in words."""

import pytest


def test_each_choice_of_members_has_one_kind_and_the_rest_train_as_one_run():
    import eqx_fmnist as ef
    from eqx_fmnist.runs import KINDS, kind_for

    choices = [k for kind in KINDS for k in kind.choices]
    assert len(choices) == len(set(choices))  # no choice claimed twice
    assert len({kind.name for kind in KINDS}) == len(KINDS)
    grid = ef.ensemble.Grid({"learning_rate": [1e-3, 3e-3]}, seeds=1)
    expected = [
        (None, "train"),
        (ef.ensemble.Seeds(2), "train"),
        (ef.ensemble.Bootstrap(2), "train"),
        (grid, "sweep"),
        (ef.ensemble.Folds(3), "cv"),
    ]
    for members, name in expected:
        assert kind_for(members).name == name, members
    plain = [kind for kind in KINDS if not kind.choices]
    assert [kind.name for kind in plain] == ["train"]  # one kind takes the rest


@pytest.mark.parametrize(
    "epochs, steps, said", [(None, 400, "400 steps"), (1, 8, "1 epoch (8 steps)")]
)
def test_a_job_says_its_length_in_words(small, tmp_path, epochs, steps, said):
    from eqx_fmnist.runs import Training

    from helpers import fashion_mnist_of, small_config

    fields = {"epochs": epochs, "steps": None} if epochs else {"steps": steps}
    job = Training.new(tmp_path / "r", small_config(**fields), data=fashion_mnist_of(small))
    assert job.total_steps == steps and job.length == said
    assert job.spread() == ""  # one model: nothing spread
