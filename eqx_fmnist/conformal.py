"""Which classes could it be: split-conformal prediction sets with a coverage guarantee.

A prediction set holds every class whose calibrated probability is high enough. The
threshold is fitted on held-out images (the run's calibration split, never the test set)
so that, for new images drawn like those, the set holds the true class with probability
at least `coverage` (Vovk et al.; Angelopoulos and Bates, "A gentle introduction to
conformal prediction"):

1. the score of a held-out image is `1 - p_y`, one minus the probability of its true
   class (the "least ambiguous set-valued classifier", LAC, of Sadinle, Lei and
   Wasserman, 2019);
2. the threshold `q` is the `ceil((n + 1) * coverage)`-th smallest of the `n` scores;
3. the set of a new image is every class `k` with `1 - p_k <= q`, and always its most
   probable class: an empty set (no class sure enough) would tell a person nothing they
   can act on, and adding a class to a set can only raise its coverage.

LAC gives the smallest sets on average of any method with the guarantee. Its guarantee
is *marginal*: over all images together. On Fashion-MNIST that hides the classes the
model confuses (Shirt, T-shirt/top, Pullover, Coat), which are covered less often than
the others, so `per_class=True` fits one threshold per true class (Mondrian conformal
prediction, Vovk et al. 2003): each class then has the guarantee on its own, at the price
of larger sets for the hard classes.

The guarantee needs the new images to be exchangeable with the held-out ones: drawn the
same way. A user's own photos are not; their sets have no guarantee (the trust flag,
[`eqx_fmnist.trust`][eqx_fmnist.trust], says when an input is unlike the data).
"""

import dataclasses
import math
from collections.abc import Sequence

import numpy as np
from jaxtyping import Bool, Float, Integer

from .checks import COVERAGE, check_coverage


def conformal_threshold(scores: Float[np.ndarray, " n"], coverage: float) -> float:
    """The split-conformal threshold of `n` held-out scores: the
    `ceil((n + 1) * coverage)`-th smallest, or `1.0` (every class in every set) when
    there are too few scores for that rank."""
    scores = np.sort(np.asarray(scores, np.float64))
    rank = math.ceil((len(scores) + 1) * check_coverage(coverage))
    return 1.0 if rank > len(scores) else float(scores[rank - 1])


def prediction_sets(
    probabilities: Float[np.ndarray, "n classes"], thresholds: Sequence[float] | np.ndarray
) -> Bool[np.ndarray, "n classes"]:
    """`(n, 10)` booleans: class `k` is in image `i`'s set when
    `1 - probabilities[i, k] <= thresholds[k]`, or when it is the most probable class.
    Every export computes the same (and is checked against this)."""
    p = np.asarray(probabilities, np.float64)
    top = np.arange(p.shape[1]) == p.argmax(axis=1)[:, None]
    return (1.0 - p <= np.asarray(thresholds, np.float64)) | top


@dataclasses.dataclass(frozen=True)
class ConformalSets:
    """Fitted prediction sets: the coverage asked for and one threshold per class (all
    equal unless `per_class`), on the score `1 - p`.

    **Fields:** `coverage`, `thresholds` (a tuple of 10 floats), `per_class`, `held_out`
    (the images fitted on).
    """

    coverage: float
    thresholds: tuple[float, ...]
    per_class: bool
    held_out: int

    def sets(self, probabilities: Float[np.ndarray, "n classes"]) -> Bool[np.ndarray, "n classes"]:
        """`(n, 10)` booleans: [`prediction_sets`][eqx_fmnist.conformal.prediction_sets]
        with these thresholds."""
        return prediction_sets(probabilities, self.thresholds)

    def to_dict(self) -> dict:
        """A JSON-ready dict (what a saved calibration and a manifest hold)."""
        return dataclasses.asdict(self) | {"thresholds": list(self.thresholds), "score": "1 - p"}

    @classmethod
    def from_dict(cls, d: dict) -> "ConformalSets":
        """Rebuild from [`to_dict`][eqx_fmnist.conformal.ConformalSets.to_dict]'s output."""
        return cls(
            float(d["coverage"]),
            tuple(map(float, d["thresholds"])),
            bool(d["per_class"]),
            int(d["held_out"]),
        )


def fit_sets(
    probabilities: Float[np.ndarray, "n classes"],
    labels: Integer[np.ndarray, " n"],
    *,
    coverage: float = COVERAGE,
    per_class: bool = False,
) -> ConformalSets:
    """Fit the conformal threshold(s) on held-out images' calibrated probabilities.

    **Arguments:**

    - `probabilities`: `(n, 10)`, the probabilities the sets will be made from (with the
        run's temperature applied: the same outputs they will be applied to).
    - `labels`: `(n,)`, the held-out images' true classes.
    - `coverage`: the share of new images whose set holds the true class. Defaults to
        `0.9`.
    - `per_class`: one threshold per true class (each class covered on its own).
        Defaults to `False`: one threshold for all.

    **Returns:**

    A [`ConformalSets`][eqx_fmnist.conformal.ConformalSets].
    """
    p = np.asarray(probabilities, np.float64)
    y = np.asarray(labels).astype(int)
    scores = 1.0 - p[np.arange(len(y)), y]
    if per_class:
        thresholds = tuple(conformal_threshold(scores[y == k], coverage) for k in range(p.shape[1]))
    else:
        thresholds = (conformal_threshold(scores, coverage),) * p.shape[1]
    return ConformalSets(check_coverage(coverage), thresholds, bool(per_class), len(y))


@dataclasses.dataclass(frozen=True)
class SetReport:
    """How prediction sets did against true labels.

    **Fields:** `coverage` (the share of images whose set holds the true class),
    `class_coverage` (the same per true class, a tuple of 10), `mean_size` (classes per
    set), `singletons` (the share of sets of one class), `empty` (the share of empty
    sets: none from [`ConformalSets.sets`][eqx_fmnist.conformal.ConformalSets.sets]),
    `count` (images).
    """

    coverage: float
    class_coverage: tuple[float, ...]
    mean_size: float
    singletons: float
    empty: float
    count: int

    @property
    def worst_class(self) -> int:
        """The true class covered least often."""
        return int(np.argmin(self.class_coverage))

    def to_dict(self) -> dict:
        """A JSON-ready dict (what `summary.json`'s `prediction_sets` holds)."""
        return dataclasses.asdict(self) | {"class_coverage": list(self.class_coverage)}


def set_report(sets: Bool[np.ndarray, "n classes"], labels: Integer[np.ndarray, " n"]) -> SetReport:
    """Coverage (overall and per class), mean set size and the share of singletons."""
    sets = np.asarray(sets, bool)
    y = np.asarray(labels).astype(int)
    hit = sets[np.arange(len(y)), y]
    size = sets.sum(axis=1)
    per_class = tuple(
        float(hit[y == k].mean()) if (y == k).any() else math.nan for k in range(sets.shape[1])
    )
    return SetReport(
        float(hit.mean()),
        per_class,
        float(size.mean()),
        float((size == 1).mean()),
        float((size == 0).mean()),
        len(y),
    )
