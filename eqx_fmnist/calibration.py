"""How far to trust a prediction: calibration metrics, temperature scaling, and a flag for
inputs unlike the training data.

- [`calibration_metrics`][eqx_fmnist.calibration.calibration_metrics] over every example:
  negative log-likelihood, Brier score, expected calibration error (ECE) over
  `ECE_BINS = 15` equal-width confidence bins, and the bins themselves for a reliability
  diagram.
- [`fit_temperature`][eqx_fmnist.calibration.fit_temperature]: the one scalar `T` that
  minimises the NLL of `softmax(logits / T)` on held-out examples (never the test set).
- [`calibrate`][eqx_fmnist.calibration.calibrate]: the step after training, the
  temperature and the trust flag ([`eqx_fmnist.trust`][eqx_fmnist.trust]: a Mahalanobis
  distance on the hidden layers' activations, with ink and contrast) fitted together.

A [`Calibration`][eqx_fmnist.calibration.Calibration] holds the temperature and the
detector, and is saved beside a run's checkpoint (`calibration.safetensors`).
"""

import dataclasses
import json
import os
from collections.abc import Sequence
from pathlib import Path

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int, Integer

from .checks import COVERAGE, door
from .conformal import ConformalSets, fit_sets
from .dataset import ArrayDataset
from .evaluation import padded_logits, scaled_softmax
from .fileio import atomic_write, digest
from .model import Model
from .precision import FLOAT32, Policy
from .trust import AS_THEY_ARE, FLAG_RATE, Move, Trust, fit_trust
from .views import tta_name

ECE_BINS = 15
"""Equal-width bins of the top-class probability, `[0, 1/15), ..., [14/15, 1]`."""
CALIBRATION_FILE = "calibration.safetensors"


@dataclasses.dataclass(frozen=True)
class CalibrationResult:
    """Calibration of the probabilities over `count` examples.

    **Fields:** `nll` (mean negative log-likelihood), `brier` (mean over examples of
    the squared error summed over classes, 0 to 2), `ece` (expected calibration error:
    the bins' `|accuracy - mean confidence|` weighted by their share of examples),
    `accuracy`, `count`, `temperature` (the one applied), and per bin `bin_count`,
    `bin_accuracy`, `bin_confidence` (NaN for an empty bin).
    """

    nll: float
    brier: float
    ece: float
    accuracy: float
    count: int
    temperature: float
    bin_count: np.ndarray
    bin_accuracy: np.ndarray
    bin_confidence: np.ndarray


def calibration_metrics(
    logits: Float[Array | np.ndarray, "n classes"],
    labels: Integer[Array | np.ndarray, " n"],
    mask: Bool[Array | np.ndarray, " n"] | None = None,
    *,
    temperature: float = 1.0,
) -> CalibrationResult:
    """Calibration of `softmax(logits / temperature)` against `labels`, over the examples
    `mask` keeps (all by default); computed on the host, in float64, from the logits an
    evaluation already read back (no program of its own)."""
    z = np.asarray(logits, np.float64) / float(temperature)
    y = np.asarray(labels)
    if mask is not None:
        z, y = z[np.asarray(mask)], y[np.asarray(mask)]
    count = len(y)
    n = max(count, 1)
    log_p = z - z.max(-1, keepdims=True)
    log_p -= np.log(np.exp(log_p).sum(-1, keepdims=True))
    p = np.exp(log_p)
    nll = -log_p[np.arange(count), y].sum() / n
    brier = ((p - np.eye(z.shape[-1])[y]) ** 2).sum() / n
    confidence = p.max(-1)
    correct = p.argmax(-1) == y
    bins = np.minimum((confidence * ECE_BINS).astype(int), ECE_BINS - 1)
    b_count = np.bincount(bins, minlength=ECE_BINS)
    with np.errstate(invalid="ignore", divide="ignore"):
        b_acc = np.bincount(bins, correct, minlength=ECE_BINS) / b_count
        b_mean = np.bincount(bins, confidence, minlength=ECE_BINS) / b_count
    ece = float(np.nansum(b_count * np.abs(b_acc - b_mean)) / n)
    accuracy = float(correct.sum() / n)
    return CalibrationResult(
        float(nll), float(brier), ece, accuracy, count, float(temperature), b_count, b_acc, b_mean
    )


def dataset_logits(
    model: Model,
    dataset: ArrayDataset,
    *,
    policy: Policy = FLOAT32,
    batch_size: int = 1000,
    tta: tuple[Move, ...] | None = None,
) -> tuple[Float[Array, "padded classes"], Int[Array, " padded"], Bool[Array, " padded"]]:
    """`(logits, labels, mask)` of every example, padded to whole batches (with `tta`
    views: the log of the mean probability over them)."""
    logits, mask = padded_logits(model, dataset.images, policy, batch_size, None, tta)
    padding = jnp.zeros(logits.shape[0] - len(dataset), dataset.labels.dtype)
    return logits, jnp.concatenate([dataset.labels, padding]), mask


def evaluate_calibration(
    model: Model,
    dataset: ArrayDataset,
    *,
    policy: Policy = FLOAT32,
    temperature: float = 1.0,
    batch_size: int = 1000,
    tta: tuple[Move, ...] | None = None,
) -> CalibrationResult:
    """[`calibration_metrics`][eqx_fmnist.calibration.calibration_metrics] of `model`
    over every example of `dataset` (with `tta`, of its test-time-augmented outputs)."""
    logits, labels, mask = dataset_logits(
        model, dataset, policy=policy, batch_size=batch_size, tta=tta
    )
    return calibration_metrics(logits, labels, mask, temperature=temperature)


def fit_temperature(
    logits: Float[Array | np.ndarray, "n classes"],
    labels: Integer[Array | np.ndarray, " n"],
    mask: Bool[Array | np.ndarray, " n"] | None = None,
) -> float:
    """The temperature `T` minimising the mean NLL of `softmax(logits / T)`.

    The NLL is convex in `1 / T`, so Newton's method on `1 / T` (in float64) finds the
    minimum in a few steps.

    **Raises:**

    `ValueError` for fewer than two examples.
    """
    z = np.asarray(logits, np.float64)
    y = np.asarray(labels)
    if mask is not None:
        z, y = z[np.asarray(mask)], y[np.asarray(mask)]
    if len(z) < 2:
        raise ValueError(f"fitting a temperature needs held-out examples, but got {len(z)}.")
    zy = z[np.arange(len(z)), y]
    beta = 1.0
    for _ in range(100):
        s = beta * z
        p = np.exp(s - s.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        mean_z = (p * z).sum(1)
        grad = np.mean(mean_z - zy)
        hess = np.mean((p * z * z).sum(1) - mean_z**2)
        step = grad / max(hess, 1e-12)
        beta = float(np.clip(beta - step, 1e-3, 1e3))
        if abs(step) < 1e-10 * max(beta, 1.0):
            break
    return 1.0 / beta


@door
def calibrate(
    model: Model,
    train: ArrayDataset,
    held_out: ArrayDataset,
    *,
    policy: Policy = FLOAT32,
    batch_size: int = 1000,
    moves: tuple[Move, ...] = AS_THEY_ARE,
    coverage: float = COVERAGE,
    per_class: bool = False,
    tta: tuple[Move, ...] | None = None,
) -> "Calibration":
    """Calibrate a trained model, or an ensemble: the step after training.

    The temperature is fitted on `held_out` to the model's logits (an ensemble's: the
    log of its mean probability); the conformal prediction sets' threshold on the same
    images' temperature-scaled probabilities (the outputs the sets are made from); the
    trust flag's means and covariance on `train` (for an ensemble, each member's on its
    own activations) and its threshold on `held_out`.

    The temperature is one number fitted on the images the sets' threshold is then
    fitted on: strictly, split-conformal coverage assumes the score was fixed before
    the held-out images were seen. With one parameter and thousands of images the
    effect is far below the spread of coverage over calibration splits (measured in
    `tests/test_conformal.py`).

    **Arguments:**

    - `model`: the trained model, or a stack of members.
    - `train`: the images it trained on.
    - `held_out`: images it did not train on (never the test set), e.g. the
        `calibration` split of [`split_data`][eqx_fmnist.dataset.split_data].
    - `policy`: the precision policy of the forward pass. Defaults to float32.
    - `batch_size`: images per compiled batch. Defaults to `1000`.
    - `moves`: the moves of the training images the trust flag's means are fitted on
        (see [`fit_trust`][eqx_fmnist.trust.fit_trust]). Defaults to the images
        as they are.
    - `coverage`: the prediction sets' target share of new images whose set holds the
        true class (see [`fit_sets`][eqx_fmnist.conformal.fit_sets]). Defaults to `0.9`.
    - `per_class`: one set threshold per class, so that each class is covered on its
        own. Defaults to `False`.
    - `tta`: test-time augmentation's views (see
        [`predict_logits`][eqx_fmnist.evaluation.predict_logits]): the temperature and
        the sets are then fitted on the averaged outputs they will be applied to, and
        the calibration records the views. Defaults to `None`.

    **Returns:**

    A [`Calibration`][eqx_fmnist.calibration.Calibration].

    !!! example

        ```python
        splits = ef.split_data(ef.load_fashion_mnist(), calibration_size=5000)
        result = ef.fit(config, splits)
        calibration = ef.calibrate(result.model, splits.train, splits.calibration)
        ```
    """
    logits, labels, mask = dataset_logits(
        model, held_out, policy=policy, batch_size=batch_size, tta=tta
    )
    temperature = fit_temperature(logits, labels, mask)
    n = len(held_out)
    probs = np.asarray(scaled_softmax(logits, temperature))[:n]
    sets = fit_sets(probs, np.asarray(labels[:n]), coverage=coverage, per_class=per_class)
    trust = fit_trust(model, train, held_out, policy=policy, moves=moves)
    return Calibration(temperature, trust, n, sets, tuple(tta) if tta else None)


def calibration_report(
    logits: Float[Array | np.ndarray, "n classes"],
    labels: Integer[Array | np.ndarray, " n"],
    calibration: "Calibration | None" = None,
) -> dict[str, CalibrationResult]:
    """The metrics of `logits` against `labels`: `raw` and, with a `calibration`,
    `calibrated` (at its temperature); what a run's summary records and its reliability
    diagram draws ([`reliability_figure`][eqx_fmnist.runs.report.reliability_figure])."""
    logits = np.asarray(logits)
    labels = np.asarray(labels)
    results = {"raw": calibration_metrics(logits, labels)}
    if calibration is not None:
        t = calibration.temperature
        results["calibrated"] = calibration_metrics(logits, labels, temperature=t)
    return results


# --------------------------------------------------------------------------- stored


class ViewsError(ValueError):
    """Views other than those a calibration was fitted on."""


@dataclasses.dataclass(frozen=True)
class Calibration:
    """What a run learns about its own probabilities on held-out images: the temperature,
    the trust detector, how many images it was fitted on, and the conformal prediction
    sets (`None` in a calibration saved before they existed), and the test-time
    augmentation views the temperature and the sets were fitted on (`None`: none; the
    outputs they apply to must use the same). A calibration read back from a run folder
    also names the checkpoint it was fitted for (`checkpoint`: the SHA-256 of its
    payload; `None` before files recorded it, or before it is saved)."""

    temperature: float
    trust: Trust
    held_out: int
    sets: ConformalSets | None = None
    tta: tuple[Move, ...] | None = None
    checkpoint: str | None = dataclasses.field(default=None, compare=False)

    def views(self, tta: Sequence[Move] | None = None) -> tuple[Move, ...] | None:
        """The views to average over under this calibration: its own (`self.tta`, the
        outputs its temperature and sets were fitted on). `tta`, when given (`()` for
        the image alone), must repeat them.

        **Raises:**

        `ViewsError` (a `ValueError`) naming both, for other views: the library's one
        rule for them (answers, exports, a run's `--tta`).
        """
        if tta is not None and tuple(tta) != tuple(self.tta or ()):
            raise ViewsError(
                f"the calibration was fitted with tta {tta_name(self.tta)}, not "
                f"{tta_name(tuple(tta))}: its temperature and prediction sets hold only for "
                "those views; use them, or calibrate again with these."
            )
        return self.tta

    def save(self, path: str | os.PathLike, *, checkpoint: str | None = None) -> Path:
        """Write a safetensors file (atomically); the numbers are in its metadata, with
        `checkpoint`, the payload SHA-256 of the checkpoint it calibrates (a run folder
        records it, so that a calibration left by another run is never used)."""
        from safetensors.numpy import save

        record = self.to_dict()
        if checkpoint is not None:
            record["checkpoint_sha256"] = checkpoint
        arrays = {"means": self.trust.means, "precision": self.trust.precision}
        record["content_sha256"] = _content_digest(record, arrays)
        meta = {k: json.dumps(v) for k, v in record.items()}
        with atomic_write(path) as f:
            f.write(save(arrays, metadata=meta))
        return Path(path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Calibration":
        """Read what [`save`][eqx_fmnist.calibration.Calibration.save] wrote.

        **Raises:**

        `ValueError` naming the file when it cannot be read.
        """
        from safetensors import safe_open

        try:
            with safe_open(str(path), framework="numpy") as f:
                meta = {k: json.loads(v) for k, v in f.metadata().items()}
                arrays = {"means": f.get_tensor("means"), "precision": f.get_tensor("precision")}
                written = meta.pop("content_sha256", None)
                if written is not None and written != _content_digest(meta, arrays):
                    raise DamagedError(
                        f"the calibration {path} is damaged (its SHA-256 differs from the "
                        "one written): delete it and calibrate again (--calibrate)."
                    )
                trust = Trust(
                    arrays["means"],
                    arrays["precision"],
                    float(meta["threshold"]),
                    tuple(meta["ink_range"]),
                    float(meta["min_contrast"]),
                )
                sets = ConformalSets.from_dict(meta["sets"]) if "sets" in meta else None
                tta = (
                    tuple((int(x), int(y), bool(m)) for x, y, m in meta["tta"])
                    if meta.get("tta")
                    else None
                )
                owner = meta.get("checkpoint_sha256")
                if owner is not None and not isinstance(owner, str):
                    raise ValueError(f"`checkpoint_sha256` is {owner!r}, not a checksum")
                temperature = float(meta["temperature"])
                held_out = int(meta["held_out"])
                return cls(temperature, trust, held_out, sets, tta, owner)
        except DamagedError:
            raise
        except Exception as e:  # safetensors raises several kinds
            raise ValueError(f"cannot read the calibration {path}: {e}") from None

    def to_dict(self) -> dict:
        return {
            "temperature": self.temperature,
            "threshold": self.trust.threshold,
            "ink_range": list(self.trust.ink_range),
            "min_contrast": self.trust.min_contrast,
            "held_out": self.held_out,
            "flag_rate": FLAG_RATE,
            "tta": [list(v) for v in self.tta or ()],
            **({} if self.sets is None else {"sets": self.sets.to_dict()}),
        }


class DamagedError(ValueError):
    """A file the library wrote holds other bytes than it wrote."""


def _content_digest(record: dict, arrays: dict[str, np.ndarray]) -> str:
    """The SHA-256 a calibration file records of its numbers and arrays (their dtype,
    shape and bytes): one changed bit anywhere is told apart."""
    shapes = {k: [str(a.dtype), list(a.shape)] for k, a in arrays.items()}
    blobs = (np.ascontiguousarray(arrays[k]).tobytes() for k in sorted(arrays))
    return digest(record | {"arrays": shapes}, *blobs)
