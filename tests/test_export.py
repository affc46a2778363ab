"""Exports: checked on all 10,000 test images before they are written, runnable without
the model code, and refused with one clear line when broken."""

import json
import os
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest

from helpers import (
    classes_agree,
    mlp_logits_atol,
    numpy_reference,
    probabilities_atol,
    run_cli,
    run_cli_here,
)


def numpy_logits(model, images):
    """A reference forward pass, float64 numpy (`helpers.numpy_reference`)."""
    return numpy_reference(model, images)["logits"]


def test_a_stablehlo_export_matches_on_every_test_image(trained, test_images, tmp_path):
    from eqx_fmnist.export import export_model, load_artifact

    path = tmp_path / "model.stablehlo"
    manifest = export_model(
        trained.model, trained.state.policy, trained.config, path, check_images=test_images
    )
    assert manifest["parity"]["images"] == 10_000 and classes_agree(manifest["parity"])
    assert (
        manifest["platforms"] == ["cpu", "cuda", "tpu"] and manifest["bytes"] == path.stat().st_size
    )
    on_disk = json.loads((tmp_path / "model.stablehlo.manifest.json").read_text())
    assert on_disk["sha256"] == manifest["sha256"] and len(on_disk["class_names"]) == 10
    artifact = load_artifact(path)
    logits, probs = artifact(test_images)
    reference = numpy_logits(trained.model, test_images)
    assert np.array_equal(logits.argmax(-1), reference.argmax(-1))
    # float32's rounding followed through the layers: 1e-3 for this model (a TPU's
    # float32 at HIGHEST, six bfloat16 passes, was 1.6e-4 off the float64 reference)
    atol = mlp_logits_atol(trained.model, test_images)
    np.testing.assert_allclose(logits, reference, atol=atol)
    np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-5)
    for n in (1, 7):  # the batch is symbolic: any size runs
        assert artifact(test_images[:n])[0].shape == (n, 10)


def test_the_artifact_applies_a_calibrated_temperature(trained, test_images, tmp_path):
    from eqx_fmnist.export import export_model, load_artifact

    path = tmp_path / "t.stablehlo"
    manifest = export_model(
        trained.model,
        trained.state.policy,
        trained.config,
        path,
        check_images=test_images[:200],
        temperature=0.5,
    )
    assert manifest["temperature"] == 0.5
    logits, probs = load_artifact(path)(test_images[:200])
    z = logits.astype(np.float64) / 0.5
    expected = np.exp(z - z.max(1, keepdims=True))
    np.testing.assert_allclose(probs, expected / expected.sum(1, keepdims=True), atol=1e-6)


@pytest.mark.slow
def test_an_ensemble_exports_its_mean_probability(real_data, test_images, tmp_path):
    import eqx_fmnist as ef
    from eqx_fmnist.export import export_model, load_artifact

    ens = ef.fit_ensemble(
        ef.TrainConfig(steps=20, hidden_sizes=(32,)), ef.split_data(real_data), seeds=2
    )
    manifest = export_model(
        ens.state.model,
        ens.state.policy,
        ens.config,
        tmp_path / "e.stablehlo",
        check_images=test_images,
    )
    assert manifest["members"] == 2 and classes_agree(manifest["parity"])
    _, probs = load_artifact(tmp_path / "e.stablehlo")(test_images[:500])
    ref = [numpy_logits(ef.select_members(ens.model, i), test_images[:500]) for i in range(2)]
    ref = np.mean([np.exp(r) / np.exp(r).sum(-1, keepdims=True) for r in ref], axis=0)
    members = [ef.select_members(ens.model, i) for i in range(2)]
    np.testing.assert_allclose(probs, ref, atol=probabilities_atol(members, test_images[:500]))


def test_an_artifact_runs_without_equinox_or_this_library(trained, test_images, tmp_path):
    """A fresh interpreter in which importing equinox or eqx_fmnist fails."""
    import eqx_fmnist as ef
    from eqx_fmnist.export import export_model

    path = tmp_path / "model.stablehlo"
    export_model(
        trained.model, trained.state.policy, trained.config, path, check_images=test_images
    )
    np.save(tmp_path / "images.npy", test_images)
    expected = np.asarray(ef.predict(trained.model, jnp.asarray(test_images)))
    script = f"""
import sys
sys.modules["equinox"] = None  # any import of them raises ImportError
sys.modules["eqx_fmnist"] = None
import json, jax, numpy as np
manifest = json.load(open({str(path) + ".manifest.json"!r}))
exported = jax.export.deserialize(bytearray(open({str(path)!r}, "rb").read()))
logits, probs = exported.call(np.load({str(tmp_path / "images.npy")!r}))
names = [manifest["class_names"][i] for i in np.asarray(logits).argmax(-1)]
print(json.dumps({{"pred": np.asarray(logits).argmax(-1).tolist(), "first": names[0],
                  "loaded": sorted(m for m in sys.modules if m in ("equinox", "eqx_fmnist")
                                   and sys.modules[m] is not None)}}))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["loaded"] == [] and np.array_equal(got["pred"], expected)
    assert got["first"] == ef.CLASS_NAMES[expected[0]]


def test_safetensors_weights_are_named_and_carry_the_config(trained, test_images, tmp_path):
    from safetensors import safe_open

    from eqx_fmnist.config import TrainConfig
    from eqx_fmnist.export import ExportError, export_model, load_artifact

    path = tmp_path / "model.safetensors"
    manifest = export_model(
        trained.model,
        trained.state.policy,
        trained.config,
        path,
        check_images=test_images,
        format="safetensors",
    )
    assert classes_agree(manifest["parity"])
    with safe_open(path, framework="numpy") as f:
        assert sorted(f.keys()) == [f"layers.{i}.{k}" for i in range(3) for k in ("bias", "weight")]
        assert TrainConfig.from_json(f.metadata()["config"]) == trained.config
        np.testing.assert_array_equal(
            f.get_tensor("layers.1.weight"), trained.model.layers[1].weight
        )
    with pytest.raises(ExportError, match="is a safetensors export, not StableHLO"):
        load_artifact(path)  # weights alone: named as such, not "not a manifest"


@pytest.mark.parametrize("members", [None, 3])
def test_safetensors_write_weights_held_in_any_memory_order(members):
    """A TPU can hand back a weight in Fortran order; safetensors copies from the data
    pointer, so a non-contiguous array must be made contiguous before it is written."""
    import equinox as eqx
    import jax
    from safetensors.numpy import load

    from eqx_fmnist.config import TrainConfig
    from eqx_fmnist.export.safetensors import to_safetensors
    from eqx_fmnist.model import MLP

    def make(key):
        return MLP(784, (32,), 10, key=key)

    keys = jax.random.split(jax.random.key(0), members or 1)
    model = eqx.filter_vmap(make)(keys) if members else make(keys[0])
    fortran = [np.asfortranarray(np.asarray(layer.weight)) for layer in model.layers]
    assert not any(w.flags.c_contiguous for w in fortran)  # the case under test
    model = eqx.tree_at(lambda m: [layer.weight for layer in m.layers], model, fortran)
    loaded = load(to_safetensors(model, TrainConfig()))
    for i, weight in enumerate(fortran):
        for k in range(members or 1):
            name = f"members.{k}.layers.{i}.weight" if members else f"layers.{i}.weight"
            np.testing.assert_array_equal(loaded[name], weight[k] if members else weight)


def test_safetensors_load_into_the_equivalent_pytorch_sequential(trained, test_images, tmp_path):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install torch)")
    from safetensors.numpy import load_file

    import eqx_fmnist as ef
    from eqx_fmnist.export import export_model, torch_state_dict

    path = tmp_path / "model.safetensors"
    export_model(
        trained.model,
        trained.state.policy,
        trained.config,
        path,
        check_images=test_images,
        format="safetensors",
    )
    net = torch.nn.Sequential(
        torch.nn.Linear(784, 64),
        torch.nn.GELU(approximate="tanh"),
        torch.nn.Linear(64, 32),
        torch.nn.GELU(approximate="tanh"),
        torch.nn.Linear(32, 10),
    )
    weights = {k: torch.from_numpy(v) for k, v in torch_state_dict(load_file(path)).items()}
    net.load_state_dict(weights)
    with torch.no_grad():
        logits = net(torch.tensor(test_images).float() / 255.0).numpy()
    library = ef.predict(trained.model, jnp.asarray(test_images))
    assert np.array_equal(logits.argmax(-1), np.asarray(library))


def test_an_export_that_fails_its_check_writes_nothing(trained, test_images, tmp_path, monkeypatch):
    from eqx_fmnist import export
    from eqx_fmnist.export import stablehlo

    real = stablehlo.run_stablehlo

    def wrong(blob, images):
        out = real(blob, images)
        return out | {"logits": out["logits"][:, ::-1]}  # another class for most images

    monkeypatch.setattr(stablehlo, "run_stablehlo", wrong)
    with pytest.raises(export.ExportError, match=r"another class .* of 10,000 images"):
        export.export_model(
            trained.model,
            trained.state.policy,
            trained.config,
            tmp_path / "m.stablehlo",
            check_images=test_images,
        )
    assert list(tmp_path.iterdir()) == []


def test_only_a_near_tie_may_change_class_between_two_float32_computations():
    """Logits written here: image 0's two top classes are 5e-5 apart (of a largest
    logit of 10: within 1e-4 of it), image 1's 0.5 apart. A swap of image 0's top two is
    float32's rounding; a swap of image 1's is a wrong export."""
    from eqx_fmnist.export.check import check_parity

    ours = np.zeros((2, 10), np.float32)
    ours[0, 3], ours[0, 5] = 10.0, 10.0 - 5e-5
    ours[1, 3], ours[1, 5] = 10.0, 9.5
    probs = np.full((2, 10), 0.1, np.float32)

    def swapped(rows):
        theirs = ours.copy()
        theirs[rows, 3], theirs[rows, 5] = ours[rows, 5], ours[rows, 3]
        return {"logits": theirs, "probabilities": probs}

    near, _ = check_parity({"logits": ours, "probabilities": probs}, swapped([0]))
    assert (near.mismatches, near.tied) == (1, 1)
    both, _ = check_parity({"logits": ours, "probabilities": probs}, swapped([0, 1]))
    assert (both.mismatches, both.tied) == (2, 1)


def test_a_check_in_a_coarser_compute_dtype_allows_ties_within_its_rounding():
    """float16 keeps 10 bits after the point (eps 2**-10), bfloat16 7 (2**-7): a check in
    either allows 8 of its units, relative to the largest logit. Two top logits 0.05
    apart of 10 (5e-3) are a tie in float16 and bfloat16, not in float32; 0.5 apart (5e-2)
    a tie in bfloat16 only (8 * 2**-7 = 6.25e-2). On a TPU, a float16 CNN's StableHLO
    export changed one such class of 48 (logits 9.3e-4 apart)."""
    import eqx_fmnist as ef
    from eqx_fmnist.export.check import check_parity

    ours = np.zeros((2, 10), np.float32)
    ours[:, 3], ours[0, 5], ours[1, 5] = 10.0, 9.95, 9.5
    theirs = ours.copy()
    theirs[:, 3], theirs[:, 5] = ours[:, 5], ours[:, 3]
    probs = np.full((2, 10), 0.1, np.float32)
    tied = {
        d: check_parity(
            {"logits": ours, "probabilities": probs},
            {"logits": theirs, "probabilities": probs},
            policy=ef.Policy("float32", d),
        )[0].tied
        for d in ("f32", "f16", "bf16")
    }
    assert tied == {"f32": 0, "f16": 1, "bf16": 2}


def test_broken_artifacts_are_refused_by_name(trained, test_images, tmp_path):
    from eqx_fmnist.export import ExportError, export_model, load_artifact

    path = tmp_path / "m.stablehlo"
    with pytest.raises(ExportError, match="does not exist"):
        load_artifact(path)
    export_model(
        trained.model, trained.state.policy, trained.config, path, check_images=test_images[:100]
    )
    with pytest.raises(ValueError, match=r"28 x 28 images .* got shape \(2, 100\)"):
        load_artifact(path)(np.zeros((2, 100), np.uint8))
    with pytest.raises(ValueError, match="uint8"):
        load_artifact(path)(np.zeros((2, 784), np.float32))
    blob = bytearray(path.read_bytes())
    blob[100] ^= 0xFF
    path.write_bytes(bytes(blob))
    with pytest.raises(ExportError, match="SHA-256"):
        load_artifact(path)


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory, real_data):
    out = tmp_path_factory.mktemp("export") / "run"
    result = run_cli_here(
        "train", "--steps", "20", "--hidden", "32", "--out", out, "--data-dir", real_data.source
    )
    assert result.returncode == 0, result.stderr
    return out


@pytest.mark.slow
def test_a_run_exports_in_the_library_as_the_command_does(cli_run, real_data, tmp_path):
    from eqx_fmnist.export import load_artifact
    from eqx_fmnist.runs import Run

    run = Run.open(cli_run)
    path, manifest = run.export(tmp_path / "lib.stablehlo", data=real_data)
    assert path == tmp_path / "lib.stablehlo" and manifest["step"] == run.step == 20
    summary = json.loads((cli_run / "summary.json").read_text())
    assert manifest["test_accuracy"] == pytest.approx(summary["test_accuracy"])
    assert manifest["parity"]["images"] == 10_000  # checked on every test image
    images = real_data.test_images[:50].reshape(50, -1)
    np.testing.assert_allclose(
        load_artifact(path).answer(images).probabilities,
        run.answer(images).probabilities,
        atol=1e-5,
    )


@pytest.mark.slow
def test_the_export_command_then_predict_with_the_artifact(cli_run, real_data, tmp_path):
    from PIL import Image

    out = run_cli_here(
        "export", cli_run, "--out", tmp_path / "m.stablehlo", "--data-dir", real_data.source
    )
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert "0 of 10,000 test images predicted differently" in text
    manifest = json.loads((tmp_path / "m.stablehlo.manifest.json").read_text())
    summary = json.loads((cli_run / "summary.json").read_text())
    assert manifest["test_accuracy"] == pytest.approx(summary["test_accuracy"])
    Image.fromarray(real_data.test_images[0]).save(tmp_path / "item.png")
    from_run = run_cli_here("predict", cli_run, tmp_path / "item.png")
    from_artifact = run_cli_here("predict", tmp_path / "m.stablehlo", tmp_path / "item.png")
    assert from_artifact.returncode == 0, from_artifact.stderr
    # The same classes and probabilities (the run also notes that it is not calibrated).
    first = [" ".join(r.stdout.split("\n(")[0].split()) for r in (from_run, from_artifact)]
    assert first[0].split(":")[1] == first[1].split(":")[1]


@pytest.mark.parametrize(
    "args, message",
    [
        (("export", "RUN", "--format", "tflite"), "invalid choice: 'tflite'"),
        (("export", "no/such/run"), "no checkpoint"),
        pytest.param(
            ("export", "CLI_RUN", "--format", "onnx", "--out", "OUT"),
            "needs the optional extra 'onnx'",
            marks=pytest.mark.slow,
        ),
        pytest.param(("predict", "ART", "IMG"), "SHA-256", marks=pytest.mark.slow),
    ],
)
def test_bad_export_input_is_one_line_status_2(args, message, tmp_path, real_data, request):
    from PIL import Image

    art, run = tmp_path / "m.stablehlo", tmp_path / "run"
    run.mkdir()
    if "ART" in args:
        run = request.getfixturevalue("cli_run")
        exported = run_cli_here("export", run, "--out", art, "--data-dir", real_data.source)
        assert exported.returncode == 0, exported.stderr
        art.write_bytes(art.read_bytes()[:-10])
        Image.fromarray(real_data.test_images[0]).save(tmp_path / "i.png")
    env = None
    if "CLI_RUN" in args:  # a Python in which `import onnx` fails, as without the extra
        run = request.getfixturevalue("cli_run")
        (tmp_path / "blocked").mkdir()
        (tmp_path / "blocked" / "onnx.py").write_text(
            "raise ImportError(\"No module named 'onnx'\", name='onnx')\n"
        )
        # In front of the path the suite runs with (a TPU machine's packages are on it).
        env = {
            "PYTHONPATH": os.pathsep.join(
                filter(None, [str(tmp_path / "blocked"), os.environ.get("PYTHONPATH")])
            )
        }
    swap = {
        "RUN": run,
        "CLI_RUN": run,
        "ART": art,
        "IMG": tmp_path / "i.png",
        "OUT": tmp_path / "m.onnx",
    }
    before = sorted(p.name for p in run.iterdir())
    data = ("--data-dir", real_data.source) if args[0] == "export" else ()
    argv = [swap.get(a, a) for a in args] + list(data)
    # In this process, but for the case that hides onnx from a fresh interpreter.
    out = run_cli_here(*argv) if env is None else run_cli(*argv, env=env)
    assert out.returncode == 2 and message in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in run.iterdir()) == before
    assert not (tmp_path / "m.onnx").exists()


@pytest.mark.slow  # cold: compiles several programs or trains on the real data
def test_the_stablehlo_artifact_carries_the_trust_flag(trained, calibrated, test_images, tmp_path):
    from eqx_fmnist.export import export_model, load_artifact

    from helpers import assert_flags_match, assert_sets_match, numpy_reference, probabilities_atol

    path = tmp_path / "t.stablehlo"
    manifest = export_model(
        trained.model,
        trained.state.policy,
        trained.config,
        path,
        check_images=test_images,
        calibration=calibrated,
    )
    assert manifest["parity"]["flag_mismatches"] == 0
    assert manifest["outputs"][-3:] == [
        "trust_score float32[b]",
        "unusual bool[b]",
        "prediction_set bool[b, 10]",
    ]
    assert manifest["prediction_sets"]["thresholds"] == list(calibrated.sets.thresholds)
    out = load_artifact(path).run(test_images)
    ref = numpy_reference(trained.model, test_images, calibration=calibrated)
    assert_sets_match(out["prediction_set"], ref, calibrated.sets.thresholds)
    assert_flags_match(out, ref, calibrated.trust, [trained.model], test_images)
    atol = probabilities_atol([trained.model], test_images)
    np.testing.assert_allclose(out["probabilities"], ref["probabilities"], atol=atol)
    assert 0 < ref["unusual"].sum() < 2000
    # Flat, blank and noise frames are flagged, as the library flags them.
    odd = np.stack(
        [np.zeros(784), np.full(784, 128), np.random.default_rng(0).integers(0, 256, 784)]
    )
    assert load_artifact(path).run(odd.astype(np.uint8))["unusual"].all()


@pytest.mark.slow  # cold: compiles several programs or trains on the real data
def test_a_trust_flag_fitted_on_moves_travels_with_all_its_centres(
    trained, real_data, test_images, tmp_path
):
    """A flag fitted on the augmentation's 6 moves has 60 class means: the artifact
    scores against all of them, as numpy does from the fitted means and precision."""
    import eqx_fmnist as ef
    from eqx_fmnist.export import export_model, load_artifact

    from helpers import assert_flags_match, calibrate_on_training_images, numpy_reference

    moves = ef.trust_moves(ef.TrainConfig())
    cal = calibrate_on_training_images(trained.model, real_data, moves=moves)
    assert cal.trust.means.shape == (60, 96)
    path = tmp_path / "moves.stablehlo"
    manifest = export_model(
        trained.model,
        trained.state.policy,
        trained.config,
        path,
        check_images=test_images,
        calibration=cal,
    )
    assert manifest["parity"]["flag_mismatches"] == 0
    out = load_artifact(path).run(test_images[:2000])
    ref = numpy_reference(trained.model, test_images[:2000], calibration=cal)
    assert_flags_match(out, ref, cal.trust, [trained.model], test_images[:2000])


def test_a_manifest_edited_to_lie_is_refused_by_its_own_checksum(trained, test_images, tmp_path):
    """A threshold or a coverage edited into the manifest would be believed by every
    answer of the artifact: the manifest carries the SHA-256 of the rest of itself."""
    import json

    from eqx_fmnist.export import ExportError, export_model, load_artifact, manifest_path

    path = tmp_path / "m.stablehlo"
    export_model(
        trained.model, trained.state.policy, trained.config, path, check_images=test_images[:50]
    )
    assert load_artifact(path).manifest["manifest_sha256"]
    manifest = json.loads(manifest_path(path).read_text())
    manifest["temperature"] = 0.01
    manifest_path(path).write_text(json.dumps(manifest))
    with pytest.raises(ExportError, match="was edited since it was written"):
        load_artifact(path)


def test_a_model_whose_activation_is_not_gelu_is_refused_in_one_line():
    """Every artifact writes GELU in its tanh form: an MLP with another activation would
    export answers of another model, so it is refused before anything is written."""
    import jax
    import jax.random as jr

    import eqx_fmnist as ef
    from eqx_fmnist.export import ExportError, to_portable

    relu = ef.MLP(hidden_sizes=(8,), activation=jax.nn.relu, key=jr.key(0))
    with pytest.raises(ExportError, match=r"^exports write GELU .* activation is 'relu'\.$"):
        to_portable(relu)
