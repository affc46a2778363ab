"""Test-time augmentation: the mean probability over an image's views, against numpy
(the model's forward pass and the moves written here), for one model and an ensemble,
in evaluation, robustness and calibration."""

import json

import numpy as np
import pytest

from helpers import (
    F32_U,
    assert_sets_match,
    classes_agree,
    mlp_logits_atol,
    moved_numpy,
    numpy_reference,
)


def _probs64(model, x):
    """Softmax of the MLP's logits in float64 numpy, for `uint8` rows of `x`."""
    return numpy_reference(model, x)["probabilities"]


_moved = moved_numpy


def probability_atol(model, images) -> float:
    """Two float32 evaluations' probabilities differ by at most e^(2 d) - 1 of
    themselves when their logits differ by d (`mlp_logits_atol`: float32's rounding
    followed through the layers); the moves only drop pixels, so `images` bounds every
    view."""
    return float(np.expm1(2 * mlp_logits_atol(model, images))) + 8 * F32_U


@pytest.fixture(scope="module")
def model():
    import jax

    import eqx_fmnist as ef

    return ef.MLP(hidden_sizes=(16,), key=jax.random.PRNGKey(5))


@pytest.fixture(scope="module")
def images():
    return np.random.default_rng(2).integers(0, 256, (37, 784), dtype=np.uint8)


@pytest.mark.parametrize("views", ["TTA_MIRROR", "TTA_SHIFTS"])
def test_tta_is_the_mean_probability_over_the_views(model, images, views):
    import jax.numpy as jnp

    import eqx_fmnist as ef
    from eqx_fmnist import views as fixed_views

    tta = getattr(fixed_views, views)
    got = np.asarray(ef.predict_proba(model, jnp.asarray(images), tta=tta, batch_size=16))
    want = np.mean([_probs64(model, _moved(images, *v)) for v in tta], axis=0)
    atol = probability_atol(model, images)
    np.testing.assert_allclose(got, want, atol=atol, rtol=0)
    # An image and its mirror get the same answer from the mirror's two views.
    if views == "TTA_MIRROR":
        flipped = np.asarray(
            ef.predict_proba(model, jnp.asarray(_moved(images, 0, 0, True)), tta=tta)
        )
        np.testing.assert_allclose(flipped, got, atol=atol, rtol=0)


def test_an_ensemble_averages_over_members_and_views(images):
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    import eqx_fmnist as ef
    from eqx_fmnist.views import TTA_MIRROR

    keys = jax.random.split(jax.random.PRNGKey(1), 3)
    stack = eqx.filter_vmap(lambda k: ef.MLP(hidden_sizes=(16,), key=k))(keys)
    got = np.asarray(ef.predict_proba(stack, jnp.asarray(images), tta=TTA_MIRROR))
    members = [ef.select_members(stack, i) for i in range(3)]
    want = np.mean([_probs64(m, _moved(images, 0, 0, v)) for m in members for v in (0, 1)], 0)
    atol = max(probability_atol(m, images) for m in members)
    np.testing.assert_allclose(got, want, atol=atol, rtol=0)


def test_evaluation_robustness_and_calibration_use_the_same_views(model, images, tmp_path):
    import jax.numpy as jnp

    import eqx_fmnist as ef
    from eqx_fmnist.calibration import Calibration, fit_temperature
    from eqx_fmnist.views import TTA_MIRROR

    labels = np.arange(len(images)) % 10
    ds = ef.ArrayDataset(jnp.asarray(images), jnp.asarray(labels, jnp.int32))
    p = np.mean([_probs64(model, _moved(images, 0, 0, v)) for v in (0, 1)], axis=0)
    r = ef.evaluate(model, ds, tta=TTA_MIRROR, batch_size=16)
    assert r.accuracy == pytest.approx((p.argmax(1) == labels).mean())
    assert r.loss == pytest.approx(-np.log(p[np.arange(len(labels)), labels]).mean(), rel=1e-5)
    robust = ef.evaluate_robustness(model, ds, tta=TTA_MIRROR, shifts=(1,))
    assert robust.clean == pytest.approx(r.accuracy)
    assert robust.mirrored == pytest.approx(r.accuracy)  # the mirror's views are the same two
    # The temperature is fitted to the averaged outputs, and the views are saved with it.
    calibration = ef.calibrate(model, ds, ds, tta=TTA_MIRROR, coverage=0.8)
    want = fit_temperature(jnp.asarray(np.log(p), jnp.float32), jnp.asarray(labels))
    assert calibration.temperature == pytest.approx(want, rel=1e-4)
    assert calibration.tta == TTA_MIRROR
    assert Calibration.load(calibration.save(tmp_path / "c.safetensors")).tta == TTA_MIRROR


@pytest.mark.slow  # cold: compiles several programs or trains on the real data
@pytest.mark.parametrize("fmt", ["stablehlo", "onnx", "html", "safetensors"])
def test_every_export_computes_the_views_it_was_calibrated_on(fmt, images, tmp_path):
    """The artifacts gather each view's pixels themselves: their outputs equal the numpy
    reference's mean over numpy-moved images (an ensemble of two, the six views of
    `TTA_SHIFTS`), the trust flag of the image itself, and the sets."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    import eqx_fmnist as ef
    from eqx_fmnist.export import export_model
    from eqx_fmnist.export.check import FORMATS
    from eqx_fmnist.views import TTA_SHIFTS

    if fmt == "onnx":
        pytest.importorskip("onnxruntime")
    keys = jax.random.split(jax.random.PRNGKey(3), 2)
    stack = eqx.filter_vmap(lambda k: ef.MLP(hidden_sizes=(16,), key=k))(keys)
    rng = np.random.default_rng(4)
    held = rng.integers(0, 256, (400, 784), dtype=np.uint8)
    ds = ef.ArrayDataset(jnp.asarray(held), jnp.asarray(np.arange(400) % 10, jnp.int32))
    calibration = ef.calibrate(stack, ds, ds, tta=TTA_SHIFTS, coverage=0.8, per_class=True)
    path = tmp_path / f"m{FORMATS[fmt].suffix}"
    manifest = export_model(
        stack,
        ef.FLOAT32,
        ef.TrainConfig(hidden_sizes=(16,)),
        path,
        check_images=images,
        format=fmt,
        calibration=calibration,
    )
    assert manifest["tta"]["name"] == "shifts" and len(manifest["tta"]["views"]) == 6
    ref = numpy_reference(stack, images, calibration=calibration, tta=TTA_SHIFTS)
    if fmt == "stablehlo":
        out = ef.export.load_artifact(path).run(images)
    elif fmt == "onnx":
        out = ef.export.run_onnx(path.read_bytes(), images)
    elif fmt == "html":
        from eqx_fmnist.export.html import node_version, portable_of_page, run_page
        from eqx_fmnist.export.portable import numpy_serve

        blob = path.read_bytes()
        out = run_page(blob, images) if node_version() else None
        out = out or numpy_serve(portable_of_page(blob), images)
    else:  # weights only: the parity the manifest records is the check's, with the views
        assert classes_agree(manifest["parity"])
        assert manifest["parity"]["max_probability_difference"] < 1e-5
        return
    np.testing.assert_allclose(out["probabilities"], ref["probabilities"], atol=2e-5)
    np.testing.assert_allclose(out["trust_score"], ref["trust_score"], rtol=1e-3)
    assert_sets_match(out["prediction_set"], ref, calibration.sets.thresholds)
    # Views other than the calibration's would void its temperature and sets.
    for other in (((0, 0, False), (0, 0, True)), ()):  # the mirror alone; no views at all
        with pytest.raises(ef.ViewsError, match="fitted with tta shifts, not"):
            export_model(
                stack,
                ef.FLOAT32,
                ef.TrainConfig(hidden_sizes=(16,)),
                tmp_path / "x",
                check_images=images,
                format=fmt,
                calibration=calibration,
                tta=other,
            )
    assert not (tmp_path / "x").exists()


def test_an_uncalibrated_export_computes_the_views_it_is_given(images, tmp_path):
    """No calibration: the export averages over the views asked for (the mirror, not
    the config's), its probabilities numpy's mean over the image and its mirror."""
    import jax

    import eqx_fmnist as ef
    from eqx_fmnist.export import export_model
    from eqx_fmnist.views import TTA_MIRROR

    m = ef.MLP(hidden_sizes=(16,), key=jax.random.PRNGKey(8))
    path, config = tmp_path / "m.stablehlo", ef.TrainConfig(hidden_sizes=(16,), tta="shifts")
    manifest = export_model(m, ef.FLOAT32, config, path, check_images=images, tta=TTA_MIRROR)
    assert manifest["tta"]["name"] == "mirror"  # the views given, over the config's
    want = np.mean([_probs64(m, _moved(images, 0, 0, v)) for v in (0, 1)], axis=0)
    out = ef.export.load_artifact(path).run(images)
    np.testing.assert_allclose(out["probabilities"], want, atol=2e-5)
    assert np.abs(_probs64(m, images) - want).max() > 1e-3  # the mirror changes the answer


@pytest.mark.parametrize("precision", ["p=f32,c=bf16,o=f32", "bfloat16"])
def test_a_bfloat16_export_computes_the_views(precision, images, tmp_path):
    """bfloat16 matmuls of the moved images, inside StableHLO: the artifact runs (a dot
    per gathered view once had no CPU kernel) and matches float64 numpy to bfloat16's
    rounding."""
    import jax

    import eqx_fmnist as ef
    from eqx_fmnist.export import export_model
    from eqx_fmnist.views import TTA_SHIFTS

    policy = ef.Policy.from_string(precision)
    m = ef.MLP(hidden_sizes=(16,), key=jax.random.PRNGKey(9))
    path = tmp_path / "m.stablehlo"
    manifest = export_model(
        policy.cast_to_param(m),
        policy,
        ef.TrainConfig(hidden_sizes=(16,)),
        path,
        check_images=images,
        tta=TTA_SHIFTS,
    )
    assert classes_agree(manifest["parity"])
    want = np.mean([_probs64(m, _moved(images, dx, dy, f)) for dx, dy, f in TTA_SHIFTS], axis=0)
    out = ef.export.load_artifact(path).run(images)
    np.testing.assert_allclose(out["probabilities"], want, atol=3e-2)


@pytest.mark.slow
def test_a_run_trained_with_tta_is_evaluated_calibrated_and_exported_with_it(
    tmp_path, real_data, monkeypatch
):
    """`train --tta mirror`: the summary's test accuracy is numpy's mirror-averaged
    accuracy of the saved weights, the calibration holds the views, `evaluate`,
    `export` and `predict` default to them and refuse others (exit 2, nothing written).
    On a slice of the real data (4,096 training and 1,000 test images)."""
    from PIL import Image

    import eqx_fmnist as ef
    from eqx_fmnist.calibration import Calibration
    from eqx_fmnist.views import TTA_MIRROR

    from helpers import run_cli_here, use_a_slice

    data = use_a_slice(real_data, monkeypatch, 4096, 1000)
    out = tmp_path / "run"
    result = run_cli_here(
        "train",
        "--steps",
        "40",
        "--hidden",
        "16",
        "--calibrate",
        "1000",
        "--tta",
        "mirror",
        "--out",
        out,
        "--data-dir",
        real_data.source,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads((out / "config.json").read_text())["tta"] == "mirror"
    assert Calibration.load(out / "calibration.safetensors").tta == TTA_MIRROR
    model = ef.load_checkpoint(out / "checkpoint.eqx").state.eval_model
    x, y = data.test_images.reshape(1000, -1), data.test_labels.astype(int)
    p = np.mean([_probs64(model, _moved(x, 0, 0, v)) for v in (0, 1)], axis=0)
    summary = json.loads((out / "summary.json").read_text())
    # within one image of 1,000: a near tie float32 and float64 may order either way
    assert summary["test_accuracy"] == pytest.approx((p.argmax(1) == y).mean(), abs=1.1e-3)
    # the mirror of the mirror view is the image: the same images right (the summary's
    # test accuracy is float32's sum of 1,000, the robustness counts them exactly)
    mirrored, test = summary["robustness"]["mirrored"], summary["test_accuracy"]
    assert round(mirrored * 1000) == round(test * 1000)
    data = ("--data-dir", real_data.source)
    shown = run_cli_here("evaluate", out, "--out", tmp_path / "figs", *data)
    assert shown.returncode == 0 and "averaged over 2 views (mirror)" in shown.stdout
    for argv in (
        ("evaluate", out, "--tta", "shifts", "--out", tmp_path / "no", *data),
        ("export", out, "--tta", "none", "--out", tmp_path / "no" / "m.stablehlo", *data),
    ):
        refused = run_cli_here(*argv)
        assert refused.returncode == 2 and "fitted with tta mirror, not" in refused.stderr
        assert not (tmp_path / "no").exists()
    artifact = tmp_path / "m.stablehlo"
    assert run_cli_here("export", out, "--out", artifact, *data).returncode == 0
    Image.fromarray(255 - real_data.test_images[0]).save(tmp_path / "item.png")
    answers = [
        run_cli_here("predict", where, tmp_path / "item.png", "--json") for where in (out, artifact)
    ]
    first, second = (json.loads(a.stdout) for a in answers)
    assert first["top"][0]["class"] == second["top"][0]["class"]
    assert first["top"][0]["probability"] == pytest.approx(
        second["top"][0]["probability"], abs=1e-5
    )
    refused = run_cli_here("predict", artifact, tmp_path / "item.png", "--tta", "none")
    assert refused.returncode == 2 and "computes --tta mirror" in refused.stderr
