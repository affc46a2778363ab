"""`runs.sweep_run`: the kind of run `eqx-fmnist sweep` makes, trained in the library:
each point's validation accuracy is numpy's count over the validation images of that
member's answers (a float64 forward pass of the saved member), and the best point is
one with the highest."""

import json

import numpy as np
import pytest


def test_a_sweep_ranks_each_point_on_numpys_validation_accuracy(small, tmp_path):
    import eqx_fmnist as ef
    from eqx_fmnist.runs import Training

    from helpers import fashion_mnist_of, numpy_reference, small_config

    grid = ef.ensemble.Grid({"learning_rate": [1e-3, 1e-2]}, seeds=1)
    config = small_config(validation_size=64)  # a sweep ranks on its own validation split
    job = Training.new(tmp_path / "s", config, members=grid, data=fashion_mnist_of(small))
    assert job.kind == "sweep" and job.config.validation_size == 64
    job.run()
    table = json.loads((tmp_path / "s" / "sweep.json").read_text())
    valid = job.splits.validation
    images, labels = np.asarray(valid.images), np.asarray(valid.labels)
    stack = ef.load_checkpoint(tmp_path / "s" / "checkpoint.eqx").state.model  # every point
    means = []
    for i, point in enumerate(table["points"]):
        member = ef.select_members(stack, i)
        right = numpy_reference(member, images)["logits"].argmax(1) == labels
        assert point["validation_mean"] == pytest.approx(right.mean(), abs=1e-6)
        means.append(right.mean())
    assert means[table["best"]["index"]] == max(means)
    assert (tmp_path / "s" / "sweep.md").is_file()
