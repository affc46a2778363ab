"""StableHLO through `jax.export`: the whole forward pass, `uint8` pixels in, with a
symbolic batch size, lowered for CPU, CUDA and TPU, that runs with `jax` alone."""

import dataclasses
import hashlib
import os
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..answers import Answer
from ..data import IMAGE_SIZE
from ..dataset import normalize
from ..evaluation import scaled_softmax
from ..model import Model, combine, ensemble_log_probs, per_member
from ..precision import Policy
from .format import ExportFormat, ExportInputs, Outputs
from .manifest import ExportError, manifest_path, read_manifest
from .portable import PortableTrust

PLATFORMS = ("cpu", "cuda", "tpu")
OUTPUTS = ("logits", "probabilities", "trust_score", "unusual", "prediction_set")
"""The artifact's outputs, in order; an uncalibrated model's stop after the first two,
a calibration without prediction sets after the first four."""
HIGHEST = jax.lax.Precision.HIGHEST


def trust_outputs(
    feats: jax.Array, pixels: jax.Array, trust: PortableTrust
) -> tuple[jax.Array, jax.Array]:
    """`(score, unusual)` from each member's hidden activations `feats` (`(members, b,
    hidden)`, float32) and the `uint8` pixels, as
    [`Trust.flags`][eqx_fmnist.trust.Trust.flags] computes them."""
    # Full float32 products: a GPU would otherwise multiply float32 in TF32.
    g = jnp.einsum("kbh,khj->kbj", feats, jnp.asarray(trust.whiten), precision=HIGHEST)
    d = jnp.sum((g[:, :, None, :] - jnp.asarray(trust.centres)[:, None]) ** 2, axis=-1)
    score = jnp.mean(jnp.min(d, axis=-1), axis=0)
    sums = jnp.sum(pixels.astype(jnp.int32), axis=-1)  # exact, as the thresholds are
    low, high = trust.ink_sum_range
    flat = jnp.std(normalize(pixels), axis=-1) < jnp.float32(trust.min_contrast)
    unusual = (sums < low) | (sums > high) | flat | (score > jnp.float32(trust.threshold))
    return score, unusual


def serving_function(
    models: Model,
    policy: Policy,
    *,
    temperature: float = 1.0,
    trust: PortableTrust | None = None,
    set_thresholds: np.ndarray | None = None,
    views: np.ndarray | None = None,
):
    """`images uint8[b, 784] -> (logits f32[b, 10], probabilities f32[b, 10])`, and with a
    `trust`, `trust_score f32[b]` and `unusual bool[b]` after them, and with
    `set_thresholds` (a calibration's conformal sets), `prediction_set bool[b, 10]`
    ([`prediction_sets`][eqx_fmnist.conformal.prediction_sets]). With `views`
    ([`view_indices`][eqx_fmnist.export.portable.view_indices]), each member's
    probability is its mean over the views, gathered from the pixels.

    The probabilities are `softmax(logits / temperature)` (a run's calibrated
    temperature; `1` leaves them raw). For an ensemble (a stacked model) the "logits"
    are the log of the mean of the members' probabilities
    ([`combine`][eqx_fmnist.model.combine]).
    """

    def one(model, images):
        def forward(x):  # XLA computes the hidden layers once for both
            feats = jnp.concatenate(model.hidden(x, policy=policy)).astype(jnp.float32)
            return model(x, policy=policy).astype(jnp.float32), feats

        x = normalize(images)
        logits, feats = jax.vmap(forward)(x)
        if views is None:
            return logits, feats
        padded = jnp.concatenate([x, jnp.zeros((x.shape[0], 1), x.dtype)], axis=1)
        # All views as one batch: one matmul per layer (XLA's CPU runtime also has no
        # kernel for a bfloat16 dot of one gathered view that accumulates in float32).
        moved = jnp.concatenate([padded[:, jnp.asarray(v)] for v in views])  # (views*b, 784)
        each = jax.vmap(forward)(moved)[0].reshape(len(views), x.shape[0], -1)
        return ensemble_log_probs(each), feats  # trust: the image itself

    def serve(images):
        each, feats = per_member(one, models, images)
        logits = combine(models, each)
        probs = scaled_softmax(logits, temperature)
        if trust is None:
            return logits, probs
        out = (logits, probs, *trust_outputs(feats, images, trust))
        if set_thresholds is None:
            return out
        top = jnp.arange(probs.shape[-1])[None] == jnp.argmax(probs, axis=-1, keepdims=True)
        return *out, (1.0 - probs <= jnp.asarray(set_thresholds, jnp.float32)[None]) | top

    return serve


def to_stablehlo(
    models: Model,
    policy: Policy,
    *,
    temperature: float = 1.0,
    trust: PortableTrust | None = None,
    set_thresholds: np.ndarray | None = None,
    views: np.ndarray | None = None,
) -> bytes:
    """The serialised `jax.export` of the
    [`serving_function`][eqx_fmnist.export.stablehlo.serving_function], with a symbolic batch,
    lowered for CPU, CUDA and TPU."""
    (batch,) = jax.export.symbolic_shape("b")
    spec = jax.ShapeDtypeStruct((batch, IMAGE_SIZE), jnp.uint8)
    serve = serving_function(
        models,
        policy,
        temperature=temperature,
        trust=trust,
        set_thresholds=set_thresholds,
        views=views,
    )
    return bytes(jax.export.export(jax.jit(serve), platforms=PLATFORMS)(spec).serialize())


def run_stablehlo(blob: bytes, images: np.ndarray) -> dict[str, np.ndarray]:
    """Run a serialised artifact on `uint8` images of shape `(n, 784)`: its outputs by
    name (`OUTPUTS`)."""
    exported = jax.export.deserialize(bytearray(blob))
    return dict(zip(OUTPUTS, map(np.asarray, exported.call(jnp.asarray(images))), strict=False))


TRUST_AND_SETS = {"trust": "threshold", "prediction_sets": "coverage"}
"""The manifest's numbers an artifact's answer reports: `trust.threshold` and
`prediction_sets.coverage`."""


def _number_in(manifest: dict[str, Any], key: str, inner: str | None, where: Path) -> float | None:
    """`manifest[key][inner]` (or `manifest[key]`) as a float; `None` when absent.

    **Raises:**

    `ExportError` for a value that is there but not a number.
    """
    value = manifest.get(key)
    if inner is not None and isinstance(value, dict):
        value = value.get(inner)
    if value is None:
        return None
    try:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError
        return float(value)
    except (TypeError, OverflowError):
        raise ExportError(
            f"{manifest_path(where)}: `{key}{'.' + inner if inner else ''}` is {value!r:.60}, "
            "not a number: export the model again."
        ) from None


@dataclasses.dataclass(frozen=True)
class Artifact:
    """A loaded StableHLO artifact and its manifest; call it on `uint8` images."""

    path: Path
    manifest: dict[str, Any]
    exported: Any

    def run(self, images: np.ndarray) -> dict[str, np.ndarray]:
        """Every output by name for `uint8` images of shape `(n, 784)` or `(n, 28, 28)`:
        `logits`, `probabilities` and, when the run was calibrated, `trust_score` and
        `unusual` (and `prediction_set`, when its calibration has sets).

        **Raises:**

        `ValueError` naming the expected shape and dtype.
        """
        images = np.asarray(images)
        if images.dtype != np.uint8 or images.ndim not in (2, 3):
            raise ValueError(
                f"{self.path.name} takes uint8 images of shape (n, 784) or (n, 28, 28), "
                f"but got {images.dtype} of shape {images.shape}."
            )
        flat = images.reshape(len(images), -1)
        if flat.shape[1] != IMAGE_SIZE:
            raise ValueError(
                f"{self.path.name} takes 28 x 28 images (784 pixels), but got shape "
                f"{images.shape}; resize them first (eqx_fmnist.data.load_image does)."
            )
        outputs = self.exported.call(jnp.asarray(flat))
        return dict(zip(OUTPUTS, map(np.asarray, outputs), strict=False))

    @property
    def views(self) -> str:
        """The name of the views it averages over (fixed when it was exported)."""
        tta = self.manifest.get("tta")  # absent before the views
        name = tta.get("name", "none") if isinstance(tta, dict) else "none"
        return name if isinstance(name, str) else "none"

    def answer(self, images: np.ndarray, tta: str | None = None) -> Answer:
        """What it says of `images`, as the library's [`answer`][eqx_fmnist.answers.answer]
        says it: the probabilities, and for a calibrated run the trust flag and the
        prediction sets with the threshold and coverage its manifest records. `tta`:
        `None` or its own `views` (`ValueError` for others: they were fixed at export)."""
        if tta is not None and tta != self.views:
            raise ValueError(
                f"{self.path}: the artifact computes --tta {self.views}, not {tta} (its "
                "views are fixed when it is exported): leave --tta out."
            )
        out = self.run(images)
        if out.get("probabilities") is None:  # every artifact returns them (export checks)
            raise ExportError(f"{self.path}: the artifact returned no probabilities.")
        trust, sets = (
            _number_in(self.manifest, k, v, self.path) for k, v in TRUST_AND_SETS.items()
        )
        temperature = _number_in(self.manifest, "temperature", None, self.path)
        return Answer(
            out["logits"],
            out["probabilities"],
            1.0 if temperature is None else temperature,
            trust_score=out.get("trust_score"),
            unusual=out.get("unusual"),
            threshold=trust,
            prediction_set=out.get("prediction_set"),
            coverage=sets,
        )

    def __call__(self, images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`(logits, probabilities)`; see [`run`][eqx_fmnist.export.stablehlo.Artifact.run]."""
        out = self.run(images)
        return out["logits"], out["probabilities"]


def load_artifact(path: str | os.PathLike) -> Artifact:
    """Load a StableHLO artifact, checking it against its manifest's SHA-256.

    **Raises:**

    `ExportError` for a missing artifact or manifest, a checksum that differs, or a
    file that is not a StableHLO export.
    """
    path = Path(path)
    manifest = read_manifest(path)
    try:
        blob = path.read_bytes()
    except FileNotFoundError:
        raise ExportError(f"{path} does not exist; export the model first.") from None
    except OSError as e:
        raise ExportError(f"cannot read the artifact {path}: {e}") from None
    if manifest.get("format") != "stablehlo":
        what = manifest.get("format")
        raise ExportError(
            f"{path} is a {what} export, not StableHLO: run it with its own runtime, or "
            "give a StableHLO artifact or a run folder."
            if isinstance(what, str)
            else f"{manifest_path(path)} is not the manifest of a StableHLO export."
        )
    if hashlib.sha256(blob).hexdigest() != manifest.get("sha256"):
        raise ExportError(
            f"{path} does not match the SHA-256 in its manifest: the file is corrupt or "
            "was replaced; export it again."
        )
    try:
        exported = jax.export.deserialize(bytearray(blob))
    except Exception as e:  # flatbuffers raises several kinds for a bad file
        raise ExportError(f"{path} is not a StableHLO export ({type(e).__name__}).") from None
    return Artifact(path, manifest, exported)


def _build(inputs: ExportInputs) -> tuple[bytes, dict[str, Any]]:
    p = inputs.portable
    blob = to_stablehlo(
        inputs.models,
        inputs.policy,
        temperature=p.temperature,
        trust=p.trust,
        set_thresholds=p.set_thresholds,
        views=p.views,
    )
    return blob, {"platforms": list(PLATFORMS)}


def _run(blob: bytes, images: np.ndarray, inputs: ExportInputs) -> tuple[Outputs, dict[str, Any]]:
    return run_stablehlo(blob, images), {}


FORMAT = ExportFormat("stablehlo", ".stablehlo", _build, _run, keeps_policy=True, any_model=True)
"""StableHLO: the whole forward pass, in the run's policy, for `jax` alone."""
