"""The model as every artifact holds it: float32 numpy arrays, one set per member, and
the trust flag rewritten as a whitening matrix, so that ONNX, JavaScript and StableHLO
compute it with a matmul and a distance (no float64, no matrix inverse at run time).

The trust score of [`Trust`][eqx_fmnist.trust.Trust] is the smallest
`(f - m_c)' P (f - m_c)` over the class means `m_c`, for the hidden activations `f`.
With `P = L L'` (a Cholesky factor), that is `|f L - m_c L|^2`: an artifact multiplies
`f` by `whiten = L` and measures plain squared distances to `centres = m L`.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from ..augment import Move
from ..calibration import Calibration
from ..conformal import prediction_sets
from ..data import IMAGE_SIZE
from ..evaluation import numpy_softmax
from ..model import MLP, Model, num_members
from ..trust import Trust
from ..views import move_images
from .manifest import ExportError


@dataclasses.dataclass(frozen=True)
class PortableTrust:
    """The trust flag in the form artifacts compute it.

    **Fields:** `whiten` (`(members, hidden, hidden)`), `centres` (`(members, 10,
    hidden)`), `threshold` (on the members' mean score), `ink_sum_range` (the training
    images' smallest and largest sum of the 784 pixel values, 0-255 each: whole numbers,
    so every artifact compares them exactly), `min_contrast` (the pixels' standard
    deviation, on the 0-1 scale, below which an image is flagged as flat).
    """

    whiten: np.ndarray
    centres: np.ndarray
    threshold: float
    ink_sum_range: tuple[int, int]
    min_contrast: float


@dataclasses.dataclass(frozen=True)
class Portable:
    """A model (or an ensemble) as float32 arrays.

    **Fields:** `layers` (per member, per layer, `(weight (out, in), bias (out,))`, as
    PyTorch's `nn.Linear` holds them), `ensemble` (whether the model was a stack of
    members: its logits are then the log of the mean probability), `temperature` (the
    calibrated temperature the probabilities are divided by), `trust` (a
    [`PortableTrust`][eqx_fmnist.export.portable.PortableTrust], or `None` for an uncalibrated
    run), `set_thresholds` (the conformal prediction sets' threshold per class on
    `1 - p`, float32 `(10,)`, for a calibration that has them; else `None`),
    `set_coverage` (what they promise) and `views` (test-time augmentation: int32
    `(views, 784)` from [`view_indices`][eqx_fmnist.export.portable.view_indices], each
    model's probability averaged over them; `None`: the image alone).
    """

    layers: list[list[tuple[np.ndarray, np.ndarray]]]
    ensemble: bool
    temperature: float
    trust: PortableTrust | None
    set_thresholds: np.ndarray | None = None
    set_coverage: float | None = None
    views: np.ndarray | None = None

    @property
    def num_members(self) -> int:
        return len(self.layers)

    @property
    def sizes(self) -> list[int]:
        """`[784, hidden..., 10]`."""
        first = self.layers[0]
        return [first[0][0].shape[1]] + [w.shape[0] for w, _ in first]


def portable_trust(trust: Trust, members: int) -> PortableTrust:
    """A [`Trust`][eqx_fmnist.trust.Trust] as whitening matrices and centres."""
    means = np.asarray(trust.means, np.float64).reshape(members, *trust.means.shape[-2:])
    precision = np.asarray(trust.precision, np.float64).reshape(
        members, *trust.precision.shape[-2:]
    )
    whiten = np.stack([np.linalg.cholesky(p) for p in precision])  # P = L L'
    centres = np.einsum("kch,khj->kcj", means, whiten)
    low, high = trust.ink_range
    scale = IMAGE_SIZE * 255.0
    return PortableTrust(
        whiten.astype(np.float32),
        centres.astype(np.float32),
        float(trust.threshold),
        (round(low * scale), round(high * scale)),
        float(trust.min_contrast),
    )


BLANK = IMAGE_SIZE
"""The index a view's table gives an uncovered pixel: the zero after the 784 pixels."""


def view_indices(views: tuple[Move, ...]) -> np.ndarray:
    """Each of test-time augmentation's `views` as a gather: int32 `(views, 784)`, pixel
    `i` of a moved image being pixel `table[i]` of the image with a zero appended (so
    `BLANK`, 784, for a pixel the move uncovers). A mirror and a move are index
    permutations, which every artifact applies with one gather."""
    source = jnp.arange(1, IMAGE_SIZE + 1, dtype=jnp.int32)[None]  # 0: what a move zeroes
    rows = [np.asarray(move_images(source, dx=dx, dy=dy, mirror=m))[0] for dx, dy, m in views]
    table = np.stack(rows).astype(np.int32) - 1
    return np.where(table < 0, BLANK, table).astype(np.int32)


def to_portable(
    models: Model,
    *,
    calibration: Calibration | None = None,
    temperature: float = 1.0,
    tta: tuple[Move, ...] | None = None,
) -> Portable:
    """The float32 arrays of `models` (one model or a stack) and, when given, of its
    calibration (whose temperature then replaces `temperature`, and whose views
    `tta`, which may then only repeat them; `()` asks for none).

    **Raises:**

    `ExportError` for a model whose activation is not `jax.nn.gelu` (the tanh form every
    artifact writes); `ViewsError` for `tta` other than the views the calibration was
    fitted on.
    """
    if isinstance(models, MLP) and models.activation is not jax.nn.gelu:
        raise ExportError(
            f"exports write GELU (tanh form, jax.nn.gelu), but the model's activation is "
            f"{getattr(models.activation, '__name__', models.activation)!r}."
        )
    if calibration is not None:
        temperature = calibration.temperature
        tta = calibration.views(tta)
    k = num_members(models)
    # The MLP's layers, which the formats other than StableHLO write (another model
    # has none: they refuse it).
    mlp_layers = models.layers if isinstance(models, MLP) else ()
    arrays = [
        (np.asarray(layer.weight, np.float32), np.asarray(layer.bias, np.float32))
        for layer in mlp_layers
    ]
    layers = [[(w, b) if k is None else (w[m], b[m]) for w, b in arrays] for m in range(k or 1)]
    trust = None if calibration is None else portable_trust(calibration.trust, k or 1)
    sets = None if calibration is None or calibration.sets is None else calibration.sets
    thresholds = None if sets is None else np.asarray(sets.thresholds, np.float32)
    coverage = None if sets is None else sets.coverage
    return Portable(
        layers,
        k is not None,
        float(temperature),
        trust,
        thresholds,
        coverage,
        view_indices(tta) if tta else None,
    )


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """GELU in its tanh form, `jax.nn.gelu`'s default, in numpy."""
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def _log_mean_prob(logits: np.ndarray) -> np.ndarray:
    """The log of the mean over the leading axis of `softmax(logits)`."""
    z = logits - logits.max(-1, keepdims=True)
    lp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    top = lp.max(0)
    return top + np.log(np.exp(lp - top).mean(0))


def numpy_serve(portable: Portable, images: np.ndarray) -> dict[str, np.ndarray]:
    """Every output of an artifact, computed from `portable` with numpy alone (float64):
    `logits`, `probabilities` and, for a calibrated model, `trust_score` and `unusual`
    (and `prediction_set` when the calibration has sets). With `views`, each member's
    probability is its mean over them (the trust flag reads the image itself).

    What an artifact must reproduce; [`export_model`][eqx_fmnist.export.check.export_model]
    checks the web page's embedded arrays with it when `node` is not installed.
    """
    pixels = np.asarray(images, np.uint8).reshape(len(images), IMAGE_SIZE)
    x0 = pixels.astype(np.float64) / 255.0
    padded = np.concatenate([x0, np.zeros((len(x0), 1))], axis=1)  # BLANK: the zero

    def forward(member, x):
        hidden = []
        for i, (w, b) in enumerate(member):
            x = x @ w.T.astype(np.float64) + b
            if i < len(member) - 1:
                x = gelu_tanh(x)
                hidden.append(x)
        return x, hidden

    log_probs = []
    scores = []
    x = x0
    for m, member in enumerate(portable.layers):
        x, hidden = forward(member, x0)
        views = (
            [x]
            if portable.views is None
            else [forward(member, padded[:, v])[0] for v in portable.views]
        )
        log_probs.append(_log_mean_prob(np.stack(views)))
        if portable.trust is not None:  # of the image itself, not of its views
            g = np.concatenate(hidden, 1) @ portable.trust.whiten[m].astype(np.float64)
            d = ((g[:, None, :] - portable.trust.centres[m][None]) ** 2).sum(-1)
            scores.append(d.min(1))
    if portable.ensemble:
        logits = _log_mean_prob(np.stack(log_probs))
    else:  # one model: its own logits, or the log of its mean probability over the views
        logits = x if portable.views is None else log_probs[0]
    out = {"logits": logits, "probabilities": numpy_softmax(logits, portable.temperature)}
    if portable.trust is not None:
        t = portable.trust
        score = np.mean(scores, 0)
        sums = pixels.sum(1, dtype=np.int64)
        flat = x0.std(1) < t.min_contrast
        ink = (sums < t.ink_sum_range[0]) | (sums > t.ink_sum_range[1])
        out |= {"trust_score": score, "unusual": ink | flat | (score > t.threshold)}
    if portable.set_thresholds is not None:
        out["prediction_set"] = prediction_sets(out["probabilities"], portable.set_thresholds)
    return out
