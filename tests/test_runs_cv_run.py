"""`runs.cv_run`: the kind of run `eqx-fmnist cv` makes, trained in the library: every
image's out-of-fold probability is that of the fold's model that never trained on it
(a float64 numpy forward pass of each saved member), and `cv.json` holds numpy's
accuracy of each fold's rows."""

import json

import numpy as np
import pytest

from helpers import numpy_reference, probabilities_atol


def test_each_images_out_of_fold_answer_is_its_folds_model(small, small_cv_run):
    import eqx_fmnist as ef
    from eqx_fmnist.runs import Run

    oof = np.load(small_cv_run / "out_of_fold.npz")
    images = np.asarray(small.images)
    assert oof["probabilities"].shape == (len(small), 10)
    assert np.array_equal(oof["labels"], np.asarray(small.labels))
    assert sorted(set(oof["fold"].tolist())) == [0, 1]  # every row held out by one fold
    stack = Run.open(small_cv_run).model
    summary = json.loads((small_cv_run / "cv.json").read_text())
    for i in range(2):
        member = ef.select_members(stack, i)
        rows = oof["fold"] == i
        want = numpy_reference(member, images[rows])["probabilities"]
        atol = probabilities_atol([member], images[rows])
        np.testing.assert_allclose(oof["probabilities"][rows], want, rtol=0, atol=atol)
        right = want.argmax(1) == oof["labels"][rows]
        assert summary["fold_accuracy"][i] == pytest.approx(right.mean(), abs=1e-6)
    assert summary["folds"] == 2 and (small_cv_run / "folds.png").is_file()
