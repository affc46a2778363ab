"""How far to trust a prediction: calibration metrics, temperature scaling, and a flag for
inputs unlike the training data.

- [`calibration_metrics`][eqx_fmnist.calibration.calibration_metrics] over every example:
  negative log-likelihood, Brier score, expected calibration error (ECE) over
  `ECE_BINS = 15` equal-width confidence bins, and the bins themselves for a reliability
  diagram.
- [`fit_temperature`][eqx_fmnist.calibration.fit_temperature]: the one scalar `T` that
  minimises the NLL of `softmax(logits / T)` on held-out examples (never the test set).
- [`fit_trust`][eqx_fmnist.calibration.fit_trust]: a Mahalanobis distance on the hidden
  layers' activations (class means and one shared covariance fitted on training images,
  optionally also moved and mirrored: [`trust_moves`][eqx_fmnist.calibration.trust_moves]),
  with a threshold that flags `FLAG_RATE = 5%` of held-out real images, plus the amount
  of ink and contrast: an image darker or brighter on average than every training image,
  or flatter than all of them, is flagged.

A [`Calibration`][eqx_fmnist.calibration.Calibration] holds the temperature and the
detector, and is saved beside a run's checkpoint (`calibration.safetensors`).
"""

import dataclasses
import json
import os
import typing
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int, Integer, Shaped

from .augment import move_images
from .dataset import ArrayDataset, normalize, pad_to_batches
from .evaluation import _logits
from .fileio import atomic_write
from .model import MLP, num_members, per_member
from .plots import plot_reliability
from .precision import FLOAT32, Policy

ECE_BINS = 15
"""Equal-width bins of the top-class probability, `[0, 1/15), ..., [14/15, 1]`."""
FLAG_RATE = 0.05
"""The share of held-out real images the trust threshold flags."""
CALIBRATION_FILE = "calibration.safetensors"

Move = tuple[int, int, bool]
"""A fixed move of an image, `(dx, dy, mirror)`: mirrored left-right if `mirror`, then
moved `dx` pixels right and `dy` down (see
[`move_images`][eqx_fmnist.augment.move_images])."""
AS_THEY_ARE: tuple[Move, ...] = ((0, 0, False),)
"""The training images as they are: the default of
[`fit_trust`][eqx_fmnist.calibration.fit_trust]."""


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
    logits: Float[Array, "n classes"],
    labels: Int[Array, " n"],
    mask: Bool[Array, " n"] | None = None,
    *,
    temperature: float = 1.0,
) -> CalibrationResult:
    """Calibration of `softmax(logits / temperature)` against `labels`, over the examples
    `mask` keeps (all by default)."""
    mask = jnp.ones(labels.shape, bool) if mask is None else mask
    stats = jax.device_get(_stats(logits, labels, mask, jnp.float32(temperature)))
    nll, brier, acc, count, b_count, b_correct, b_conf = stats
    with np.errstate(invalid="ignore", divide="ignore"):
        b_acc, b_mean = b_correct / b_count, b_conf / b_count
    ece = float(np.nansum(b_count * np.abs(b_acc - b_mean)) / max(count, 1))
    return CalibrationResult(
        float(nll), float(brier), ece, float(acc), int(count), float(temperature),
        b_count.astype(int), b_acc, b_mean,
    )  # fmt: skip


@jax.jit
def _stats(logits, labels, mask, temperature):
    w = mask.astype(jnp.float32)
    n = jnp.maximum(w.sum(), 1.0)
    log_p = jax.nn.log_softmax(logits.astype(jnp.float32) / temperature, axis=-1)
    p = jnp.exp(log_p)
    onehot = jax.nn.one_hot(labels, logits.shape[-1], dtype=jnp.float32)
    nll = -(jnp.take_along_axis(log_p, labels[:, None], axis=-1)[:, 0] * w).sum() / n
    brier = (((p - onehot) ** 2).sum(-1) * w).sum() / n
    confidence, predicted = p.max(-1), p.argmax(-1)
    correct = (predicted == labels).astype(jnp.float32)
    bins = jnp.minimum((confidence * ECE_BINS).astype(jnp.int32), ECE_BINS - 1)
    per_bin = jax.ops.segment_sum(
        jnp.stack([w, correct * w, confidence * w], axis=-1), bins, num_segments=ECE_BINS
    )
    return nll, brier, (correct * w).sum() / n, w.sum(), *per_bin.T


def dataset_logits(
    model: MLP, dataset: ArrayDataset, *, policy: Policy = FLOAT32, batch_size: int = 1000
) -> tuple[Float[Array, "padded classes"], Int[Array, " padded"], Bool[Array, " padded"]]:
    """`(logits, labels, mask)` of every example, padded to whole batches."""
    logits, mask = _logits(model, dataset.images, policy, batch_size)
    padding = jnp.zeros(logits.shape[0] - len(dataset), dataset.labels.dtype)
    return logits, jnp.concatenate([dataset.labels, padding]), mask


def evaluate_calibration(
    model: MLP,
    dataset: ArrayDataset,
    *,
    policy: Policy = FLOAT32,
    temperature: float = 1.0,
    batch_size: int = 1000,
) -> CalibrationResult:
    """[`calibration_metrics`][eqx_fmnist.calibration.calibration_metrics] of `model`
    over every example of `dataset`."""
    logits, labels, mask = dataset_logits(model, dataset, policy=policy, batch_size=batch_size)
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
    zy, beta = z[np.arange(len(z)), y], 1.0
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


# --------------------------------------------------------------------------- trust


@eqx.filter_jit
def _features(model: MLP, images: Shaped[Array, "n 784"], policy: Policy, batch_size: int):
    def one(m):
        batches, _ = pad_to_batches(images, batch_size)
        forward = jax.vmap(lambda x: jnp.concatenate(m.hidden(normalize(x), policy=policy)))
        f = jax.lax.map(forward, batches)
        return f.reshape(-1, f.shape[-1])[: images.shape[0]].astype(jnp.float32)

    f = per_member(one, model)
    return f[0] if num_members(model) is None else f


def features(
    model: MLP, images: Shaped[Array, "n 784"], *, policy: Policy = FLOAT32, batch_size: int = 1000
) -> Float[np.ndarray, "*members n hidden"]:
    """Every hidden layer's activations for every image, side by side (float32 numpy):
    what the trust detector measures distances on. For a stack of members, one such
    array per member (a leading axis)."""
    return np.asarray(_features(model, jnp.asarray(images), policy, batch_size))


def ink(images: Shaped[Array | np.ndarray, "n 784"]) -> Float[np.ndarray, " n"]:
    """Each image's mean pixel value, 0 (black) to 1 (white)."""
    return np.asarray(images, np.float64).reshape(len(images), -1).mean(1) / 255.0


def contrast(images: Shaped[Array | np.ndarray, "n 784"]) -> Float[np.ndarray, " n"]:
    """Each image's standard deviation of pixel values, 0 (one flat grey) to 0.5."""
    return np.asarray(images, np.float64).reshape(len(images), -1).std(1) / 255.0


def _with_members(x: np.ndarray, ndim: int) -> np.ndarray:
    """`x` with a leading member axis (one model is a stack of one)."""
    return x if x.ndim == ndim + 1 else x[None]


@dataclasses.dataclass(frozen=True)
class Trust:
    """A detector of inputs unlike the training data.

    An image is flagged when its **ink** (mean pixel value) is outside the range of the
    training images', or its **contrast** (the pixels' standard deviation) is below
    theirs (an empty, a filled or a flat grey frame), or when its **score** exceeds
    `threshold`. The score is the smallest squared Mahalanobis distance from the image's
    hidden-layer activations to a class mean (one per class, or per class and move),
    with one covariance shared by the classes (both fitted on training images); the threshold flags `FLAG_RATE` of real held-out
    images. Scores on the logits alone cannot do this: noise gets confident softmax
    outputs, and its logits look like a real image's.

    For an ensemble, `means` and `precision` have a leading member axis (each member's
    own, on its own activations) and the score is the mean of the members' scores.
    """

    means: np.ndarray
    precision: np.ndarray
    threshold: float
    ink_range: tuple[float, float]
    min_contrast: float

    def scores(self, feats: Float[np.ndarray, "*members n hidden"]) -> Float[np.ndarray, " n"]:
        """The smallest squared Mahalanobis distance of each row to a class mean (for
        members, its mean over the members)."""
        means, precision = _with_members(self.means, 2), _with_members(self.precision, 2)
        feats = _with_members(np.asarray(feats, np.float64), 2)
        total = np.zeros(feats.shape[1])
        for f, m, p in zip(feats, means, precision, strict=True):
            # (f - m)' P (f - m) = f'Pf - 2 f'Pm + m'Pm, for every row and class at once.
            fp = f @ p
            d = (fp * f).sum(1)[:, None] - 2 * fp @ m.T + np.einsum("ch,hk,ck->c", m, p, m)
            total = total + d.min(axis=1)
        return total / len(feats)

    def flags(
        self, feats: Float[np.ndarray, "*members n hidden"], images: Shaped[np.ndarray, "n 784"]
    ) -> Bool[np.ndarray, " n"]:
        """`True` for each image that looks unlike the training data."""
        low, high = self.ink_range
        amount, flat = ink(images), contrast(images) < self.min_contrast
        return (amount < low) | (amount > high) | flat | (self.scores(feats) > self.threshold)


@typing.runtime_checkable
class Moves(typing.Protocol):
    """Anything that says how far training moved images and whether it mirrored them:
    an [`Augmentation`][eqx_fmnist.augment.Augmentation] or a `TrainConfig`."""

    shift: int
    mirror: bool


def trust_moves(augmentation: Moves) -> tuple[Move, ...]:
    """The images as they are and the largest moves a training step makes: the mirror
    (if `augmentation.mirror`) and `augmentation.shift` pixels along each axis (if any),
    for an [`Augmentation`][eqx_fmnist.augment.Augmentation] or the `TrainConfig` that
    asks for one.
    Pass them to [`fit_trust`][eqx_fmnist.calibration.fit_trust] for a flag that accepts
    mirrored and moved pictures, at the price of catching fewer unlike ones (see the
    trust tutorial's measured table)."""
    moves = list(AS_THEY_ARE) + [(0, 0, True)] * augmentation.mirror
    s = augmentation.shift
    moves += [(s, 0, False), (-s, 0, False), (0, s, False), (0, -s, False)] if s else []
    return tuple(moves)


def fit_trust(
    model: MLP,
    train: ArrayDataset,
    held_out: ArrayDataset,
    *,
    policy: Policy = FLOAT32,
    rate: float = FLAG_RATE,
    moves: tuple[Move, ...] = AS_THEY_ARE,
) -> Trust:
    """Fit the class means and shared covariance of the hidden activations (each
    member's, for a stack) and the ink range on `train`, and the threshold that flags
    `rate` of `held_out` (real images the model did not train on).

    With more than one of `moves`, the training images are moved each way in turn
    ([`trust_moves`][eqx_fmnist.calibration.trust_moves] gives the training
    augmentation's): each move of each class has its own mean (`len(moves) * 10` of
    them) and the covariance pools the residuals of all of them. The threshold is
    still fitted on `held_out` as it is.
    """
    if not moves or len(set(moves)) != len(moves):
        raise ValueError(f"moves must be distinct (dx, dy, mirror) triples, got {moves!r}")
    y = np.asarray(train.labels)
    classes = int(y.max()) + 1
    sums: list[list[np.ndarray]] = []  # per member: the class means of each move
    scatter: list[np.ndarray] = []
    for dx, dy, mirror in moves:
        images = move_images(jnp.asarray(train.images), dx=dx, dy=dy, mirror=mirror)
        for k, f in enumerate(_with_members(features(model, images, policy=policy), 2)):
            f = f.astype(np.float64)
            m = np.stack([f[y == c].mean(0) for c in range(classes)])
            centred = f - m[y]
            if k == len(sums):
                sums.append([])
                scatter.append(np.zeros((f.shape[1], f.shape[1])))
            sums[k].append(m)
            scatter[k] += centred.T @ centred
    means, precisions = [], []
    for m, s in zip(sums, scatter, strict=True):
        cov = s / (len(y) * len(moves))
        means.append(np.concatenate(m))
        precisions.append(np.linalg.inv(cov + 1e-6 * np.trace(cov) / len(cov) * np.eye(len(cov))))
    one = num_members(model) is None
    means, precision = (means[0], precisions[0]) if one else (np.stack(means), np.stack(precisions))
    amount, spread = ink(train.images), contrast(train.images)
    ink_range = (float(amount.min()), float(amount.max()))
    trust = Trust(means, precision, np.inf, ink_range, float(spread.min()))
    scores = trust.scores(features(model, held_out.images, policy=policy))
    return dataclasses.replace(trust, threshold=float(np.quantile(scores, 1.0 - rate)))


def calibrate(
    model: MLP,
    train: ArrayDataset,
    held_out: ArrayDataset,
    *,
    policy: Policy = FLOAT32,
    batch_size: int = 1000,
    moves: tuple[Move, ...] = AS_THEY_ARE,
) -> "Calibration":
    """Calibrate a trained model, or an ensemble: the step after training.

    The temperature is fitted on `held_out` to the model's logits (an ensemble's: the
    log of its mean probability); the trust flag's means and covariance on `train`
    (for an ensemble, each member's on its own activations) and its threshold on
    `held_out`.

    **Arguments:**

    - `model`: the trained model, or a stack of members.
    - `train`: the images it trained on.
    - `held_out`: images it did not train on (never the test set), e.g. the
        `calibration` split of [`split_data`][eqx_fmnist.dataset.split_data].
    - `policy`: the precision policy of the forward pass. Defaults to float32.
    - `batch_size`: images per compiled batch. Defaults to `1000`.
    - `moves`: the moves of the training images the trust flag's means are fitted on
        (see [`fit_trust`][eqx_fmnist.calibration.fit_trust]). Defaults to the images
        as they are.

    **Returns:**

    A [`Calibration`][eqx_fmnist.calibration.Calibration].

    !!! example

        ```python
        splits = ef.split_data(ef.load_fashion_mnist(), calibration_size=5000)
        result = ef.fit(config, splits)
        calibration = ef.calibrate(result.model, splits.train, splits.calibration)
        ```
    """
    logits, labels, mask = dataset_logits(model, held_out, policy=policy, batch_size=batch_size)
    temperature = fit_temperature(logits, labels, mask)
    trust = fit_trust(model, train, held_out, policy=policy, moves=moves)
    return Calibration(temperature, trust, len(held_out))


def calibration_report(
    logits: Float[Array | np.ndarray, "n classes"],
    labels: Integer[Array | np.ndarray, " n"],
    calibration: "Calibration | None" = None,
):
    """`(summary, figure)` for a run folder: the raw (and, with a `calibration`, the
    temperature-scaled) NLL, Brier score and ECE of `logits` against `labels`, and their
    reliability diagram."""
    logits, labels = jnp.asarray(logits), jnp.asarray(labels, jnp.int32)
    results = {"raw": calibration_metrics(logits, labels)}
    if calibration is not None:
        results["calibrated"] = calibration_metrics(
            logits, labels, temperature=calibration.temperature
        )
    summary = {
        name: {"nll": r.nll, "brier": r.brier, "ece": r.ece, "temperature": r.temperature}
        for name, r in results.items()
    }
    curves = {
        (f"raw, ECE {r.ece:.3f}" if name == "raw" else f"T = {r.temperature:.2f}, ECE {r.ece:.3f}"):
        (r.bin_confidence, r.bin_accuracy, r.bin_count)
        for name, r in results.items()
    }  # fmt: skip
    return summary, plot_reliability(
        curves, title=f"Reliability on {results['raw'].count:,} images"
    )


# --------------------------------------------------------------------------- stored


@dataclasses.dataclass(frozen=True)
class Calibration:
    """What a run learns about its own probabilities on held-out images: the temperature
    and the trust detector, and how many images it was fitted on."""

    temperature: float
    trust: Trust
    held_out: int

    def save(self, path: str | os.PathLike) -> Path:
        """Write a safetensors file (atomically); the numbers are in its metadata."""
        from safetensors.numpy import save

        meta = {k: json.dumps(v) for k, v in self.to_dict().items()}
        arrays = {"means": self.trust.means, "precision": self.trust.precision}
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
                trust = Trust(f.get_tensor("means"), f.get_tensor("precision"),
                              float(meta["threshold"]), tuple(meta["ink_range"]),
                              float(meta["min_contrast"]))  # fmt: skip
                return cls(float(meta["temperature"]), trust, int(meta["held_out"]))
        except Exception as e:  # safetensors raises several kinds
            raise ValueError(f"cannot read the calibration {path}: {e}") from None

    def to_dict(self) -> dict:
        return {"temperature": self.temperature, "threshold": self.trust.threshold,
                "ink_range": list(self.trust.ink_range),
                "min_contrast": self.trust.min_contrast, "held_out": self.held_out,
                "flag_rate": FLAG_RATE}  # fmt: skip
