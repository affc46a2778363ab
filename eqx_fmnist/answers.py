"""Everything a prediction says, assembled once: the probabilities at the calibrated
temperature, the conformal set and what it promises, the trust score and flag, each
member's guess and, when asked, which pixels made the model say it.

[`answer`][eqx_fmnist.answers.answer] is what `eqx-fmnist predict` prints, what every
export is checked against, and where the run report takes its prediction sets from.
"""

import dataclasses
from typing import Any

import numpy as np
from jaxtyping import Array, Bool, Float, Shaped

from .attributions import Explanation, explain
from .augment import Move
from .calibration import Calibration
from .checks import door
from .data import CLASS_NAMES
from .dataset import as_images
from .evaluation import member_probabilities, numpy_softmax, predict_logits
from .model import Model
from .precision import FLOAT32, Policy
from .trust import features


@dataclasses.dataclass(frozen=True)
class Answer:
    """What the library says of each of `n` images.

    **Fields:**

    - `logits`: `(n, 10)` float32; for members or views, the log of the mean probability.
    - `probabilities`: `(n, 10)` float32, `softmax(logits / temperature)`.
    - `temperature`: the calibration's, else the one asked for (`1`: raw).
    - `trust_score`, `unusual`: `(n,)`, the trust detector's score and flag (a
        calibrated run's); else `None`.
    - `threshold`: the score above which an image is flagged; else `None`.
    - `prediction_set`: `(n, 10)` booleans, the conformal set of each image (a
        calibration with sets); else `None`. `coverage`: what the sets promise.
    - `member_probabilities`: `(members, n, 10)`, each member's own (asked for with
        `members=True`, for a stack); else `None`.
    - `explained`: the attributions of the class shown first (`attributions=True`).
    """

    logits: Float[np.ndarray, "n classes"]
    probabilities: Float[np.ndarray, "n classes"]
    temperature: float = 1.0
    trust_score: Float[np.ndarray, " n"] | None = None
    unusual: Bool[np.ndarray, " n"] | None = None
    threshold: float | None = None
    prediction_set: Bool[np.ndarray, "n classes"] | None = None
    coverage: float | None = None
    member_probabilities: Float[np.ndarray, "members n classes"] | None = None
    explained: Explanation | None = None

    @property
    def calibrated(self) -> bool:
        """Whether a calibration stood behind it (the trust flag is then given)."""
        return self.threshold is not None

    def outputs(self) -> dict[str, np.ndarray]:
        """The arrays by the names every export returns (`logits`, `probabilities`,
        `trust_score`, `unusual`, `prediction_set`), those that are given."""
        named = {
            "logits": self.logits,
            "probabilities": self.probabilities,
            "trust_score": self.trust_score,
            "unusual": self.unusual,
            "prediction_set": self.prediction_set,
        }
        return {k: v for k, v in named.items() if v is not None}

    def record(self, i: int, top: int = 3) -> dict[str, Any]:
        """Image `i`'s answer in plain values, as `eqx-fmnist predict --json` prints it:
        the `top` classes with their probabilities, most probable first; `calibrated`;
        the trust flag's `unusual`, `score` and `threshold`; the prediction `set` (most
        probable first) and its `set_coverage`; each member's guess (`members`), when
        given. What is not given is `None`."""
        p = self.probabilities[i]
        order = np.argsort(p)[::-1]
        found: dict[str, Any] = {
            "top": [{"class": CLASS_NAMES[c], "probability": float(p[c])} for c in order[:top]],
            "calibrated": self.calibrated,
            "unusual": None if self.unusual is None else bool(self.unusual[i]),
            "score": None if self.trust_score is None else float(self.trust_score[i]),
            "threshold": self.threshold,
            "set": None,
            "set_coverage": self.coverage,
        }
        if self.prediction_set is not None:
            found["set"] = [CLASS_NAMES[c] for c in order if self.prediction_set[i, c]]
        if self.member_probabilities is not None:
            guesses = self.member_probabilities[:, i].argmax(axis=-1)
            found["members"] = ", ".join(CLASS_NAMES[c] for c in guesses)
        return found


@door
def answer(
    model: Model,
    images: Shaped[Array | np.ndarray, "n ..."],
    *,
    policy: Policy = FLOAT32,
    calibration: Calibration | None = None,
    tta: tuple[Move, ...] | None = None,
    temperature: float = 1.0,
    trust: bool = True,
    members: bool = False,
    attributions: bool = False,
) -> Answer:
    """The [`Answer`][eqx_fmnist.answers.Answer] of `model` (or a stack of members) for
    images `(n, 784)` or `(n, 28, 28)`: `uint8` pixels, or floats in `[0, 1]`
    ([`as_images`][eqx_fmnist.dataset.as_images] checks them).

    **Arguments:**

    - `policy`: the precision policy of the forward pass. Defaults to float32.
    - `calibration`: a run's [`Calibration`][eqx_fmnist.calibration.Calibration]: its
        temperature, its views, its trust flag and its prediction sets. Defaults to
        `None`: raw probabilities (or `temperature`), no flag, no set.
    - `tta`: the views to average over ([`TrainConfig.views`][eqx_fmnist.config.TrainConfig.views]);
        with a calibration, only the views it was fitted on. Defaults to `None`: the
        calibration's, else the image alone.
    - `temperature`: a temperature without a calibration. Defaults to `1`: raw.
    - `trust`: compute the calibration's trust score and flag. Defaults to `True`.
    - `members`: also each member's probabilities. Defaults to `False`.
    - `attributions`: also integrated gradients of the class shown first
        ([`explain`][eqx_fmnist.attributions.explain]). Defaults to `False`.

    **Raises:**

    `ViewsError` (a `ValueError`) for views other than the calibration's; `ValueError`
    for a calibration and a temperature together.
    """
    if calibration is not None:
        if temperature != 1.0:
            raise ValueError("give a calibration or a temperature, not both.")
        tta = calibration.views(tta)
    x = as_images(images)
    logits = predict_logits(model, x, policy=policy, tta=tta)
    said = calibrated(logits, calibration, temperature)
    found: dict = {}
    if calibration is not None and trust:
        feats = features(model, x, policy=policy)
        found |= {
            "trust_score": calibration.trust.scores(feats),
            "unusual": calibration.trust.flags(feats, np.asarray(x)),
            "threshold": calibration.trust.threshold,
        }
    if members:
        each = member_probabilities(model, x, policy=policy)
        found["member_probabilities"] = np.asarray(each)
    if attributions:  # the class shown first: the temperature does not change the order
        target = said.probabilities.argmax(axis=-1)
        found["explained"] = explain(model, x, target=target, policy=policy)
    return dataclasses.replace(said, **found)


def calibrated(
    logits: Float[Array | np.ndarray, "n classes"],
    calibration: Calibration | None = None,
    temperature: float = 1.0,
) -> Answer:
    """What logits say once calibrated: the probabilities at the calibration's
    temperature (else at `temperature`) and, for a calibration with sets, each image's
    prediction set and its coverage: the part of [`answer`][eqx_fmnist.answers.answer]
    that needs no model (a run's test report takes its sets from it)."""
    if calibration is not None:
        temperature = calibration.temperature
    logits = np.asarray(logits, np.float32)
    probs = numpy_softmax(logits, temperature)
    found: dict = {}
    if calibration is not None and calibration.sets is not None:
        sets = calibration.sets
        found |= {"prediction_set": sets.sets(probs), "coverage": sets.coverage}
    return Answer(logits, probs, float(temperature), **found)
