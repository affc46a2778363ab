"""Export a calibrated model of the default recipe and a 5-seed ensemble in every format;
report the parity on all 10,000 test images (classes and the trust flag), the file sizes
and the time to export (check included); the installed size of the `onnx` extra; the
page's photo preparation against Python's; the page in headless Chromium against the
library; and a screenshot of the page for the docs.

    python benchmarks/export.py [--epochs 80] [--seeds 5] [--out benchmarks/results/export.md]
"""

import argparse
import base64
import importlib.metadata
import json
import shutil
import subprocess
import tempfile
import time
import urllib.parse
from pathlib import Path

import jax.numpy as jnp
import numpy as np
from PIL import Image, ImageOps

import eqx_fmnist as ef
from eqx_fmnist.data import prepare_image
from eqx_fmnist.export import FORMATS, export_model, load_artifact, run_onnx

from harness import machine_line

SCREENSHOT = Path("docs/images/web-page.png")


def installed_mb(*names: str) -> dict[str, float]:
    """The installed size of each distribution, from its RECORD."""
    sizes = {}
    for name in names:
        files = importlib.metadata.distribution(name).files or []
        sizes[name] = sum((f.size or 0) for f in files) / 1e6
    return sizes


def photos(data, folder: Path, count: int = 70) -> list[Path]:
    """Photos as users take them: a dark item on white at several sizes, noisy, some with
    transparency, some light-on-dark drawings, some JPEG."""
    rng = np.random.default_rng(0)
    sizes = [(300, 400), (1200, 900), (20, 15), (97, 31), (640, 640), (257, 1000), (28, 28)]
    made = []
    for i in range(count):
        w, h = sizes[i % len(sizes)]
        item = Image.fromarray(255 - data.test_images[i]).resize((w, h), Image.Resampling.BICUBIC)
        a = np.clip(
            np.asarray(item.convert("RGB")).astype(int) + rng.integers(-12, 13, (h, w, 3)), 0, 255
        )
        a = a.astype(np.uint8)
        if i % 5 == 1:
            alpha = np.full((h, w), 255, np.uint8)
            alpha[: h // 3] = 90
            im = Image.fromarray(np.dstack([a, alpha]), "RGBA")
        elif i % 5 == 2:
            im = Image.fromarray(255 - a[..., 0], "L")
        else:
            im = Image.fromarray(a, "RGB")
        path = folder / f"photo{i}.{'jpg' if i % 5 == 3 else 'png'}"
        im.save(path)
        made.append(path)
    return made


def preparation_parity(page: Path, paths: list[Path], folder: Path) -> tuple[int, int, int]:
    """`(largest pixel difference, photos exact, photos)` of the page's preparation."""
    meta = []
    for k, p in enumerate(paths):
        rgba = np.asarray(ImageOps.exif_transpose(Image.open(p)).convert("RGBA"))
        rgba.tofile(folder / f"{k}.rgba")
        meta.append([str(folder / f"{k}.rgba"), rgba.shape[1], rgba.shape[0]])
    script = f"""
const fs = require("fs"), vm = require("vm");
const html = fs.readFileSync({str(page)!r}, "utf8");
const s = html.indexOf('<script id="engine">') + 20;
const box = {{ Buffer }}; box.globalThis = box;
vm.runInNewContext(html.slice(s, html.indexOf("</script>", s)), box);
const items = JSON.parse(process.argv[1]);
console.log(JSON.stringify(items.map(([f, w, h]) =>
  Array.from(box.EqxFmnist.prepare(new Uint8Array(fs.readFileSync(f)), w, h, null).pixels))));
"""
    out = subprocess.run(
        ["node", "-e", script, json.dumps(meta)], capture_output=True, text=True, check=True
    )
    diffs = [
        int(np.abs(np.asarray(g) - prepare_image(p).pixels.reshape(-1).astype(int)).max())
        for p, g in zip(paths, json.loads(out.stdout), strict=True)
    ]
    return max(diffs), sum(d == 0 for d in diffs), len(diffs)


def browser(page: Path, image: Path, *, screenshot: Path | None = None) -> dict | None:
    """The page's `#result` in headless Chromium for `image` (and a screenshot)."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        return None
    url = f"data:image/{'jpeg' if image.suffix == '.jpg' else 'png'};base64,"
    url += base64.b64encode(image.read_bytes()).decode()
    address = page.resolve().as_uri() + "#image=" + urllib.parse.quote(url, safe="")
    common = [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--virtual-time-budget=10000",
    ]
    if screenshot is not None:
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [*common, "--window-size=1280,640", f"--screenshot={screenshot}", address],
            capture_output=True,
            check=True,
        )
    dom = subprocess.run(
        [*common, "--dump-dom", address], capture_output=True, text=True, check=True
    ).stdout
    start = dom.index('<pre id="result">') + len('<pre id="result">')
    return json.loads(dom[start : dom.index("</pre>", start)].replace("&quot;", '"'))


def _median_seconds(run, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        run()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def views_cost(single, splits, config, images, folder: Path) -> list[str]:
    """Test-time augmentation inside the exports: the one model calibrated on each set of
    views, exported in the formats that compute them, timed on all 10,000 test images
    (median of 3; StableHLO loaded once, ONNX and the page loaded each time as a consumer
    starts them), in ms per 10,000 images."""
    from eqx_fmnist.export import run_page
    from eqx_fmnist.views import TTA_VIEWS

    rows, base = [], {}
    for name, views in TTA_VIEWS.items():
        calibration = ef.calibrate(
            single.model, splits.train, splits.calibration, policy=single.state.policy, tta=views
        )
        for fmt in ("stablehlo", "onnx", "html"):
            path = folder / f"views_{name}{FORMATS[fmt].suffix}"
            m = export_model(
                single.model,
                single.state.policy,
                config,
                path,
                check_images=images,
                format=fmt,
                calibration=calibration,
            )
            if fmt == "stablehlo":
                artifact = load_artifact(path)
                artifact(images)  # compiled once
                seconds = _median_seconds(lambda a=artifact: a(images))
            elif fmt == "onnx":
                seconds = _median_seconds(lambda p=path: run_onnx(p.read_bytes(), images))
            else:
                seconds = _median_seconds(lambda p=path: run_page(p.read_bytes(), images), 1)
            base.setdefault(fmt, seconds)
            p = m["parity"]
            rows.append(
                f"| {name} ({len(views or ((0, 0, False),))}) | {fmt} | {m['bytes']:,} "
                f"| {p['mismatches']} of {p['images']:,} "
                f"| {1000 * seconds * 10_000 / len(images):,.0f} "
                f"| {seconds / base[fmt]:.2f} |"
            )
            print(rows[-1], flush=True)
    return [
        "",
        "Test-time augmentation inside the exports (`--tta`; the one model, calibrated "
        "on each set of views): each view is one gather of the pixels. Checked and timed "
        f"on {len(images):,} test images, median of 3 (the page: once, under node, start-up included); "
        "StableHLO warm, ONNX with its session made each time.",
        "",
        "| views (count) | format | bytes | mismatched predictions | ms per 10,000 images "
        "| against no views |",
        "|---|---|---|---|---|---|",
        *rows,
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=80)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/export.md"))
    parser.add_argument(
        "--screenshot",
        type=Path,
        default=SCREENSHOT,
        help="where the browser's screenshot of the page goes",
    )
    parser.add_argument("--no-browser", action="store_true", help="skip headless Chromium")
    parser.add_argument("--photos", type=int, default=70, help="synthetic photos to prepare")
    parser.add_argument(
        "--views-images",
        type=int,
        default=10_000,
        help="test images the exports with views are checked and timed on",
    )
    args = parser.parse_args()
    data = ef.load_fashion_mnist()
    images = data.test_images.reshape(len(data.test_images), -1)
    config = ef.TrainConfig(epochs=args.epochs, calibration_size=5000)
    splits = ef.split_data(data, calibration_size=5000)
    single = ef.fit(config, splits)
    ensemble = ef.fit_ensemble(config, splits, args.seeds)
    models = [
        ("one model", single.model, single.state.policy, single.test.accuracy),
        (
            f"ensemble of {args.seeds}",
            ensemble.model,
            ensemble.state.policy,
            ensemble.test.accuracy,
        ),
    ]
    extra = installed_mb("onnx", "onnxruntime", "protobuf")
    lines = [
        f"{machine_line()} onnxruntime {importlib.metadata.version('onnxruntime')}.",
        "",
        f"The default recipe ({args.epochs} "
        "epochs) with a calibration split of 5,000 training images, so that StableHLO, ONNX "
        "and the page carry the trust flag; every export is checked on all 10,000 test "
        "images before it is written.",
        "",
        "| model | format | bytes | export s (check included) | mismatched predictions "
        "| largest logit difference | trust verdicts that differ | largest relative score "
        "difference | load + run on 10,000 s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    folder = Path(tempfile.mkdtemp())
    pages, calibrations = {}, {}
    for name, model, policy, accuracy in models:
        calibration = calibrations[name] = ef.calibrate(
            model, splits.train, splits.calibration, policy=policy
        )
        for fmt in FORMATS:
            path = folder / f"{name.replace(' ', '_')}{FORMATS[fmt].suffix}"
            m = export_model(
                model,
                policy,
                config,
                path,
                check_images=images,
                format=fmt,
                calibration=calibration,
                extra={"test_accuracy": accuracy, "trained": f"{args.epochs} epochs"},
            )
            run = ""
            if fmt in ("stablehlo", "onnx"):
                t = time.perf_counter()
                load_artifact(path)(images) if fmt == "stablehlo" else run_onnx(
                    path.read_bytes(), images
                )
                run = f"{time.perf_counter() - t:.2f}"
            if fmt == "html":
                pages[name] = path
            p = m["parity"]
            flags = (
                "" if p["flag_mismatches"] is None else f"{p['flag_mismatches']} of {p['images']:,}"
            )
            score = "" if p["max_score_difference"] is None else f"{p['max_score_difference']:.1e}"
            lines.append(
                f"| {name} (test accuracy {accuracy:.4f}) | {fmt} | {m['bytes']:,} "
                f"| {m['export_seconds']:.2f} | {p['mismatches']} of {p['images']:,} "
                f"| {p['max_logit_difference']:.1e} | {flags} | {score} | {run} |"
            )
            print(lines[-1], flush=True)
    lines += views_cost(single, splits, config, images[: args.views_images], folder)
    lines += [
        "",
        "The `onnx` extra, installed (from each distribution's RECORD): "
        + ", ".join(f"{k} {v:.1f} MB" for k, v in extra.items())
        + f"; {sum(extra.values()):.1f} MB in all (three packages; protobuf is shared "
        "with the `tensorboard` extra); the rest onnxruntime needs (numpy, ml_dtypes, "
        "flatbuffers, packaging, typing_extensions) comes with jax, equinox and "
        "matplotlib already.",
    ]
    paths = photos(data, folder, args.photos)
    worst, exact, count = preparation_parity(pages["one model"], paths, folder)
    lines += [
        "",
        f"The page's photo preparation against `eqx_fmnist.data.prepare_image` on "
        f"{count} synthetic photos (7 sizes from 20 x 15 to 1200 x 900, RGB, RGBA, gray, "
        f"PNG and JPEG): {exact} of {count} identical, largest pixel difference {worst} "
        "of 255.",
    ]
    photo = folder / "photo.jpg"
    Image.open(paths[0]).convert("RGB").save(photo, quality=90)
    got = (
        None if args.no_browser else browser(pages["one model"], photo, screenshot=args.screenshot)
    )
    if got is not None:
        from eqx_fmnist.trust import features

        calibration = calibrations["one model"]
        pixels = prepare_image(photo).pixels.reshape(1, -1)
        probs = np.asarray(
            ef.predict_proba(single.model, jnp.asarray(pixels), temperature=calibration.temperature)
        )[0]
        unusual = bool(
            calibration.trust.flags(features(single.model, jnp.asarray(pixels)), pixels)[0]
        )
        lines += [
            "",
            f"Headless Chromium opening the page from disk with `#image=` (a 300 x 400 "
            f"JPEG photo): `{got['class']}` with {max(got['probabilities']):.4f}, unusual "
            f"{got['unusual']}; the library: `{ef.CLASS_NAMES[int(probs.argmax())]}` with "
            f"{probs.max():.4f}, unusual {unusual}; largest probability difference "
            f"{np.abs(np.asarray(got['probabilities']) - probs).max():.1e}. Screenshot: "
            f"`{args.screenshot}`.",
        ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines[-5:]))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
