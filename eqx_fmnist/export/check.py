"""`export_model`: build an artifact, check it against the library on the images it is
given, and only then write it and its manifest."""

import dataclasses
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..answers import answer
from ..augment import Move
from ..calibration import Calibration
from ..config import TrainConfig
from ..data import CLASS_NAMES, IMAGE_SIZE
from ..fileio import atomic_writes
from ..model import MLP, Model, num_members
from ..precision import FLOAT32, Policy
from ..views import tta_name
from . import html, onnx, safetensors, stablehlo
from .format import ExportFormat, ExportInputs
from .manifest import ExportError, manifest_path, sealed
from .portable import Portable, to_portable

FORMATS: dict[str, ExportFormat] = {
    f.name: f for f in (stablehlo.FORMAT, safetensors.FORMAT, onnx.FORMAT, html.FORMAT)
}
"""Every export format, by name: a new format is its module and one entry here."""
CLASS_TOLERANCE = 1e-4
"""Relative to an image's largest logit: an image whose two top logits are this close
may change class between two correct float32 computations (sums in another order, on
another backend: about 784 x 6e-8 = 5e-5 of a layer's sum of absolute products); a check
in a coarser compute dtype allows 8 of its `eps` (two compilations may round a few stored
activations otherwise). Any other class that differs fails the check."""
SCORE_TOLERANCE = 1e-4
"""Relative: an image whose trust score is this close to the threshold may fall on
either side of it in float32; any other disagreement on the flag fails the check."""
SET_TOLERANCE = 1e-5
"""A class whose `1 - p` is this close to its set threshold (or whose probability is
this close to the top one) may fall on either side in float32; any other disagreement
on a prediction set fails the check."""


@dataclasses.dataclass(frozen=True)
class Parity:
    """How an export agrees with the library on the check images.

    **Fields:** `images`, `mismatches` (images whose class differs), `tied` (those of
    them whose top two logits are within the check's `CLASS_TOLERANCE` of each other: a
    class that rounding may decide either way), `max_logit_difference`,
    `max_probability_difference`; for a calibrated model
    `flag_mismatches` (images the trust flag judges otherwise) and
    `max_score_difference` (relative to the library's score), else `None`; with
    prediction sets, `set_mismatches` (images whose set differs), else `None`.
    """

    images: int
    mismatches: int
    max_logit_difference: float
    max_probability_difference: float
    tied: int = 0
    flag_mismatches: int | None = None
    max_score_difference: float | None = None
    set_mismatches: int | None = None


def check_parity(
    ours: dict[str, np.ndarray],
    theirs: dict[str, np.ndarray],
    *,
    threshold: float | None = None,
    thresholds: np.ndarray | None = None,
    policy: Policy = FLOAT32,
) -> tuple[Parity, int]:
    """Compare the library's outputs with an artifact's on the same images: the
    [`Parity`][eqx_fmnist.export.check.Parity] (ties as `CLASS_TOLERANCE` says for a
    check run in `policy`) and the number of images whose trust flag or prediction set
    disagrees, not explained by a score within `SCORE_TOLERANCE` of the trust `threshold`
    or a probability within `SET_TOLERANCE` of the sets' `thresholds`."""
    a, b = ours["logits"], theirs["logits"]
    differ = a.argmax(-1) != b.argmax(-1)
    top = np.sort(a, axis=-1)[:, -2:]
    # jnp.finfo knows bfloat16 under any numpy; np.finfo refuses it under some (the TPU
    # machine's).
    tolerance = max(CLASS_TOLERANCE, 8 * float(jnp.finfo(policy.compute_dtype).eps))
    tie = top[:, 1] - top[:, 0] <= tolerance * np.maximum(np.abs(a).max(-1), 1.0)
    prob = float(np.max(np.abs(ours["probabilities"] - theirs["probabilities"])))
    parity = Parity(
        len(a), int(differ.sum()), float(np.max(np.abs(a - b))), prob, int((differ & tie).sum())
    )
    unexplained_sets = 0
    if "prediction_set" in ours and "prediction_set" in theirs:
        assert thresholds is not None, "a prediction set is checked against its thresholds"
        p = ours["probabilities"]
        differ = ours["prediction_set"] != theirs["prediction_set"]
        near = (np.abs(1.0 - p - np.asarray(thresholds)) <= SET_TOLERANCE) | (
            p.max(axis=-1, keepdims=True) - p <= SET_TOLERANCE
        )
        parity = dataclasses.replace(parity, set_mismatches=int(differ.any(axis=-1).sum()))
        unexplained_sets = int((differ & ~near).any(axis=-1).sum())
    if "unusual" not in ours or "unusual" not in theirs:
        return parity, unexplained_sets
    assert threshold is not None, "a trust verdict is checked against its threshold"
    differ = ours["unusual"] != theirs["unusual"]
    score = ours["trust_score"]
    near = np.abs(score - threshold) <= SCORE_TOLERANCE * abs(threshold)
    relative = np.abs(score - theirs["trust_score"]) / np.maximum(np.abs(score), 1e-12)
    parity = dataclasses.replace(
        parity, flag_mismatches=int(differ.sum()), max_score_difference=float(relative.max())
    )
    return parity, int((differ & ~near).sum()) + unexplained_sets


def _manifest(
    kind: ExportFormat,
    path: Path,
    blob: bytes,
    info: dict[str, Any],
    models: Model,
    config: TrainConfig,
    portable: Portable,
    trust: Calibration | None,
    checked: Policy,
    parity: Parity,
) -> dict[str, Any]:
    """The manifest of a checked artifact: what it is, what it takes and returns, how it
    was built and checked."""
    outputs = ["logits float32[b, 10]", "probabilities float32[b, 10]"]
    if kind.member_outputs and portable.ensemble:
        outputs.append(f"member_probabilities float32[{portable.num_members}, b, 10]")
    if trust is not None:
        outputs += ["trust_score float32[b]", "unusual bool[b]"]
    sets = None if trust is None else trust.sets
    if sets is not None:
        outputs.append("prediction_set bool[b, 10]")
    return {
        "format": kind.name,
        "artifact": path.name,
        "sha256": hashlib.sha256(blob).hexdigest(),
        "bytes": len(blob),
        "class_names": list(CLASS_NAMES),
        "input": {
            "name": "images",
            "dtype": "uint8",
            "shape": ["b", IMAGE_SIZE],
            "meaning": "28 x 28 pixels row by row, 0-255, light item on dark",
        },
        "outputs": outputs if kind.serves else None,
        "members": num_members(models),
        "precision": config.precision,
        "checked_with": str(checked),  # the policy the library ran the check in
        "temperature": portable.temperature,
        "trust": None
        if trust is None or portable.trust is None
        else {
            "threshold": trust.trust.threshold,
            "ink_sum_range": list(portable.trust.ink_sum_range),
            "min_contrast": trust.trust.min_contrast,
        },
        "prediction_sets": None
        if sets is None
        else sets.to_dict()
        | {
            "rule": "class k is in the set when 1 - p_k <= thresholds[k], or is the top class",
        },
        **info,
        "config": config.to_dict(),
        "parity": dataclasses.asdict(parity),
        "versions": {"jax": jax.__version__, "equinox": eqx.__version__},
    }


def _views(tta: tuple[Move, ...] | None) -> dict[str, Any]:
    """The manifest's record of the views an artifact averages over."""
    return {
        "name": tta_name(tta),
        "views": [list(v) for v in tta or ()],
        "rule": "each model's probability is its mean over the views (dx, dy, mirror)",
    }


def _refuse_unless_equal(format: str, parity: Parity, unexplained: int) -> None:
    """`ExportError` for an artifact that gives another class, trust verdict or set not
    explained by the check's rounding, for any check image."""
    classes = parity.mismatches - parity.tied
    if not classes and not unexplained:
        return
    if classes:
        what = f"another class than the library for {classes}"
    else:
        what = f"another trust verdict or prediction set than the library for {unexplained}"
    raise ExportError(
        f"the {format} export predicts {what} of {parity.images:,} images (largest logit "
        f"difference {parity.max_logit_difference:.2e}); nothing was written."
    )


def _format_for(
    format: str, models: Model, calibration: Calibration | None, temperature: float
) -> ExportFormat:
    """The format named `format`, after every check that needs no work: a known name,
    its extra installed, a model it can carry, not both a calibration and a temperature."""
    if format not in FORMATS:
        raise ExportError(f"unknown export format {format!r}; choose one of {', '.join(FORMATS)}.")
    kind = FORMATS[format]
    kind.require()  # before any work: a missing extra is one clear line
    if not kind.any_model and not isinstance(models, MLP):
        raise ExportError(
            f"the {format} export writes the MLP's layers, and this model is a "
            f"{type(models).__name__}: export it as StableHLO (--format stablehlo), which "
            "carries any model."
        )
    if calibration is not None and temperature != 1.0:
        raise ExportError("give a calibration or a temperature, not both.")
    return kind


def export_model(
    models: Model,
    policy: Policy,
    config: TrainConfig,
    path: str | os.PathLike,
    *,
    check_images: np.ndarray,
    format: str = "stablehlo",
    calibration: Calibration | None = None,
    temperature: float = 1.0,
    tta: tuple[Move, ...] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Export, check on `check_images`, and only then write the artifact and its manifest.

    **Arguments:**

    - `models`: the model, or the stacked model of an ensemble.
    - `policy`: the precision policy of the forward pass (StableHLO keeps it; the other
        formats hold float32 weights and are checked against the library in float32).
    - `config`: the run's config (into the manifest and the safetensors metadata).
    - `path`: the artifact to write; the manifest goes to `PATH.manifest.json`.
    - `check_images`: `uint8` images of shape `(n, 784)` to check on, e.g. all 10,000
        test images.
    - `format`: a name in [`FORMATS`][eqx_fmnist.export.check.FORMATS]: `"stablehlo"`,
        `"safetensors"`, `"onnx"` (needs the extra `onnx`) or `"html"` (a one-file web
        page). Defaults to `"stablehlo"`.
    - `calibration`: the run's [`Calibration`][eqx_fmnist.calibration.Calibration]:
        its temperature scales the probabilities, and StableHLO, ONNX and the page
        compute its trust flag too (`trust_score` and `unusual`), checked against the
        library's on every check image. Defaults to `None`: raw probabilities, no flag.
    - `temperature`: a temperature without a calibration. Defaults to `1`: raw.
    - `tta`: test-time augmentation's views (e.g.
        [`TTA_MIRROR`][eqx_fmnist.views.TTA_MIRROR]), computed inside every artifact
        as one gather of the pixels per view; `()` for none. Defaults to the
        calibration's ([`Calibration.tta`][eqx_fmnist.calibration.Calibration]: the
        outputs its temperature and sets were fitted on, the only views it allows), else
        those `config.tta` names.
    - `extra`: more manifest entries, e.g. the run's test accuracy (the page shows
        `test_accuracy`).

    **Returns:**

    The manifest, as written.

    **Raises:**

    `ExportError` if the artifact predicts a different class from the library for any
    check image, or judges an image's trust otherwise; nothing is written then.
    """
    kind = _format_for(format, models, calibration, temperature)
    path = Path(path)
    start = time.perf_counter()
    images = np.asarray(check_images, np.uint8).reshape(len(check_images), IMAGE_SIZE)
    if tta is None and calibration is None:
        tta = config.views
    portable = to_portable(models, calibration=calibration, temperature=temperature, tta=tta)
    tta = calibration.views(tta) if calibration is not None else (tuple(tta or ()) or None)
    trust = calibration if kind.trust else None
    # A format that does not keep the run's policy holds float32 weights and is checked
    # as a consumer runs it, in float32.
    checked = policy if kind.keeps_policy else FLOAT32
    ours = answer(
        models,
        images,
        policy=checked,
        calibration=calibration,
        tta=tta,
        temperature=temperature,
        trust=kind.trust,
    ).outputs()
    inputs = ExportInputs(models, policy, config, portable, dict(extra or {}))
    blob, info = kind.build(inputs)
    theirs, checked_by = kind.run(blob, images, inputs)
    threshold = trust.trust.threshold if trust is not None else None
    parity, unexplained = check_parity(
        ours, theirs, threshold=threshold, thresholds=portable.set_thresholds, policy=checked
    )
    info |= {"tta": _views(tta)}
    _refuse_unless_equal(format, parity, unexplained)
    manifest = _manifest(
        kind, path, blob, info | checked_by, models, config, portable, trust, checked, parity
    ) | {"export_seconds": time.perf_counter() - start, **(extra or {})}
    manifest = sealed(manifest)
    text = json.dumps(manifest, indent=2) + "\n"
    atomic_writes({path: blob, manifest_path(path): text.encode()})  # together, or neither
    return manifest
