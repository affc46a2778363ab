"""`answer`: everything a prediction says, against the numpy reference written from the
definitions (`helpers.numpy_reference`: the forward pass, the views, the temperature,
the Mahalanobis score, the ink and contrast checks, the conformal sets)."""

import equinox as eqx
import jax.random as jr
import numpy as np
import pytest

from helpers import (
    assert_flags_match,
    assert_sets_match,
    calibrate_on_training_images,
    mlp_logits_atol,
    numpy_reference,
    probabilities_atol,
)


@pytest.fixture(scope="module")
def models():
    import eqx_fmnist as ef

    keys = jr.split(jr.key(3), 2)
    one = ef.MLP(hidden_sizes=(32, 16), key=jr.key(2))
    stack = eqx.filter_vmap(lambda k: ef.MLP(hidden_sizes=(32, 16), key=k))(keys)
    return {"one model": one, "two members": stack}


@pytest.fixture(scope="module")
def images(real_data):
    return real_data.test_images[:300].reshape(300, -1)


@pytest.mark.parametrize("which", ["one model", "two members"])
def test_a_calibrated_answer_is_the_reference_s(models, images, real_data, which):
    import eqx_fmnist as ef

    model = models[which]
    calibration = calibrate_on_training_images(model, real_data, coverage=0.9)
    got = ef.answer(model, images, calibration=calibration, members=True)
    ref = numpy_reference(model, images, calibration=calibration)
    assert got.temperature == calibration.temperature != 1.0
    k = 1 if which == "one model" else 2
    members = [model] if k == 1 else [ef.select_members(model, i) for i in range(k)]
    # float32's rounding followed through the layers (`mlp_logits_atol`); probabilities
    # move by at most e^(2 d) - 1 of themselves when the logits move by d.
    logit_atol = max(mlp_logits_atol(m, images) for m in members)
    prob_atol = probabilities_atol(members, images)
    np.testing.assert_allclose(got.logits, ref["logits"], atol=logit_atol)
    np.testing.assert_allclose(got.probabilities, ref["probabilities"], atol=prob_atol)
    # The features' rounding through the quadratic form (`trust_score_atol`), per image.
    outputs = {"trust_score": got.trust_score, "unusual": got.unusual}
    assert_flags_match(outputs, ref, calibration.trust, members, images)
    assert got.threshold == calibration.trust.threshold and got.calibrated
    assert got.coverage == 0.9
    assert_sets_match(got.prediction_set, ref, calibration.sets.thresholds)
    each = [numpy_reference(m, images)["probabilities"] for m in members]
    np.testing.assert_allclose(got.member_probabilities, np.stack(each), atol=prob_atol)
    assert set(got.outputs()) == {
        "logits",
        "probabilities",
        "trust_score",
        "unusual",
        "prediction_set",
    }


def test_an_uncalibrated_answer_has_no_flag_and_no_set(models, images):
    import eqx_fmnist as ef

    model = models["one model"]
    got = ef.answer(model, images, temperature=2.0, tta=ef.views.TTA_MIRROR)
    ref = numpy_reference(model, images, temperature=2.0, tta=ef.views.TTA_MIRROR)
    np.testing.assert_allclose(got.probabilities, ref["probabilities"], atol=1e-5)
    assert got.trust_score is got.unusual is got.prediction_set is None
    assert not got.calibrated and set(got.outputs()) == {"logits", "probabilities"}


def test_the_attributions_explain_the_class_shown_first(models, images):
    import eqx_fmnist as ef

    model = models["one model"]
    got = ef.answer(model, images[:4], temperature=0.5, attributions=True)
    np.testing.assert_array_equal(got.explained.target, got.probabilities.argmax(axis=1))
    # Completeness: each map sums to the class score's change from the blank image.
    blank = numpy_reference(model, np.zeros_like(images[:4]))["logits"]
    logits = numpy_reference(model, images[:4])["logits"]
    rows = np.arange(4), got.explained.target
    change = logits[rows] - blank[rows]
    np.testing.assert_allclose(got.explained.attributions.sum(1), change, atol=0.05)


def test_views_or_a_temperature_beside_a_calibration_are_refused(models, images, real_data):
    import eqx_fmnist as ef

    model = models["one model"]
    calibration = calibrate_on_training_images(model, real_data)
    with pytest.raises(ValueError, match="fitted with tta none, not mirror"):
        ef.answer(model, images, calibration=calibration, tta=ef.views.TTA_MIRROR)
    with pytest.raises(ValueError, match="calibration or a temperature, not both"):
        ef.answer(model, images, calibration=calibration, temperature=2.0)


def test_a_record_is_the_answer_of_one_image_in_plain_values():
    """`Answer.record` (what `predict --json` prints), against values written by hand."""
    import eqx_fmnist as ef
    from eqx_fmnist.answers import Answer

    p = np.full((2, 10), 0.02, np.float32)
    p[1, [7, 5, 9]] = [0.5, 0.3, 0.04]  # image 1: Sneaker, then Sandal, then Ankle boot
    sets = np.zeros((2, 10), bool)
    sets[1, [9, 5, 7]] = True
    each = np.zeros((3, 2, 10), np.float32)
    each[[0, 1, 2], 1, [7, 7, 5]] = 1.0  # the members' guesses of image 1
    said = Answer(
        np.log(p), p, 1.5, np.array([0.1, 9.0]), np.array([False, True]), 4.0, sets, 0.9, each
    )
    record = said.record(1, top=2)
    assert record["top"] == [
        {"class": "Sneaker", "probability": pytest.approx(0.5)},
        {"class": "Sandal", "probability": pytest.approx(0.3)},
    ]
    assert record["set"] == ["Sneaker", "Sandal", "Ankle boot"]  # most probable first
    assert (record["unusual"], record["score"], record["threshold"]) == (True, 9.0, 4.0)
    assert record["calibrated"] and record["set_coverage"] == 0.9
    assert record["members"] == "Sneaker, Sneaker, Sandal"
    plain = Answer(np.log(p), p).record(0, top=1)  # uncalibrated, one model: nothing else
    assert plain["top"][0]["class"] in ef.CLASS_NAMES and not plain["calibrated"]
    assert plain["set"] is plain["unusual"] is plain["score"] is None and "members" not in plain
