"""Accuracy on moved images: how far a model's answers hold when a picture is framed a
little differently from Fashion-MNIST's (every item centred, every shoe pointing left).

[`moved_logits`][eqx_fmnist.robustness.moved_logits] runs the model over the images
moved by each of [`robustness_moves`][eqx_fmnist.robustness.robustness_moves] (as they
are, mirrored, 1-3 pixels in four directions) in one compiled program
([`logits_of_moves`][eqx_fmnist.robustness.logits_of_moves]) and reads the logits back
once; [`evaluate_robustness`][eqx_fmnist.robustness.evaluate_robustness] counts the
accuracies from them. A run's test report runs the same moves in its own program.
"""

import dataclasses

import equinox as eqx
import jax
import numpy as np
from jaxtyping import Array, Float, Int, Integer, Shaped

from .augment import Move
from .dataset import ArrayDataset
from .evaluation import padded_logits
from .model import Model
from .precision import FLOAT32, Policy
from .views import move_images

ROBUSTNESS_SHIFTS = (1, 2, 3)
"""The shifts, in pixels, that [`evaluate_robustness`][eqx_fmnist.robustness.evaluate_robustness]
moves the images by."""


@dataclasses.dataclass(frozen=True)
class Robustness:
    """Accuracy on the images as they are, mirrored left-right, and moved.

    **Fields:**

    - `clean`: accuracy on the images as they are.
    - `mirrored`: on every image mirrored left-right.
    - `shifted`: `{pixels: accuracy}`, each the mean over the four moves by that many
        pixels (left, right, up, down; zero fill).
    - `count`: images per figure.
    """

    clean: float
    mirrored: float
    shifted: dict[int, float]
    count: int

    @classmethod
    def of(
        cls,
        logits: Float[np.ndarray, "moves n classes"],
        labels: Integer[np.ndarray, " n"],
        shifts: tuple[int, ...] = ROBUSTNESS_SHIFTS,
    ) -> "Robustness":
        """The accuracies of the logits of each of
        [`robustness_moves(shifts)`][eqx_fmnist.robustness.robustness_moves]."""
        acc = (logits.argmax(-1) == labels).mean(-1)
        shifted = {s: float(np.mean(acc[2 + 4 * i : 6 + 4 * i])) for i, s in enumerate(shifts)}
        return cls(float(acc[0]), float(acc[1]), shifted, len(labels))

    def rows(self) -> list[tuple[str, float]]:
        """`(images, accuracy)` rows, clean first: a table's contents."""
        return [("as they are", self.clean), ("mirrored left-right", self.mirrored)] + [
            (f"shifted {s} px (mean of 4 directions)", a) for s, a in self.shifted.items()
        ]

    def to_dict(self) -> dict[str, float]:
        """`{"clean", "mirrored", "shift1", ...}`: a JSON-ready dict."""
        moved = {f"shift{s}": a for s, a in self.shifted.items()}
        return {"clean": self.clean, "mirrored": self.mirrored, **moved}


def robustness_moves(shifts: tuple[int, ...] = ROBUSTNESS_SHIFTS) -> Int[np.ndarray, "moves 3"]:
    """The `(dx, dy, mirror)` moves [`evaluate_robustness`][eqx_fmnist.robustness.evaluate_robustness]
    scores: the images as they are, mirrored, then left, right, up and down by each of
    `shifts` pixels."""
    moves = [(0, 0, 0), (0, 0, 1)]
    moves += [m for s in shifts for m in ((s, 0, 0), (-s, 0, 0), (0, s, 0), (0, -s, 0))]
    return np.asarray(moves, np.int32)


def logits_of_moves(model, images, moves, policy: Policy, batch_size: int, tta=None):
    """Inside a compiled program: the logits (an ensemble's, or the views') of `images`
    moved by each `(dx, dy, mirror)` row of `moves`, padded to whole batches, one move
    after another (`lax.map`)."""

    def one(move):
        moved = move_images(images, dx=move[0], dy=move[1], mirror=move[2] == 1)
        return padded_logits(model, moved, policy, batch_size, None, tta)[0]

    return jax.lax.map(one, moves)


_moved_logits = eqx.filter_jit(logits_of_moves)


def moved_logits(
    model: Model,
    images: Shaped[Array, "n 784"],
    moves: Int[np.ndarray, "moves 3"],
    *,
    policy: Policy = FLOAT32,
    batch_size: int = 1000,
    tta: tuple[Move, ...] | None = None,
) -> Float[np.ndarray, "moves n classes"]:
    """The logits of `images` moved by each row of `moves` (`(dx, dy, mirror)`, as
    [`robustness_moves`][eqx_fmnist.robustness.robustness_moves] lists them), in one
    compiled program: what [`evaluate_robustness`][eqx_fmnist.robustness.evaluate_robustness]
    reads. For members, or with `tta` views, the log of the mean probability."""
    logits = _moved_logits(model, images, np.asarray(moves), policy, batch_size, tta)
    return np.asarray(logits)[:, : images.shape[0]]


def evaluate_robustness(
    model: Model,
    dataset: ArrayDataset,
    *,
    policy: Policy = FLOAT32,
    shifts: tuple[int, ...] = ROBUSTNESS_SHIFTS,
    batch_size: int = 1000,
    tta: tuple[Move, ...] | None = None,
) -> Robustness:
    """Accuracy on `dataset` as it is, mirrored, and moved by each of `shifts` pixels.

    Every item of Fashion-MNIST is centred and every shoe points left: a model that
    learnt that is right on the test set and wrong on a photo framed a little
    differently. This says by how much.

    **Arguments:**

    - `model`: the model, or a stack of members (the ensemble is scored).
    - `dataset`: the examples, e.g. the test set.
    - `policy`: the precision of the forward pass. Defaults to float32.
    - `shifts`: pixel distances; each is scored as the mean over the moves left,
        right, up and down. Defaults to `(1, 2, 3)`.
    - `batch_size`: examples per compiled batch. Defaults to `1000`.
    - `tta`: test-time augmentation's views of each moved image, as for
        [`predict_logits`][eqx_fmnist.evaluation.predict_logits]. Defaults to `None`.

    **Returns:**

    A [`Robustness`][eqx_fmnist.robustness.Robustness].
    """
    moves = robustness_moves(shifts)
    logits = moved_logits(
        model, dataset.images, moves, policy=policy, batch_size=batch_size, tta=tta
    )
    return Robustness.of(logits, np.asarray(dataset.labels), shifts)
