"""Shared test helpers: IDX writers, synthetic data, tree comparison."""

import contextlib
import hashlib
import http.server
import threading
from pathlib import Path

import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
import pytest


def idx_bytes(array: np.ndarray) -> bytes:
    """An unsigned-byte IDX file holding `array`, written independently of the library."""
    array = np.ascontiguousarray(array, dtype=np.uint8)
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(
        int(d).to_bytes(4, "big") for d in array.shape
    )
    return header + array.tobytes()


def synthetic_arrays(n_train: int = 60, n_test: int = 20, seed: int = 0) -> dict[str, np.ndarray]:
    """Small random images and balanced labels, keyed like `eqx_fmnist.data.FILES`."""
    rng = np.random.default_rng(seed)
    return {
        "train_images": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        "train_labels": (np.arange(n_train) % 10).astype(np.uint8),
        "test_images": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        "test_labels": (np.arange(n_test) % 10).astype(np.uint8),
    }


def specs_for(arrays: dict[str, np.ndarray], gz_blobs: dict[str, bytes]):
    """`FILES`-style specs whose checksums are those of the given synthetic files."""
    from eqx_fmnist.data import FILES, IdxFile

    specs = {}
    for key, spec in FILES.items():
        raw = idx_bytes(arrays[key])
        specs[key] = IdxFile(
            spec.name,
            spec.magic,
            len(arrays[key]),
            hashlib.md5(gz_blobs[key]).hexdigest(),
            hashlib.sha256(raw).hexdigest(),
            len(raw),
        )
    return specs


# float32's unit roundoff: each float32 operation returns the exact result times (1 + d)
# with |d| <= F32_U.
F32_U = float(np.finfo(np.float32).eps) / 2
# How many of the typical rounding error a tolerance allows (see `f32_sum_atol`).
SAFETY = 4.0


TPU_FLOAT32_WIDENING = 16.0
"""How much a fixed float32 tolerance is widened on a TPU, as JAX's own suite widens
its float32 tolerances there: a TPU's float32 matmul at `HIGHEST` is six bfloat16
passes (close to float32, not IEEE-rounded), and its exp, log, erf and tanh are
approximations a few ulps off. Measured there: a float32 MLP's logits 1.6e-4 off a
float64 reference where a CPU's are within 1e-5."""


def float32_widening() -> float:
    """`TPU_FLOAT32_WIDENING` on a TPU, `1.0` on a CPU or a GPU (IEEE float32)."""
    return TPU_FLOAT32_WIDENING if jax.default_backend() == "tpu" else 1.0


TPU_FLOAT16_PRODUCT = 2.0**-15
"""A TPU has no float16 multiplier: each 11-bit operand is two bfloat16 halves and the
product three passes (the low halves' product dropped), about 2**-16 of each product's
size; this bound (measured there: 1.3e-4 on sums of 20 terms near 13) is added, times
`|a| @ |b|`, to a float16 matmul's tolerance on a TPU."""


def float16_products_atol(a, b) -> np.ndarray:
    """`TPU_FLOAT16_PRODUCT` times `|a| @ |b|` on a TPU, `0` elsewhere (an IEEE float16
    product is exact in float32)."""
    if jax.default_backend() != "tpu":
        return np.zeros(())
    return TPU_FLOAT16_PRODUCT * (
        np.abs(np.asarray(a, np.float64)) @ np.abs(np.asarray(b, np.float64))
    )


def f32_sum_atol(k: int, magnitude: float) -> float:
    """A tolerance for two float32 evaluations of one `k`-term sum whose terms' magnitudes
    add up to `magnitude`, whatever the order or blocking of their additions (batched vs
    alone, vmapped vs looped, chunked vs whole), on any CPU or kernel.

    Each evaluation is within `k u` times `magnitude` of the exact sum (the worst case,
    Higham, *Accuracy and Stability of Numerical Algorithms*, eq. 3.5), but its rounding
    errors have independent signs, so the typical error grows as `sqrt(k) u` (Higham's
    rule of thumb, section 3.1): the tolerance is `SAFETY` times that, for two
    evaluations. It depends on the size of the computation and nothing else.
    """
    return SAFETY * 2 * np.sqrt(k) * F32_U * magnitude


def f32_matmul_atol(a, b) -> float:
    """`f32_sum_atol` for every entry of `a @ b`: `k` is the contraction length and the
    magnitude of an entry's terms is that entry of `|a| @ |b|` (the largest is used)."""
    a, b = np.abs(np.asarray(a, np.float64)), np.abs(np.asarray(b, np.float64))
    return f32_sum_atol(a.shape[-1], float((a @ b).max()))


GELU_SLOPE = 1.13  # the steepest slope of GELU, exact or tanh form (1.1289 at x = 1.5)


def mlp_rounding(model, images) -> tuple[list[np.ndarray], np.ndarray]:
    """How far one float32 evaluation of an MLP on `images` (uint8, `(n, 784)`) can sit
    from the exact one, per image and unit: each hidden layer's activations, then the
    logits (float64 arrays of the activations' shapes).

    The rounding is followed through the layers, as `f32_sum_atol` reasons: each layer's
    matmul and bias add contribute `sqrt(k) u` times their terms' magnitudes
    (`|W| |h| + |b|`); an error coming in from the layer below passes through `W` with
    independent signs (root-sum-square over `W`'s rows) and through GELU at a slope of
    at most `GELU_SLOPE`. `u` is float32's, widened on a TPU (`float32_widening`).
    """
    u = F32_U * float32_widening()
    h = np.asarray(images, np.float64).reshape(len(images), -1) / 255.0
    err, hidden = np.zeros_like(h), []
    layers = model.layers
    for i, layer in enumerate(layers):
        w, b = np.asarray(layer.weight, np.float64), np.asarray(layer.bias, np.float64)
        own = np.sqrt(w.shape[1] + 1) * u * (np.abs(h) @ np.abs(w).T + np.abs(b))
        err = np.sqrt((err**2) @ (w**2).T + own**2)
        z = h @ w.T + b
        if i < len(layers) - 1:
            h = numpy_gelu(z)
            err = GELU_SLOPE * err + 4 * u * np.abs(h)
            hidden.append(err)
    return hidden, err


def mlp_logits_atol(model, images) -> float:
    """A tolerance for two float32 evaluations of one MLP's logits on `images` (uint8,
    `(n, 784)`), however each orders its sums (batched vs alone, vmapped vs looped):
    the largest logit's `mlp_rounding`, times `SAFETY`, for two evaluations."""
    return SAFETY * 2 * float(mlp_rounding(model, images)[1].max())


def probabilities_atol(members, images) -> float:
    """A tolerance for float32 probabilities against float64's: the logits' own
    (`mlp_logits_atol`, the largest over `members`) moves a probability by at most
    `e^(2 d) - 1` of itself, plus the softmax's own rounding."""
    logit_atol = max(mlp_logits_atol(m, images) for m in members)
    return float(np.expm1(2 * logit_atol)) + 8 * F32_U * float32_widening()


def classes_agree(parity: dict) -> bool:
    """An export's check of its classes (the manifest's `parity`): every image whose class
    differs from the library's is a near-tie (`tied`: top two logits within float32's
    rounding of each other), which two float32 computations on two backends may order
    either way. On one CPU none differs; on a TPU one in 10,000 of an ensemble has."""
    return parity["mismatches"] == parity["tied"]


def assert_flags_match(got, ref, trust, members, images) -> None:
    """An artifact's or the library's trust scores and flags against `numpy_reference`'s:
    the scores within `trust_score_atol`, the flags equal but where the reference's
    score is that close to the threshold."""
    atol = trust_score_atol(members, images, trust)
    assert (np.abs(got["trust_score"] - ref["trust_score"]) <= atol).all()
    near = np.abs(ref["trust_score"] - trust.threshold) <= atol
    assert ((np.asarray(got["unusual"]) == ref["unusual"]) | near).all()


def trust_score_atol(members, images, trust) -> np.ndarray:
    """Per image, how far a float32 trust score (the smallest squared Mahalanobis
    distance to a class mean, averaged over `members`) can sit from float64's.

    With the features `f` off by `e` (`mlp_rounding` of every hidden layer, times
    `SAFETY`, for two evaluations), each class's `(f - m)' P (f - m)` moves by at most
    `2 |P (f - m)|' e + e' |P| e`, and the smallest of them by at most the largest move.
    """
    total = np.zeros(len(images))
    means = np.asarray(trust.means, np.float64).reshape(len(members), *trust.means.shape[-2:])
    precision = np.asarray(trust.precision, np.float64)
    precision = precision.reshape(len(members), *precision.shape[-2:])
    for model, m, p in zip(members, means, precision, strict=True):
        forward = _numpy_hidden(model, images)
        e = SAFETY * 2 * np.concatenate(mlp_rounding(model, images)[0], 1)
        pd = np.einsum("hj,ncj->nch", p, forward[:, None, :] - m[None])
        move = 2 * np.einsum("nch,nh->nc", np.abs(pd), e)
        move += np.einsum("nh,hj,nj->n", e, np.abs(p), e)[:, None]
        total += move.max(1)
    return total / len(members)


def _numpy_hidden(model, images) -> np.ndarray:
    """Every hidden layer's activations side by side, in float64."""
    h = np.asarray(images, np.float64).reshape(len(images), -1) / 255.0
    hidden = []
    for layer in model.layers[:-1]:
        h = numpy_gelu(h @ np.asarray(layer.weight, np.float64).T + np.asarray(layer.bias))
        hidden.append(h)
    return np.concatenate(hidden, 1)


def at_once(f, *args, **kwargs):
    """`f(*args, **kwargs)` as one compiled program (`eqx.filter_jit`, arrays traced, the
    rest static): a reference or a forward pass run eagerly compiles one program per
    operation and shape, each a compile of its own in a cold suite."""
    import equinox as eqx

    return eqx.filter_jit(f)(*args, **kwargs)


def tree_allclose(a, b, *, rtol: float = 1e-5, atol: float = 1e-6) -> bool:
    """True when two PyTrees have the same structure and all leaves are close."""
    if jtu.tree_structure(a) != jtu.tree_structure(b):
        return False
    return all(
        jnp.shape(x) == jnp.shape(y)
        and bool(np.allclose(np.asarray(x, np.float64), np.asarray(y, np.float64), rtol, atol))
        for x, y in zip(jtu.tree_leaves(a), jtu.tree_leaves(b), strict=True)
    )


def same_arrays(a, b) -> bool:
    """Every array leaf equal, bit for bit (static fields such as the optimiser's
    closures are not compared: each state builds its own)."""
    import equinox as eqx

    la, lb = (
        jax.tree.leaves(eqx.filter(a, eqx.is_array)),
        jax.tree.leaves(eqx.filter(b, eqx.is_array)),
    )
    return len(la) == len(lb) and all(np.array_equal(x, y) for x, y in zip(la, lb, strict=True))


def feistel_order(round_keys: np.ndarray, n: int) -> np.ndarray:
    """A reference for `eqx_fmnist.dataset.permute` over all of `0..n-1`, written in
    numpy from its documented definition: a balanced Feistel network on the smallest
    even bit width holding `n - 1`, round `r` mapping `(L, R) -> (R, L ^ h(R ^ k_r))`
    with MurmurHash3's finaliser `h`, and cycle-walking back into `0..n-1`."""
    half = max(1, ((n - 1).bit_length() + 1) // 2)
    mask = np.uint32((1 << half) - 1)

    def h(x):
        x = x ^ (x >> np.uint32(16))
        x = x * np.uint32(0x85EBCA6B)
        x = x ^ (x >> np.uint32(13))
        x = x * np.uint32(0xC2B2AE35)
        return x ^ (x >> np.uint32(16))

    def encrypt(x):
        left, right = x >> np.uint32(half), x & mask
        for k in round_keys.astype(np.uint32):
            left, right = right, left ^ (h(right ^ k) & mask)
        return (left << np.uint32(half)) | right

    out = encrypt(np.arange(n, dtype=np.uint32))
    for i in np.flatnonzero(out >= n):  # walk each stray element back, one at a time
        x = out[i : i + 1]
        while x[0] >= n:
            x = encrypt(x)
        out[i] = x[0]
    return out.astype(np.int64)


def cpu() -> jax.Device:
    return jax.devices("cpu")[0]


class LocalServer:
    """A local HTTP server on 127.0.0.1 serving files under /a/ and /b/ with faults."""

    def __init__(self, files: dict[str, bytes]):
        self.files = files
        self.faults: dict[str, str] = {}  # path -> "404" | "corrupt" | "cut"
        self.requests: list[str] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                server.requests.append(self.path)
                fault = server.faults.get(self.path.split("/")[1])
                body = server.files.get(self.path.rsplit("/", 1)[-1])
                if body is None or fault == "404":
                    self.send_error(404)
                    return
                if fault == "corrupt":
                    body = body[:-10] + bytes(10)
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body[: len(body) // 2] if fault == "cut" else body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def serve_locally(files: dict[str, bytes]) -> LocalServer:
    """A `LocalServer` of `files`; on a machine whose sandbox refuses sockets (the TPU
    machine's) the test skips and says so: no local mirror can be served there."""
    try:
        return LocalServer(files)
    except OSError as e:
        pytest.skip(f"this machine cannot serve HTTP on 127.0.0.1 ({e}): no local mirror")


def run_cli(*args, env=None, timeout: float = 300):
    """`python -m eqx_fmnist ARGS` to completion, output captured."""
    import os
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "eqx_fmnist", *map(str, args)],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "120", **(env or {})},
        timeout=timeout,
    )


def run_cli_here(*args):
    """`eqx-fmnist ARGS` in this process, as `run_cli` runs it in a fresh one (no
    interpreter to start, the data read and the programs compiled shared with the
    suite), output captured. Commands that must be a process of their own (a signal, the
    holder of a lock another command meets, more devices) use `run_cli` or `start_cli`."""
    import contextlib
    import io
    import os
    import subprocess
    from unittest import mock

    from eqx_fmnist.cli import main

    out, err = io.StringIO(), io.StringIO()
    with (
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
        mock.patch.dict(os.environ, {"COLUMNS": "120"}),
        _signals_taken_by_runs() as taken,
    ):
        try:
            status = main(["--no-compile-cache", *map(str, args)])
        except SystemExit as e:  # argparse's usage errors exit, as in a shell
            status = e.code
    pass_on_signals(taken)
    return subprocess.CompletedProcess(args, status, out.getvalue(), err.getvalue())


@contextlib.contextmanager
def _signals_taken_by_runs():
    """The stop requests a run folder's signal handler makes while inside."""
    from unittest import mock

    from eqx_fmnist.runs.writing import RunFolder

    taken, original = [], RunFolder.request_stop

    def recording(self, reason: str = "a stop was requested") -> None:
        taken.append(reason)
        original(self, reason)

    with mock.patch.object(RunFolder, "request_stop", recording):
        yield taken


def pass_on_signals(taken: list[str]) -> None:
    """No test signals a command run in this process (those use `run_cli`): a signal a
    run took (`interrupted (SIGTERM)`) was the suite's own (`timeout`, Ctrl-C). Deliver
    it again, to the suite, as the command's process would have ended on it."""
    import signal

    for name in ("SIGTERM", "SIGINT", "SIGHUP"):
        if any(f"({name})" in reason for reason in taken):
            signal.raise_signal(getattr(signal, name))


def start_cli(*args, quiet: bool = False):
    """`python -m eqx_fmnist ARGS` started in the background (a `Popen`)."""
    import subprocess
    import sys

    out = subprocess.DEVNULL if quiet else subprocess.PIPE
    return subprocess.Popen(
        [sys.executable, "-m", "eqx_fmnist", *map(str, args)], stdout=out, stderr=out, text=True
    )


def wait_for(path: Path, timeout: float = 120, poll: float = 0.05) -> bool:
    """Wait until `path` exists; False if it did not within `timeout` seconds."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            return True
        time.sleep(poll)
    return False


def use_a_slice(data, monkeypatch, n_train: int, n_test: int):
    """From now on, every way the package loads Fashion-MNIST (`ef.load_fashion_mnist`,
    the command line, `runs.run_splits`) returns the first `n_train` training and `n_test`
    test images of `data`: a page or a script run in its quick form. Returns the slice."""
    import sys

    from eqx_fmnist.data.load import load_fashion_mnist

    small = real_slice(data, n_train, n_test)
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] == "eqx_fmnist" and vars(module).get("load_fashion_mnist") is (
            load_fashion_mnist
        ):
            monkeypatch.setattr(module, "load_fashion_mnist", lambda *a, **k: small)
    return small


def numpy_gelu(x):
    """GELU in its tanh form (`jax.nn.gelu`'s default), in whatever dtype `x` is."""
    import numpy as np

    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def moved_numpy(x, dx=0, dy=0, mirror=False):
    """numpy: `uint8` rows of 784 mirrored left-right, then moved dx right and dy down,
    zeros uncovered."""
    import numpy as np

    img = x.reshape(-1, 28, 28)[:, :, ::-1] if mirror else x.reshape(-1, 28, 28)
    out = np.zeros_like(img)
    ys, xs = slice(max(dy, 0), 28 + min(dy, 0)), slice(max(dx, 0), 28 + min(dx, 0))
    out[:, ys, xs] = img[:, max(-dy, 0) : 28 - max(dy, 0), max(-dx, 0) : 28 - max(dx, 0)]
    return out.reshape(len(x), 784)


def numpy_reference(model, images, *, calibration=None, temperature=1.0, tta=None):
    """An export's outputs written here from the definitions, in float64 numpy: the
    forward pass of each member (GELU in its tanh form), with `tta` views (moves
    `(dx, dy, mirror)`) the log of each member's mean probability over the moved
    images, the log of the mean probability for a stack, `softmax(logits / T)`, and the
    trust flag (of the image itself) as a direct Mahalanobis distance `(f - m)' P (f - m)`
    (no whitening) plus the ink and contrast checks."""
    import numpy as np

    pixels = np.asarray(images).reshape(len(images), -1)
    x0 = pixels.astype(np.float64) / 255.0
    stacked = np.asarray(model.layers[0].bias).ndim == 2
    k = np.asarray(model.layers[0].bias).shape[0] if stacked else 1

    def log_softmax(z):
        z = z - z.max(1, keepdims=True)
        return z - np.log(np.exp(z).sum(1, keepdims=True))

    def forward(m, x):
        hidden = []
        for i, layer in enumerate(model.layers):
            w, b = np.asarray(layer.weight, np.float64), np.asarray(layer.bias, np.float64)
            w, b = (w[m], b[m]) if stacked else (w, b)
            x = x @ w.T + b
            if i < len(model.layers) - 1:
                x = numpy_gelu(x)
                hidden.append(x)
        return x, hidden

    log_probs, scores = [], []
    for m in range(k):
        x, hidden = forward(m, x0)
        if tta:
            views = [forward(m, moved_numpy(pixels, *v).astype(np.float64) / 255.0)[0] for v in tta]
            x = np.log(np.mean([np.exp(log_softmax(v)) for v in views], axis=0))
        log_probs.append(log_softmax(x))
        if calibration is not None:
            t = calibration.trust
            means = np.asarray(t.means, np.float64).reshape(k, *t.means.shape[-2:])[m]
            prec = np.asarray(t.precision, np.float64).reshape(k, *t.precision.shape[-2:])[m]
            d = np.concatenate(hidden, 1)[:, None, :] - means[None]
            scores.append(np.einsum("nch,hj,ncj->nc", d, prec, d).min(1))
    if stacked:
        logits = np.log(np.mean(np.exp(np.stack(log_probs)), axis=0))
    else:
        logits = x
    if calibration is not None:
        temperature = calibration.temperature
    z = logits / temperature
    e = np.exp(z - z.max(1, keepdims=True))
    out = {"logits": logits, "probabilities": e / e.sum(1, keepdims=True)}
    if calibration is not None:
        t, score = calibration.trust, np.mean(scores, 0)
        ink, spread = x0.mean(1), x0.std(1)
        out["trust_score"] = score
        out["unusual"] = (
            (ink < t.ink_range[0])
            | (ink > t.ink_range[1])
            | (spread < t.min_contrast)
            | (score > t.threshold)
        )
    if calibration is not None and calibration.sets is not None:
        p, q = out["probabilities"], np.asarray(calibration.sets.thresholds)
        top = np.arange(p.shape[1])[None, :] == p.argmax(axis=1)[:, None]
        out["prediction_set"] = (1 - p <= q[None, :]) | top
    return out


def assert_sets_match(got, ref, thresholds, *, tolerance=1e-5):
    """An artifact's prediction sets equal `numpy_reference`'s, but for a class whose
    `1 - p` (float64 here) is within `tolerance` of its threshold, or whose probability
    is that close to the top one, where float32 may fall on either side."""
    import numpy as np

    assert got.shape == ref["prediction_set"].shape and got.dtype == bool
    p, q = ref["probabilities"], np.asarray(thresholds)[None, :]
    near = (np.abs(1 - p - q) <= tolerance) | (p.max(axis=1, keepdims=True) - p <= tolerance)
    differ = got != ref["prediction_set"]
    assert (~differ | near).all(), np.argwhere(differ & ~near)[:5]


def calibrate_on_training_images(model, real_data, **kwargs):
    """`ef.calibrate(model, ...)` on the first 8,000 training images and the last 2,000
    (a model trained for a few steps has not learnt them apart): a calibration for the
    export tests to carry into artifacts."""
    import eqx_fmnist as ef
    from eqx_fmnist.dataset import ArrayDataset

    flat = real_data.train_images.reshape(len(real_data.train_images), -1)
    train = ArrayDataset(flat[:8000], real_data.train_labels[:8000])
    held_out = ArrayDataset(flat[-2000:], real_data.train_labels[-2000:])
    return ef.calibrate(model, train, held_out, **kwargs)


def small_config(**kw):
    """The small world's run, which a test trains unless its point needs another shape
    (and then its docstring says why): the tiny MLP (one hidden layer of 32) for 16
    steps of batch 32 at a constant learning rate, in chunks of 8 steps (an epoch of the
    `small` data set: one chunk program for the whole run); `kw` changes fields. The
    small world's members are this run's (`ef.ensemble.Seeds(2)`, `Folds`, a grid), and
    its CNN is `small_config(**SMALL_CNN)`."""
    from eqx_fmnist.config import TrainConfig

    base = dict(steps=16, batch_size=32, hidden_sizes=(32,), schedule="constant", log_every=8)
    return TrainConfig(**(base | kw))


SMALL_CNN = {"model": "cnn", "channels": (4, 8)}
"""The small world's CNN: two convolutions (4 and 8 channels) under `small_config`'s
head of 32."""


def run_config(**kw):
    """The small world's run logged every two steps, for 24: the run folders' tests stop,
    resume and checkpoint between intervals, and read the history each interval writes;
    `kw` changes fields."""
    return small_config(**({"steps": 24, "log_every": 2} | kw))


def fashion_mnist_of(dataset):
    """`dataset` (an `ArrayDataset` of flat images) as the `FashionMNIST` a run folder
    trains on: its images are both the training and the test set."""
    from eqx_fmnist.data import FashionMNIST

    images = np.asarray(dataset.images).reshape(-1, 28, 28)
    labels = np.asarray(dataset.labels).astype(np.uint8)
    return FashionMNIST(images, labels, images, labels, source=Path("synthetic"))


def real_slice(data, n_train: int = 2048, n_test: int = 500):
    """The first `n_train` training and `n_test` test images of the real `data`."""
    import dataclasses

    return dataclasses.replace(
        data,
        train_images=data.train_images[:n_train],
        train_labels=data.train_labels[:n_train],
        test_images=data.test_images[:n_test],
        test_labels=data.test_labels[:n_test],
    )


def free_local_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago. On a machine whose sandbox
    refuses sockets (the TPU machine's: errno 97) no coordinator can listen, and the test
    skips and says so."""
    import socket

    try:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]
    except OSError as e:
        pytest.skip(f"this machine refuses local sockets ({e}): no coordinator can listen")


def slurm_job() -> int:
    """A Slurm job id whose coordinator port is free here: JAX's Slurm support puts
    process 0's coordinator on port 61440 + job id % 4096 of the first node listed."""
    import random
    import socket

    free_local_port()  # skips where no socket can be made
    while True:
        job = random.randrange(10**6)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", 61440 + job % 4096))
            except OSError:
                continue
        return job


def slurm_env(job: int, rank: int, tasks: int = 2) -> dict[str, str]:
    """What `srun --ntasks=2` sets for task `rank`, set by hand on one machine."""
    return {
        "SLURM_JOB_ID": str(job),
        "SLURM_STEP_NODELIST": "127.0.0.1",
        "SLURM_NTASKS": str(tasks),
        "SLURM_PROCID": str(rank),
        "SLURM_LOCALID": str(rank),
    }


# --------------------------------------------------------------------------- workers
# A test that needs other devices or other processes runs a worker script
# (`parallel_worker.py`, `members_worker.py`) as `python WORKER OUT ARGS...`: it writes
# its arrays and an `info` dict to `OUT` (`.npz`).


def child_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment with `env` added, for a process the test starts; the
    flags of `env`'s `XLA_FLAGS` (more devices) added to this process's (the suite's
    cheap settings: `tests/conftest.py`), not in their place."""
    import os

    merged = {**os.environ, **(env or {})}
    if (env or {}).get("XLA_FLAGS") and os.environ.get("XLA_FLAGS"):
        merged["XLA_FLAGS"] = f"{os.environ['XLA_FLAGS']} {env['XLA_FLAGS']}"  # type: ignore[index]
    return merged


def start_worker(script: Path, *args, env=None):
    """The worker `script` started with `args` (and `env` added to this environment)."""
    import subprocess
    import sys

    return subprocess.Popen(
        [sys.executable, str(script), *map(str, args)],
        env=child_env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish_worker(proc, timeout: float = 300) -> str:
    """Wait for a worker (killed after `timeout`); it must exit 0. Its stdout."""
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        proc.kill()
    assert proc.returncode == 0, err[-3000:]
    return out


def load_worker_result(path: Path) -> tuple[list[np.ndarray], dict]:
    """What a worker wrote: its arrays in order, and its `info` dict."""
    import ast

    data = np.load(path)
    return [data[k] for k in data.files if k != "info"], ast.literal_eval(str(data["info"]))


def two_processes(script: Path, outs: list[Path], *args, beside=None):
    """The worker run as two processes under `jax.distributed` (a local coordinator;
    `args` before the coordinator's three), both waited for: a dead peer makes the other
    time out, then both die. `beside()`, if given, runs here while they do (a test's
    reference); its result is returned."""
    port = free_local_port()
    procs = [start_worker(script, outs[i], *args, f"127.0.0.1:{port}", i, 2) for i in range(2)]
    try:
        made = None if beside is None else beside()
        for p in procs:
            finish_worker(p, timeout=240)
    finally:
        for p in procs:
            p.kill()
    return made


def join_processes(coordinator: str, process_id: int, num_processes: int) -> None:
    """In a worker: join the other processes under `jax.distributed` (CPU collectives
    through gloo), before any device is used."""
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=coordinator,
        num_processes=num_processes,
        process_id=process_id,
        initialization_timeout=60,
    )


def recorded(folder: Path, files: dict[str, str], by: str = "train") -> Path:
    """`folder` with `files` (name: text) written as a command `by` writes them: claimed
    in the folder's record, written, sealed (a run's files, without training one)."""
    from eqx_fmnist.runs.record import Record

    folder.mkdir(parents=True, exist_ok=True)
    record = Record.read(folder)
    record.claim(list(files), by)
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    record.seal()
    return folder
