"""A flag for inputs unlike the training data: the trust detector.

[`fit_trust`][eqx_fmnist.trust.fit_trust] fits a Mahalanobis distance on the hidden
layers' activations (class means and one shared covariance fitted on training images,
optionally also moved and mirrored: [`trust_moves`][eqx_fmnist.trust.trust_moves]), with
a threshold that flags `FLAG_RATE = 5%` of held-out real images, plus the amount of ink
and contrast: an image darker or brighter on average than every training image, or
flatter than all of them, is flagged. [`calibrate`][eqx_fmnist.calibration.calibrate]
fits it beside the temperature.
"""

import dataclasses
import typing

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Shaped

from .augment import Move
from .dataset import ArrayDataset, normalize, pad_to_batches
from .fashion import IMAGE_SIZE
from .model import Model, num_members, per_member
from .precision import FLOAT32, Policy
from .views import move_images

FLAG_RATE = 0.05
"""The share of held-out real images the trust threshold flags."""
AS_THEY_ARE: tuple[Move, ...] = ((0, 0, False),)
"""The training images as they are: the default of
[`fit_trust`][eqx_fmnist.trust.fit_trust]."""


@eqx.filter_jit
def _features(model: Model, images: Shaped[Array, "n 784"], policy: Policy, batch_size: int):
    def one(m):
        batches, _ = pad_to_batches(images, batch_size)
        forward = jax.vmap(lambda x: jnp.concatenate(m.hidden(normalize(x), policy=policy)))
        f = jax.lax.map(forward, batches)
        return f.reshape(-1, f.shape[-1])[: images.shape[0]].astype(jnp.float32)

    f = per_member(one, model)
    return f[0] if num_members(model) is None else f


def features(
    model: Model,
    images: Shaped[Array, "n 784"],
    *,
    policy: Policy = FLOAT32,
    batch_size: int = 1000,
) -> Float[np.ndarray, "*members n hidden"]:
    """Every hidden layer's activations for every image, side by side (float32 numpy):
    what the trust detector measures distances on. For a stack of members, one such
    array per member (a leading axis)."""
    return np.asarray(_features(model, jnp.asarray(images), policy, batch_size))


def ink(images: Shaped[Array | np.ndarray, "n 784"]) -> Float[np.ndarray, " n"]:
    """Each image's mean pixel value, 0 (black) to 1 (white)."""
    return np.asarray(images).reshape(len(images), IMAGE_SIZE).mean(1, dtype=np.float64) / 255.0


def contrast(images: Shaped[Array | np.ndarray, "n 784"]) -> Float[np.ndarray, " n"]:
    """Each image's standard deviation of pixel values, 0 (one flat grey) to 0.5."""
    x = np.asarray(images).reshape(len(images), IMAGE_SIZE)  # zero images too
    if not np.issubdtype(x.dtype, np.integer):
        return np.asarray(x, np.float64).std(1) / 255.0
    # Integer pixels: the sums of x and x*x are exact, and 30 times faster than numpy's
    # std of a float64 copy (the same value to 1e-16) on a training set.
    s1 = x.sum(1, dtype=np.int64)
    n = x.shape[1]
    s2 = np.einsum("ij,ij->i", x, x, dtype=np.int64)
    return np.sqrt((n * s2 - s1 * s1).astype(np.float64)) / n / 255.0


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
        amount = ink(images)
        flat = contrast(images) < self.min_contrast
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
    Pass them to [`fit_trust`][eqx_fmnist.trust.fit_trust] for a flag that accepts
    mirrored and moved pictures, at the price of catching fewer unlike ones (see the
    trust tutorial's measured table)."""
    moves = list(AS_THEY_ARE)
    if augmentation.mirror:
        moves.append((0, 0, True))
    if s := augmentation.shift:
        moves += [(s, 0, False), (-s, 0, False), (0, s, False), (0, -s, False)]
    return tuple(moves)


def fit_trust(
    model: Model,
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
    ([`trust_moves`][eqx_fmnist.trust.trust_moves] gives the training
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
    means = []
    precisions = []
    for m, s in zip(sums, scatter, strict=True):
        cov = s / (len(y) * len(moves))
        means.append(np.concatenate(m))
        precisions.append(np.linalg.inv(cov + 1e-6 * np.trace(cov) / len(cov) * np.eye(len(cov))))
    one = num_members(model) is None
    means, precision = (means[0], precisions[0]) if one else (np.stack(means), np.stack(precisions))
    amount = ink(train.images)
    spread = contrast(train.images)
    ink_range = (float(amount.min()), float(amount.max()))
    trust = Trust(means, precision, np.inf, ink_range, float(spread.min()))
    scores = trust.scores(features(model, held_out.images, policy=policy))
    return dataclasses.replace(trust, threshold=float(np.quantile(scores, 1.0 - rate)))
