"""Which labels look wrong: confident learning over out-of-sample probabilities.

A model that trained on an image has learnt its label, right or wrong, so the
probabilities must come from a model that did not see it: the out-of-fold
probabilities of [`cross_validate`][eqx_fmnist.ensemble.cross_validate] for the training
set, a model trained on the training set for the test set. `cleanlab`
(`pip install 'eqx_fmnist[audit]'`) finds the label issues (confident learning: per-class
thresholds of the model's confidence, and the examples whose given label falls below
them while another class clears its own); this module ranks them by *self-confidence*,
the probability the model gives the given label (lowest first), and suggests the most
probable class.
"""

import csv
import dataclasses
import io
import json
import warnings
from pathlib import Path

import numpy as np
from jaxtyping import Float, Integer

from .data import CLASS_NAMES
from .fileio import atomic_write


def require_cleanlab():
    """`cleanlab`, or an `ImportError` that names the extra to install."""
    try:
        with warnings.catch_warnings():  # tqdm.auto's, in a kernel without ipywidgets
            warnings.filterwarnings("ignore", message="IProgress not found")
            import cleanlab.filter
    except ImportError:
        raise ImportError(
            "the label audit needs cleanlab: pip install 'eqx_fmnist[audit]'"
        ) from None
    return cleanlab.filter


def self_confidence(
    probabilities: Float[np.ndarray, "n classes"], labels: Integer[np.ndarray, " n"]
) -> Float[np.ndarray, " n"]:
    """The probability each example's model gives its given label."""
    return np.asarray(probabilities)[np.arange(len(labels)), np.asarray(labels)]


@dataclasses.dataclass(frozen=True)
class LabelAudit:
    """The suspects of an audit, most suspicious first: `indices` into the audited set,
    the `given` labels, the `suggested` ones (the most probable class), and `score` (the
    self-confidence: the probability of the given label)."""

    indices: np.ndarray
    given: np.ndarray
    suggested: np.ndarray
    score: np.ndarray
    examples: int

    def rows(self) -> list[dict]:
        return [
            {
                "index": int(i),
                "given": CLASS_NAMES[g],
                "suggested": CLASS_NAMES[s],
                "score": float(c),
            }
            for i, g, s, c in zip(self.indices, self.given, self.suggested, self.score, strict=True)
        ]

    def save(self, path: str | Path) -> Path:
        """The suspects as CSV (`.csv`) or JSON (any other suffix), atomically."""
        path = Path(path)
        if path.suffix == ".csv":
            text = io.StringIO()
            writer = csv.DictWriter(text, ["index", "given", "suggested", "score"])
            writer.writeheader()
            writer.writerows(self.rows())
            body = text.getvalue()
        else:
            body = json.dumps({"examples": self.examples, "suspects": self.rows()}, indent=1)
        with atomic_write(path, "w") as f:
            f.write(body)
        return path


def audit_labels(
    probabilities: Float[np.ndarray, "n classes"],
    labels: Integer[np.ndarray, " n"],
) -> LabelAudit:
    """The examples whose given labels confident learning (`cleanlab.filter.
    find_label_issues`) calls issues, ranked by self-confidence, lowest first.

    **Arguments:**

    - `probabilities`: out-of-sample probabilities, one row per example (see the module).
    - `labels`: the given labels.

    **Raises:**

    `ImportError` without `cleanlab` (the `audit` extra); `ValueError` for probabilities
    whose shape does not match the labels.
    """
    probs = np.asarray(probabilities, np.float64)
    labels = np.asarray(labels).astype(int)
    if probs.ndim != 2 or len(probs) != len(labels):
        raise ValueError(
            f"probabilities of shape {probs.shape} for {len(labels)} labels: "
            "give one row per example."
        )
    found = require_cleanlab().find_label_issues(  # n_jobs=1: no fork of a JAX process
        labels, probs, return_indices_ranked_by="self_confidence", n_jobs=1
    )
    found = np.asarray(found, int)
    return LabelAudit(
        found,
        labels[found],
        probs[found].argmax(1),
        self_confidence(probs, labels)[found],
        len(labels),
    )
