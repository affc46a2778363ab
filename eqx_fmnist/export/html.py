"""A one-file web page: the weights embedded (base64 float32), the forward pass, the trust
flag and the photo preparation in plain JavaScript (`page/engine.js`), a canvas to draw
on, a file picker and drag-and-drop. It needs no network at any point and works opened
from disk.

For automation the page classifies the image whose data URL follows `#image=` in its
address and writes `{"class", "probabilities", "unusual", "trust_score", "inverted",
"pixels"}` as JSON into `<pre id="result">` (or `{"error": ...}`).

[`run_page`][eqx_fmnist.export.html.run_page] runs a page's own engine and weights under
`node`, as the export's check and the tests do.
"""

import base64
import json
import shutil
import subprocess
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from ..data import CLASS_NAMES, IMAGE_SIZE
from .format import ExportFormat, ExportInputs, Outputs
from .manifest import ExportError
from .portable import Portable, PortableTrust, numpy_serve

MAX_PAGE_MEMBERS = 8
"""The most members one page holds: about 2 MB of page per member (weights and the trust
flag's whitening matrix, base64), 17 MB for 8."""


def _b64(array: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(array, "<f4").tobytes()).decode("ascii")


def page_spec(portable: Portable, *, about: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON the page embeds: sizes, class names, temperature, each member's arrays
    (base64 little-endian float32), the trust flag's thresholds, the prediction
    sets' (with the coverage they promise) and test-time augmentation's pixel tables
    (`views`, or `null`)."""
    t: PortableTrust | None = portable.trust
    members = []
    for m, layers in enumerate(portable.layers):
        entry: dict[str, Any] = {
            "layers": [{"weight": _b64(w), "bias": _b64(b)} for w, b in layers]
        }
        if t is not None:
            entry |= {"whiten": _b64(t.whiten[m]), "centres": _b64(t.centres[m])}
        members.append(entry)
    trust = (
        None
        if t is None
        else {
            "threshold": t.threshold,
            "ink_sum_range": list(t.ink_sum_range),
            "min_contrast": t.min_contrast,
        }
    )
    return {
        "format": "eqx_fmnist-page",
        "version": 1,
        "class_names": list(CLASS_NAMES),
        "sizes": portable.sizes,
        "ensemble": portable.ensemble,
        "temperature": portable.temperature,
        "trust": trust,
        "members": members,
        "sets": None
        if portable.set_thresholds is None
        else {
            "thresholds": [float(v) for v in portable.set_thresholds],
            "coverage": portable.set_coverage,
        },
        "views": None if portable.views is None else portable.views.tolist(),
        **(about or {}),
    }


def _resource(name: str) -> str:
    return (
        resources.files(__name__.rpartition(".")[0])
        .joinpath("page", name)
        .read_text(encoding="utf-8")
    )


def to_html(portable: Portable, *, about: dict[str, Any] | None = None) -> bytes:
    """The page for `portable`, as UTF-8 bytes; `about` adds entries to its JSON (the
    page shows `test_accuracy` and `trained`).

    **Raises:**

    `ExportError` for an ensemble of more than `MAX_PAGE_MEMBERS` members.
    """
    if portable.num_members > MAX_PAGE_MEMBERS:
        raise ExportError(
            f"an ensemble of {portable.num_members} members is too large for one page: it "
            f"holds at most {MAX_PAGE_MEMBERS} (about 2 MB each); export a smaller ensemble "
            "or use --format onnx."
        )
    spec = json.dumps(page_spec(portable, about=about), separators=(",", ":"))
    html = _resource("page.html")
    # `</` cannot appear inside a <script> element; JSON allows `<\/` for it.
    html = html.replace("/*MODEL*/", spec.replace("</", "<\\/"))
    return html.replace("/*ENGINE*/", _resource("engine.js")).encode("utf-8")


def embedded_spec(html: bytes | str) -> dict[str, Any]:
    """The JSON a page embeds (what [`page_spec`][eqx_fmnist.export.html.page_spec] wrote)."""
    text = html.decode("utf-8") if isinstance(html, bytes) else html
    opening = '<script id="model" type="application/json">'
    start = text.index(opening) + len(opening)
    return json.loads(text[start : text.index("</script>", start)].replace("<\\/", "</"))


def portable_of_page(html: bytes | str) -> Portable:
    """The arrays a page embeds, decoded back: what its JavaScript computes with."""
    spec = embedded_spec(html)

    def floats(s: str) -> np.ndarray:
        return np.frombuffer(base64.b64decode(s), "<f4").astype(np.float32)

    sizes = spec["sizes"]
    layers = [
        [
            (floats(layer["weight"]).reshape(sizes[i + 1], sizes[i]), floats(layer["bias"]))
            for i, layer in enumerate(m["layers"])
        ]
        for m in spec["members"]
    ]
    trust = None
    if spec["trust"] is not None:
        h = sum(sizes[1:-1])
        t = spec["trust"]
        trust = PortableTrust(
            np.stack([floats(m["whiten"]).reshape(h, h) for m in spec["members"]]),
            np.stack([floats(m["centres"]).reshape(-1, h) for m in spec["members"]]),
            float(t["threshold"]),
            tuple(t["ink_sum_range"]),
            float(t["min_contrast"]),
        )
    sets = spec.get("sets")  # absent from pages written before the sets
    thresholds = None if not sets else np.asarray(sets["thresholds"], np.float32)
    coverage = None if not sets else float(sets["coverage"])
    views = None if not spec.get("views") else np.asarray(spec["views"], np.int32)
    return Portable(
        layers,
        bool(spec["ensemble"]),
        float(spec["temperature"]),
        trust,
        thresholds,
        coverage,
        views,
    )


# node reads the page, evaluates its engine script, and classifies raw uint8 images.
_NODE_RUNNER = r"""
const fs = require("fs"), vm = require("vm");
const [page, images, count, out] = process.argv.slice(2);
const html = fs.readFileSync(page, "utf8");
const grab = (open) => { const s = html.indexOf(open) + open.length; return html.slice(s, html.indexOf("</script>", s)); };
const sandbox = { Buffer: Buffer }; sandbox.globalThis = sandbox;
vm.runInNewContext(grab('<script id="engine">'), sandbox);
const E = sandbox.EqxFmnist;
const model = E.loadModel(JSON.parse(grab('<script id="model" type="application/json">').replace(/<\\\//g, "</")));
const pixels = new Uint8Array(fs.readFileSync(images)), n = Number(count), size = pixels.length / n;
const result = new Float64Array(n * 32).fill(NaN);
for (let i = 0; i < n; i++) {
  const a = E.classify(model, pixels.subarray(i * size, (i + 1) * size));
  result.set(a.logits, i * 32); result.set(a.probabilities, i * 32 + 10);
  result[i * 32 + 20] = a.trust_score === null ? NaN : a.trust_score;
  result[i * 32 + 21] = a.unusual === null ? NaN : (a.unusual ? 1 : 0);
  if (a.set !== null) result.set(a.set.map(Number), i * 32 + 22);
}
fs.writeFileSync(out, Buffer.from(result.buffer));
"""


def node_version() -> str | None:
    """`node --version`, or `None` when node is not installed."""
    node = shutil.which("node")
    if node is None:
        return None
    try:
        return subprocess.run(
            [node, "--version"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def run_page(html: bytes, images: np.ndarray) -> dict[str, np.ndarray]:
    """Classify `uint8` images `(n, 784)` with the page's own JavaScript under `node`:
    `logits`, `probabilities` and, when the page holds a trust flag, `trust_score` and
    `unusual` (and `prediction_set` when it holds the sets' thresholds).

    **Raises:**

    `ExportError` when node is not installed or the page's script fails.
    """
    node = shutil.which("node")
    if node is None:
        raise ExportError("running the page's JavaScript needs node, which is not installed.")
    images = np.ascontiguousarray(images, np.uint8).reshape(len(images), IMAGE_SIZE)
    with tempfile.TemporaryDirectory() as tmp:
        page, pixels, out, runner = (
            Path(tmp) / n for n in ("page.html", "x.u8", "out.f64", "run.js")
        )
        page.write_bytes(html)
        pixels.write_bytes(images.tobytes())
        runner.write_text(_NODE_RUNNER)
        done = subprocess.run(
            [node, str(runner), str(page), str(pixels), str(len(images)), str(out)],
            capture_output=True,
            text=True,
        )
        if done.returncode:
            raise ExportError(
                f"the page's JavaScript failed under node: {done.stderr.strip()[-500:]}"
            )
        raw = np.frombuffer(out.read_bytes(), np.float64).reshape(len(images), 32)
    result: dict[str, np.ndarray] = {"logits": raw[:, :10], "probabilities": raw[:, 10:20]}
    if not np.isnan(raw[:, 20]).all():
        result |= {"trust_score": raw[:, 20], "unusual": raw[:, 21] > 0.5}
    if not np.isnan(raw[:, 22:]).all():
        result["prediction_set"] = raw[:, 22:] > 0.5
    return result


def _build(inputs: ExportInputs) -> tuple[bytes, dict[str, Any]]:
    about = {k: v for k, v in inputs.about.items() if k in ("test_accuracy", "trained")}
    return to_html(inputs.portable, about=about), {}


def _run(blob: bytes, images: np.ndarray, inputs: ExportInputs) -> tuple[Outputs, dict[str, Any]]:
    node = node_version()
    if node is not None:
        return run_page(blob, images), {"checked_by": f"node {node} (the page's own JavaScript)"}
    # The page's embedded arrays, decoded back, in numpy.
    return numpy_serve(portable_of_page(blob), images), {
        "checked_by": "numpy on the page's embedded arrays (node not found)"
    }


FORMAT = ExportFormat("html", ".html", _build, _run)
"""A one-file web page: the forward pass and the trust flag in plain JavaScript."""
