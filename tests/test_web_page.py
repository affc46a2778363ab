"""The one-file web page: its JavaScript forward pass under node on all 10,000 test images,
its photo preparation against Python's, and the page itself in headless Chromium, opened
from disk with `#image=`."""

import base64
import json
import os
import shutil
import subprocess
import tempfile
import urllib.parse

import jax.numpy as jnp
import numpy as np
import pytest
from PIL import Image, ImageOps

from helpers import assert_sets_match, classes_agree, mlp_logits_atol, numpy_reference, run_cli_here

NODE = shutil.which("node")
BROWSER = next(
    (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)),
    None,
)
needs_node = pytest.mark.skipif(NODE is None, reason="node is not installed")


def require_browser():
    """CI installs chromium and sets EQX_FMNIST_REQUIRE_BROWSER: there a missing browser
    fails the test instead of skipping it."""
    if BROWSER is None:
        if os.environ.get("EQX_FMNIST_REQUIRE_BROWSER"):
            pytest.fail("chromium is not installed (apt-get install chromium)")
        pytest.skip("chromium is not installed (apt-get install chromium)")


@pytest.fixture(scope="module")
def page(trained, calibrated, test_images, tmp_path_factory):
    from eqx_fmnist.export import export_model

    result, calibration = trained, calibrated
    path = tmp_path_factory.mktemp("page") / "model.html"
    manifest = export_model(
        result.model,
        result.state.policy,
        result.config,
        path,
        check_images=test_images,
        format="html",
        calibration=calibration,
    )
    return path, manifest


def run_engine(page_path, script: str, *args) -> str:
    """Run `script` under node with the page's own engine loaded as `E`."""
    prelude = f"""
const fs = require("fs"), vm = require("vm");
const html = fs.readFileSync({str(page_path)!r}, "utf8");
const grab = (open) => {{ const s = html.indexOf(open) + open.length; return html.slice(s, html.indexOf("</script>", s)); }};
const box = {{ Buffer }}; box.globalThis = box;
vm.runInNewContext(grab('<script id="engine">'), box);
const E = box.EqxFmnist;
"""
    out = subprocess.run(
        [NODE, "-e", prelude + script, *map(str, args)], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.slow
@needs_node
def test_the_javascript_forward_pass_agrees_on_every_test_image(
    page, trained, calibrated, test_images
):
    import eqx_fmnist as ef
    from eqx_fmnist.export import run_page

    path, manifest = page
    result, calibration = trained, calibrated
    assert manifest["checked_by"].startswith("node v")
    assert classes_agree(manifest["parity"]) and manifest["parity"]["flag_mismatches"] == 0
    out = run_page(path.read_bytes(), test_images)
    library = np.asarray(ef.predict(result.model, jnp.asarray(test_images)))
    assert np.array_equal(out["logits"].argmax(-1), library)  # all 10,000
    ref = numpy_reference(result.model, test_images, calibration=calibration)
    np.testing.assert_allclose(out["probabilities"], ref["probabilities"], atol=1e-5)
    np.testing.assert_allclose(out["trust_score"], ref["trust_score"], rtol=1e-4)
    assert np.array_equal(out["unusual"], ref["unusual"])
    assert_sets_match(out["prediction_set"], ref, calibration.sets.thresholds)


@pytest.mark.slow
def test_the_page_is_one_file_with_nothing_to_fetch(page):
    html = page[0].read_text()
    assert "http://" not in html and "https://" not in html
    assert "default-src 'none'" in html  # the browser refuses any request the page makes
    assert html.count("<script") == 3 and 'id="result"' in html


def photos(real_data, folder):
    """Photos as users take them: a dark item on a light background at several sizes and
    aspect ratios, some noisy, one with transparency, one a light-on-dark drawing, one a
    JPEG; and the 28 x 28 test image itself."""
    rng = np.random.default_rng(0)
    made = []
    sizes = [(300, 400), (1200, 900), (20, 15), (97, 31), (640, 640), (257, 1000), (28, 28)]
    for i in range(21):
        w, h = sizes[i % len(sizes)]
        item = Image.fromarray(255 - real_data.test_images[i]).resize(
            (w, h), Image.Resampling.BICUBIC
        )
        a = np.asarray(item.convert("RGB")).astype(int)
        a = np.clip(a + rng.integers(-12, 13, a.shape), 0, 255).astype(np.uint8)
        if i % 5 == 1:
            alpha = np.full(a.shape[:2], 255, np.uint8)
            alpha[: h // 3] = 90
            im = Image.fromarray(np.dstack([a, alpha]), "RGBA")
        elif i % 5 == 2:
            im = Image.fromarray(255 - a[..., 0], "L")  # light on dark, like a drawing
        else:
            im = Image.fromarray(a, "RGB")
        path = folder / f"photo{i}.{'jpg' if i % 5 == 3 else 'png'}"
        im.save(path)
        made.append(path)
    Image.fromarray(real_data.test_images[0]).save(folder / "item.png")
    return [*made, folder / "item.png"]


@pytest.mark.slow
@needs_node
def test_the_javascript_photo_preparation_matches_python(page, real_data, tmp_path):
    from eqx_fmnist.data import prepare_image

    paths = photos(real_data, tmp_path)
    meta = []
    for k, p in enumerate(paths):
        rgba = np.asarray(ImageOps.exif_transpose(Image.open(p)).convert("RGBA"))
        rgba.tofile(tmp_path / f"{k}.rgba")
        meta.append([str(tmp_path / f"{k}.rgba"), rgba.shape[1], rgba.shape[0]])
    script = """
const items = JSON.parse(process.argv[1]);
console.log(JSON.stringify(items.map(([f, w, h]) => {
  const p = E.prepare(new Uint8Array(fs.readFileSync(f)), w, h, null);
  return { pixels: Array.from(p.pixels), inverted: p.inverted, box: p.box };
})));
"""
    got = json.loads(run_engine(page[0], script, json.dumps(meta)))
    worst, exact = 0, 0
    for p, g in zip(paths, got, strict=True):
        want = prepare_image(p)
        assert g["inverted"] == want.inverted and tuple(g["box"]) == want.box, p.name
        diff = np.abs(np.asarray(g["pixels"]).reshape(28, 28) - want.pixels.astype(int))
        worst, exact = max(worst, int(diff.max())), exact + int(diff.max() == 0)
    print(f"largest pixel difference {worst} (of 255); {exact} of {len(paths)} photos exact")
    # The page reproduces Pillow 13 exactly. Pillow before it resizes the horizontal
    # axis first on tall photos too (the page shrinks those vertically first, as 13
    # does): a few grey levels on a few photos.
    assert worst <= 8 and exact >= 0.75 * len(paths)


def test_an_ensemble_too_large_for_a_page_is_refused_with_the_limit():
    from eqx_fmnist.export import ExportError, Portable
    from eqx_fmnist.export.html import MAX_PAGE_MEMBERS, to_html

    layer = (np.zeros((10, 784), np.float32), np.zeros(10, np.float32))
    big = Portable([[layer]] * (MAX_PAGE_MEMBERS + 1), True, 1.0, None)
    with pytest.raises(ExportError, match=rf"9 members is too large .* at most {MAX_PAGE_MEMBERS}"):
        to_html(big)


# --------------------------------------------------------------------------- the browser


@pytest.fixture(scope="module")
def cli_page(tmp_path_factory, real_data):
    """A calibrated run trained by the command line, and its page, exported by it."""
    run = tmp_path_factory.mktemp("cli") / "run"
    trained = run_cli_here(
        "train",
        "--steps",
        "60",
        "--hidden",
        "64",
        "--calibrate",
        "2000",
        "--out",
        run,
        "--data-dir",
        real_data.source,
    )
    assert trained.returncode == 0, trained.stderr
    exported = run_cli_here("export", run, "--format", "html", "--data-dir", real_data.source)
    assert exported.returncode == 0, exported.stderr
    text = " ".join(exported.stdout.split())
    assert "0 of 10,000 test images predicted differently" in text and "0 verdicts differ" in text
    return run, run / "model.html"


def open_in_browser(page_path, image_url: str, tmp_path) -> dict:
    """The page opened from disk in headless Chromium with `#image=URL`: its `#result`.
    (A command line holds at most 128 KiB: keep the image under about 90 KB.)"""
    address = page_path.resolve().as_uri() + "#image=" + urllib.parse.quote(image_url, safe="")
    # Chromium's singleton socket lives in $TMPDIR, and a socket's path holds at most 107
    # bytes: a long TMPDIR (a CI runner's) would abort it, so it gets a short one.
    short = tempfile.mkdtemp(dir="/tmp" if os.path.isdir("/tmp") else None)
    out = subprocess.run(
        [
            BROWSER,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--virtual-time-budget=10000",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--dump-dom",
            address,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TMPDIR": short},
    )
    shutil.rmtree(short, ignore_errors=True)
    assert out.returncode == 0, out.stderr[-2000:]
    dom = out.stdout
    start = dom.index('<pre id="result">') + len('<pre id="result">')
    return json.loads(dom[start : dom.index("</pre>", start)].replace("&quot;", '"'))


def data_url(path) -> str:
    kind = "jpeg" if path.suffix == ".jpg" else "png"
    return f"data:image/{kind};base64," + base64.b64encode(path.read_bytes()).decode()


@pytest.mark.slow
def test_chromium_gives_the_answer_predict_gives(cli_page, real_data, tmp_path):
    from eqx_fmnist import CLASS_NAMES

    require_browser()
    run, page_path = cli_page
    made = photos(real_data, tmp_path)
    chosen = []  # small enough for an address on the command line; the larger as JPEG
    for i in (0, 1, 2, 3, 4, 21):
        path, quality = made[i], 90
        while len(data_url(path)) > 90_000:
            path, quality = made[i].with_suffix(".small.jpg"), quality - 15
            Image.open(made[i]).convert("RGB").save(path, quality=quality)
        chosen.append(path)
    predicted = run_cli_here("predict", run, *chosen, "--json", "--top", "10")
    assert predicted.returncode == 0, predicted.stderr
    import eqx_fmnist as ef

    model = ef.load_checkpoint(run / "checkpoint.eqx").state.eval_model
    for path, line in zip(chosen, predicted.stdout.splitlines(), strict=True):
        want = json.loads(line)
        got = open_in_browser(page_path, data_url(path), tmp_path)
        assert got["class"] == want["top"][0]["class"], path.name
        probs = {t["class"]: t["probability"] for t in want["top"]}
        page_probs = dict(zip(CLASS_NAMES, got["probabilities"], strict=True))
        assert max(abs(page_probs[c] - p) for c, p in probs.items()) < 0.02, path.name
        assert got["unusual"] == want["unusual"] and got["inverted"] == want["inverted"]
        assert got["set"] == want["set"], path.name  # the page shows the same set
        # The map it draws: the library's integrated gradients of the class it shows.
        shown = got["explained"]
        assert shown["class"] == got["class"]
        e = ef.explain(
            model, np.asarray([got["pixels"]], np.uint8), target=CLASS_NAMES.index(got["class"])
        )
        attributions = np.asarray(shown["attributions"])
        assert np.abs(attributions - e.attributions[0]).max() <= 1e-4 * np.abs(attributions).max()


@pytest.mark.slow
@pytest.mark.parametrize("url", ["data:image/png;base64,iVBORw0KGgoAAAA", "hello"])
def test_an_image_the_page_cannot_read_is_one_message(cli_page, url, tmp_path):
    require_browser()
    got = open_in_browser(cli_page[1], url, tmp_path)
    assert set(got) == {"error"} and got["error"].startswith("Cannot read")


@pytest.mark.slow
def test_a_calibrated_stablehlo_artifact_flags_in_predict(cli_page, real_data, tmp_path):
    run, _ = cli_page
    art = tmp_path / "m.stablehlo"
    exported = run_cli_here("export", run, "--out", art, "--data-dir", real_data.source)
    assert exported.returncode == 0, exported.stderr
    Image.fromarray(real_data.test_images[0]).save(tmp_path / "item.png")
    Image.fromarray(np.full((28, 28), 128, np.uint8)).save(tmp_path / "grey.png")
    images = [tmp_path / "item.png", tmp_path / "grey.png"]
    from_run = [
        json.loads(x) for x in run_cli_here("predict", run, *images, "--json").stdout.splitlines()
    ]
    from_art = [
        json.loads(x) for x in run_cli_here("predict", art, *images, "--json").stdout.splitlines()
    ]
    assert [r["unusual"] for r in from_art] == [r["unusual"] for r in from_run] == [False, True]
    assert all(r["calibrated"] for r in from_art)
    for a, b in zip(from_art, from_run, strict=True):
        assert a["set"] == b["set"] and a["set_coverage"] == b["set_coverage"] == 0.9
        assert a["score"] == pytest.approx(b["score"], rel=1e-4)
        assert a["top"][0]["probability"] == pytest.approx(b["top"][0]["probability"], abs=1e-5)


def test_without_node_the_export_checks_the_pages_own_arrays(
    trained, calibrated, test_images, tmp_path, monkeypatch
):
    """The fallback check: the arrays decoded back from the page, run by numpy, against a
    reference written here."""
    from eqx_fmnist.export import export_model, html, numpy_serve
    from eqx_fmnist.export.html import portable_of_page

    result, calibration = trained, calibrated
    monkeypatch.setattr(html, "node_version", lambda: None)
    path = tmp_path / "m.html"
    manifest = export_model(
        result.model,
        result.state.policy,
        result.config,
        path,
        check_images=test_images[:2000],
        format="html",
        calibration=calibration,
    )
    assert manifest["checked_by"].startswith("numpy") and classes_agree(manifest["parity"])
    out = numpy_serve(portable_of_page(path.read_bytes()), test_images[:2000])
    ref = numpy_reference(result.model, test_images[:2000], calibration=calibration)
    assert_sets_match(out["prediction_set"], ref, calibration.sets.thresholds)
    np.testing.assert_allclose(out["probabilities"], ref["probabilities"], atol=1e-5)
    np.testing.assert_allclose(out["trust_score"], ref["trust_score"], rtol=1e-4)
    assert np.array_equal(out["unusual"], ref["unusual"])


@pytest.mark.slow
@needs_node
def test_the_javascript_of_an_ensemble_agrees_with_numpy(real_data, test_images, tmp_path):
    """A page of two members: the page's own JavaScript (the mean of the members'
    probabilities, each member's trust score averaged) against the numpy reference."""
    import eqx_fmnist as ef
    from eqx_fmnist.export import export_model, run_page

    from helpers import calibrate_on_training_images

    config = ef.TrainConfig(steps=30, hidden_sizes=(16,))
    ensemble = ef.fit_ensemble(config, ef.split_data(real_data), seeds=2)
    calibration = calibrate_on_training_images(ensemble.model, real_data)
    images = test_images[:2000]
    manifest = export_model(
        ensemble.model,
        ensemble.state.policy,
        config,
        tmp_path / "e.html",
        check_images=images,
        format="html",
        calibration=calibration,
    )
    assert manifest["members"] == 2 and manifest["checked_by"].startswith("node v")
    out = run_page((tmp_path / "e.html").read_bytes(), images)
    ref = numpy_reference(ensemble.model, images, calibration=calibration)
    np.testing.assert_allclose(out["probabilities"], ref["probabilities"], atol=1e-5)
    np.testing.assert_allclose(out["trust_score"], ref["trust_score"], rtol=1e-4)
    assert np.array_equal(out["unusual"], ref["unusual"])
    alone = numpy_reference(ef.select_members(ensemble.model, 0), images)
    assert np.abs(alone["probabilities"] - ref["probabilities"]).max() > 1e-3  # not member 0


@pytest.mark.slow  # cold: compiles several programs or trains on the real data
@needs_node
@pytest.mark.parametrize("members", [None, 2])
def test_the_javascript_attributions_are_the_librarys(members, real_data, tmp_path):
    """The page's backward pass (integrated gradients of the shown class) against
    `ef.explain` on real test images, for one model and an ensemble of two, and its
    completeness: the attributions sum to the score's change from the blank image."""
    import equinox as eqx
    import jax

    import eqx_fmnist as ef
    from eqx_fmnist.export.html import to_html
    from eqx_fmnist.export.portable import to_portable

    keys = jax.random.split(jax.random.PRNGKey(11), members or 1)
    model = (
        ef.MLP(hidden_sizes=(32, 16), key=keys[0])
        if members is None
        else eqx.filter_vmap(lambda k: ef.MLP(hidden_sizes=(32, 16), key=k))(keys)
    )
    path = tmp_path / "p.html"
    path.write_bytes(to_html(to_portable(model)))
    images = real_data.test_images[:12].reshape(12, -1)
    targets = np.arange(12) % 10
    (tmp_path / "x.u8").write_bytes(images.tobytes())
    script = """
const model = E.loadModel(JSON.parse(grab('<script id="model" type="application/json">').replace(/<\\\\\\//g, "</")));
const px = new Uint8Array(fs.readFileSync(process.argv[1])), steps = Number(process.argv[2]);
const out = [];
for (let i = 0; i < 12; i++) out.push(E.explain(model, px.subarray(i * 784, (i + 1) * 784), i % 10, steps));
console.log(JSON.stringify(out));
"""
    each = [model] if members is None else [ef.select_members(model, i) for i in range(members)]
    both = np.concatenate([images, np.zeros_like(images[:1])])
    logit_atol = max(mlp_logits_atol(m, both) for m in each)
    for steps in (16, 256):
        page = json.loads(run_engine(path, script, tmp_path / "x.u8", steps))
        got = np.array([p["attributions"] for p in page])
        change = np.array([p["score_change"] for p in page])
        want = ef.explain(model, images, target=targets, steps=steps)
        scale = np.abs(want.attributions).max()
        assert np.abs(got - want.attributions).max() <= 1e-4 * scale, steps
        # Each score is a logit or a log probability, moved by at most twice the logits'
        # float32 rounding (mlp_logits_atol; the page computes in float64), and the
        # change is two of them: the image's and the blank image's.
        np.testing.assert_allclose(change, want.score_change, atol=4 * logit_atol)
    assert np.abs(got.sum(axis=1) - change).max() < 2e-3 * np.abs(change).max()  # 256 steps
