"""ONNX: a graph written with onnx's helper API, checked by onnxruntime on all 10,000 test
images, that runs in a Python without jax."""

import json
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest

from helpers import assert_sets_match, classes_agree, numpy_reference

pytest.importorskip("onnxruntime", reason="the extra 'onnx' is not installed")


@pytest.fixture(scope="module")
def onnx_file(trained, calibrated, test_images, tmp_path_factory):
    from eqx_fmnist.export import export_model

    path = tmp_path_factory.mktemp("onnx") / "model.onnx"
    manifest = export_model(
        trained.model,
        trained.state.policy,
        trained.config,
        path,
        check_images=test_images,
        format="onnx",
        calibration=calibrated,
    )
    return path, manifest


@pytest.mark.slow  # cold: compiles several programs or trains on the real data
def test_onnx_matches_on_every_test_image_and_flags_as_the_library(
    onnx_file, trained, calibrated, test_images
):
    import onnxruntime as ort

    path, manifest = onnx_file
    parity = manifest["parity"]
    assert parity["images"] == 10_000 and classes_agree(parity)
    assert parity["flag_mismatches"] == 0 and parity["max_logit_difference"] < 1e-3
    assert manifest["opset"] == 20 and manifest["gelu"] == "op"
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (inp,) = session.get_inputs()
    assert inp.name == "images" and inp.type == "tensor(uint8)" and inp.shape == ["batch", 784]
    names = [o.name for o in session.get_outputs()]
    assert names == ["logits", "probabilities", "trust_score", "unusual", "prediction_set"]
    logits, probs, score, unusual, sets = session.run(None, {"images": test_images})
    ref = numpy_reference(trained.model, test_images, calibration=calibrated)
    assert_sets_match(sets, ref, calibrated.sets.thresholds)
    assert np.array_equal(logits.argmax(-1), ref["logits"].argmax(-1))
    np.testing.assert_allclose(probs, ref["probabilities"], atol=1e-5)
    np.testing.assert_allclose(score, ref["trust_score"], rtol=1e-4)
    assert np.array_equal(unusual, ref["unusual"])
    ops = {n.op_type for n in __import__("onnx").load(str(path)).graph.node}
    assert {"Gemm", "Gelu", "Softmax", "MatMul"} <= ops


def test_onnx_runs_in_a_python_without_jax(onnx_file, test_images, trained, tmp_path):
    import eqx_fmnist as ef

    path, _ = onnx_file
    np.save(tmp_path / "images.npy", test_images[:500])
    script = f"""
import sys
for name in ("jax", "jaxlib", "equinox", "eqx_fmnist"):
    sys.modules[name] = None  # any import of them raises ImportError
import json, numpy as np, onnxruntime as ort
session = ort.InferenceSession({str(path)!r}, providers=["CPUExecutionProvider"])
logits, probs, *_ = session.run(None, {{"images": np.load({str(tmp_path / "images.npy")!r})}})
print(json.dumps({{"pred": logits.argmax(-1).tolist(), "sum": float(probs.sum(-1).mean())}}))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    expected = np.asarray(ef.predict(trained.model, jnp.asarray(test_images[:500])))
    assert np.array_equal(got["pred"], expected) and got["sum"] == pytest.approx(1.0, abs=1e-5)


def test_the_gelu_formula_gives_the_operator_s_answer(trained, test_images):
    from eqx_fmnist.export import run_onnx, to_portable
    from eqx_fmnist.export.onnx import onnx_model

    portable = to_portable(trained.model)
    formula = onnx_model(portable, gelu="formula")
    assert "Gelu" not in {n.op_type for n in formula.graph.node}
    assert formula.opset_import[0].version == 18
    out = run_onnx(formula.SerializeToString(), test_images[:2000])
    ref = numpy_reference(trained.model, test_images[:2000])
    np.testing.assert_allclose(out["logits"], ref["logits"], atol=1e-4)


@pytest.mark.slow
def test_an_ensemble_is_one_graph_with_each_member_and_the_mean(real_data, test_images, tmp_path):
    import eqx_fmnist as ef
    from eqx_fmnist.export import export_model, run_onnx

    ens = ef.fit_ensemble(
        ef.TrainConfig(steps=20, hidden_sizes=(32,)), ef.split_data(real_data), seeds=3
    )
    path = tmp_path / "e.onnx"
    manifest = export_model(
        ens.state.model, ens.state.policy, ens.config, path, check_images=test_images, format="onnx"
    )
    assert manifest["members"] == 3 and classes_agree(manifest["parity"])
    out = run_onnx(path.read_bytes(), test_images[:1000])
    ref = numpy_reference(ens.state.model, test_images[:1000])
    np.testing.assert_allclose(out["probabilities"], ref["probabilities"], atol=1e-5)
    each = [numpy_reference(ef.select_members(ens.model, i), test_images[:1000]) for i in range(3)]
    np.testing.assert_allclose(
        out["member_probabilities"], np.stack([e["probabilities"] for e in each]), atol=1e-5
    )


def test_without_the_extra_one_clear_error_and_nothing_written(
    trained, test_images, tmp_path, monkeypatch
):
    from eqx_fmnist.export import ExportError, export_model

    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(
        ExportError, match=r"optional extra 'onnx'.*pip install 'eqx_fmnist\[onnx\]'"
    ):
        export_model(
            trained.model,
            trained.state.policy,
            trained.config,
            tmp_path / "m.onnx",
            check_images=test_images[:10],
            format="onnx",
        )
    assert list(tmp_path.iterdir()) == []
