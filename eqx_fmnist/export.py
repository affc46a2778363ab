"""Artifacts that run without this library: serialised StableHLO and safetensors weights.

- **StableHLO** (`jax.export`): the whole forward pass (`uint8` pixels in, normalisation
  inside, logits and probabilities out) with a symbolic batch size, lowered for CPU and
  CUDA. It runs with `jax` alone: `jax.export.deserialize(blob).call(images)`.
- **safetensors**: the weights, named `layers.0.weight`, `layers.0.bias`, ... (an
  ensemble's as `members.0.layers.0.weight`, ...), with the config in the metadata;
  `torch_state_dict` renames them for the equivalent PyTorch `nn.Sequential`.

Every export is **checked before it is written**: it runs on the images it is given
(all 10,000 test images, from the command line) and must predict the same class as the
library for every one (the StableHLO artifact keeps the run's precision policy and is
checked against it; float32 weights are checked against the library in float32, as a
consumer runs them); the largest logit difference goes into the manifest, a JSON file
beside the artifact (`PATH.manifest.json`) with the class names, the input and output
specs, the artifact's SHA-256 and size, the versions, the run's config and test
accuracy. An export that fails the check raises [`ExportError`][eqx_fmnist.export.ExportError]
and writes nothing. ONNX is not offered: see `docs/tutorials/11-taking-the-model-out.md`.
"""

import dataclasses
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .config import TrainConfig
from .data import CLASS_NAMES, IMAGE_SIZE
from .dataset import normalize
from .evaluation import ensemble_log_probs, predict_logits
from .fileio import atomic_write
from .model import MLP, num_members
from .parallel import to_local
from .precision import FLOAT32, Policy

Format = Literal["stablehlo", "safetensors"]
"""The export formats."""
SUFFIXES = {"stablehlo": ".stablehlo", "safetensors": ".safetensors"}
PLATFORMS = ("cpu", "cuda")
MANIFEST_SUFFIX = ".manifest.json"


class ExportError(ValueError):
    """An export failed its check, or an artifact is missing, corrupt or not one."""


def manifest_path(path: str | os.PathLike) -> Path:
    """The manifest beside an artifact: `PATH.manifest.json`."""
    path = Path(path)
    return path.with_name(path.name + MANIFEST_SUFFIX)


# --------------------------------------------------------------------------- the function


def serving_function(models: MLP, policy: Policy, *, temperature: float = 1.0):
    """`images uint8[b, 784] -> (logits f32[b, 10], probabilities f32[b, 10])`.

    The probabilities are `softmax(logits / temperature)` (a run's calibrated
    temperature; `1` leaves them raw). For an ensemble (a stacked model) the "logits"
    are the log of the mean of the members' probabilities
    ([`ensemble_log_probs`][eqx_fmnist.evaluation.ensemble_log_probs]).
    """

    def one(model, images):
        logits = jax.vmap(lambda x: model(x, policy=policy))(normalize(images))
        return logits.astype(jnp.float32)

    def serve(images):
        if num_members(models) is None:
            logits = one(models, images)
        else:
            logits = ensemble_log_probs(eqx.filter_vmap(one, in_axes=(0, None))(models, images))
        return logits, jax.nn.softmax(logits / jnp.float32(temperature), axis=-1)

    return serve


# --------------------------------------------------------------------------- StableHLO


def to_stablehlo(models: MLP, policy: Policy, *, temperature: float = 1.0) -> bytes:
    """The serialised `jax.export` of the serving function, with a symbolic batch,
    lowered for CPU and CUDA."""
    (batch,) = jax.export.symbolic_shape("b")
    spec = jax.ShapeDtypeStruct((batch, IMAGE_SIZE), jnp.uint8)
    serve = serving_function(to_local(models), policy, temperature=temperature)
    fn = jax.jit(serve)
    return bytes(jax.export.export(fn, platforms=PLATFORMS)(spec).serialize())


def run_stablehlo(blob: bytes, images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Run a serialised artifact (as [`to_stablehlo`][eqx_fmnist.export.to_stablehlo]
    writes it) on `uint8` images of shape `(n, 784)`: `(logits, probabilities)`."""
    exported = jax.export.deserialize(bytearray(blob))
    logits, probs = exported.call(jnp.asarray(images))
    return np.asarray(logits), np.asarray(probs)


# --------------------------------------------------------------------------- safetensors


def weight_arrays(models: MLP) -> dict[str, np.ndarray]:
    """The weights by name: `layers.{i}.weight` of shape `(out, in)` and
    `layers.{i}.bias` (PyTorch's `nn.Linear` layout); `members.{k}.` in front for an
    ensemble."""
    models = to_local(models)
    arrays, members = {}, num_members(models) is not None
    for i, layer in enumerate(models.layers):
        weight, bias = np.asarray(layer.weight, np.float32), np.asarray(layer.bias, np.float32)
        if not members:
            arrays[f"layers.{i}.weight"], arrays[f"layers.{i}.bias"] = weight, bias
            continue
        for k in range(weight.shape[0]):
            arrays[f"members.{k}.layers.{i}.weight"] = weight[k]
            arrays[f"members.{k}.layers.{i}.bias"] = bias[k]
    return arrays


def to_safetensors(models: MLP, config: TrainConfig) -> bytes:
    """The weights as a safetensors file, the config (JSON) in its metadata."""
    from safetensors.numpy import save

    meta = {"config": config.to_json(), "activation": "gelu_tanh", "format": "eqx_fmnist"}
    return save(weight_arrays(models), metadata=meta)


def numpy_forward(arrays: dict[str, np.ndarray], images: np.ndarray) -> np.ndarray:
    """Logits from named weights with numpy alone (an ensemble: log mean probabilities):
    the reference that checks a safetensors export, independent of JAX and Equinox."""
    prefixes = sorted({k.rsplit("layers.", 1)[0] for k in arrays})
    probs = []
    for prefix in prefixes:
        x = images.astype(np.float32) / 255.0
        n = len({k for k in arrays if k.startswith(prefix + "layers.")}) // 2
        for i in range(n):
            x = x @ arrays[f"{prefix}layers.{i}.weight"].T + arrays[f"{prefix}layers.{i}.bias"]
            if i < n - 1:  # GELU, tanh form (jax.nn.gelu's default)
                x = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
        e = np.exp(x - x.max(axis=1, keepdims=True))
        probs.append(e / e.sum(axis=1, keepdims=True))
    if len(prefixes) == 1 and prefixes[0] == "":
        return x
    return np.log(np.mean(probs, axis=0))


def torch_state_dict(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One model's weights renamed for `nn.Sequential(Linear, GELU("tanh"), Linear,
    GELU("tanh"), Linear)`: layer `i` is module `2 * i`."""
    renamed = {}
    for name, array in arrays.items():
        _, i, kind = name.split(".")
        renamed[f"{2 * int(i)}.{kind}"] = array
    return renamed


# --------------------------------------------------------------------------- export


@dataclasses.dataclass(frozen=True)
class Parity:
    """How an export agrees with the library on the check images."""

    images: int
    mismatches: int
    max_logit_difference: float


def check_parity(ours: np.ndarray, theirs: np.ndarray) -> Parity:
    """Compare the library's logits with an artifact's on the same images."""
    mismatches = int(np.sum(ours.argmax(-1) != theirs.argmax(-1)))
    return Parity(len(ours), mismatches, float(np.max(np.abs(ours - theirs))))


def export_model(
    models: MLP,
    policy: Policy,
    config: TrainConfig,
    path: str | os.PathLike,
    *,
    check_images: np.ndarray,
    format: Format = "stablehlo",
    temperature: float = 1.0,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Export, check on `check_images`, and only then write the artifact and its manifest.

    **Arguments:**

    - `models`: the model, or the stacked model of an ensemble.
    - `policy`: the precision policy of the forward pass (StableHLO keeps it; the
        safetensors weights are float32).
    - `config`: the run's config (into the manifest and the safetensors metadata).
    - `path`: the artifact to write; the manifest goes to `PATH.manifest.json`.
    - `check_images`: `uint8` images of shape `(n, 784)` to check on, e.g. all 10,000
        test images.
    - `format`: `"stablehlo"` or `"safetensors"`. Defaults to `"stablehlo"`.
    - `temperature`: the run's calibrated temperature, applied to the StableHLO
        artifact's probabilities and recorded in the manifest. Defaults to `1`: raw.
    - `extra`: more manifest entries, e.g. the run's test accuracy.

    **Returns:**

    The manifest, as written.

    **Raises:**

    `ExportError` if the artifact predicts a different class from the library for any
    check image; nothing is written then.
    """
    if format not in SUFFIXES:
        raise ExportError(f"unknown export format {format!r}; choose one of {', '.join(SUFFIXES)}.")
    path, start = Path(path), time.perf_counter()
    images = np.asarray(check_images, np.uint8).reshape(len(check_images), IMAGE_SIZE)
    # The weights are float32, and are checked as such: a consumer (numpy here, PyTorch)
    # runs them in float32, whatever precision the run computed in.
    checked = policy if format == "stablehlo" else FLOAT32
    ours = np.asarray(predict_logits(to_local(models), jnp.asarray(images), policy=checked))
    if format == "stablehlo":
        blob = to_stablehlo(models, policy, temperature=temperature)
        theirs, _ = run_stablehlo(blob, images)
    else:
        from safetensors.numpy import load

        blob = to_safetensors(models, config)
        theirs = numpy_forward(load(blob), images)
    parity = check_parity(ours, theirs)
    if parity.mismatches:
        raise ExportError(
            f"the {format} export predicts another class than the library for "
            f"{parity.mismatches} of {parity.images:,} images (largest logit difference "
            f"{parity.max_logit_difference:.2e}); nothing was written."
        )
    manifest = {
        "format": format,
        "artifact": path.name,
        "sha256": hashlib.sha256(blob).hexdigest(),
        "bytes": len(blob),
        "class_names": list(CLASS_NAMES),
        "input": {"name": "images", "dtype": "uint8", "shape": ["b", IMAGE_SIZE],
                  "meaning": "28 x 28 pixels row by row, 0-255, light item on dark"},
        "outputs": ["logits float32[b, 10]", "probabilities float32[b, 10]"]
        if format == "stablehlo" else None,
        "platforms": list(PLATFORMS) if format == "stablehlo" else None,
        "members": num_members(models),
        "precision": config.precision,
        "checked_with": str(checked),  # the policy the library ran the check in
        "temperature": temperature,
        "config": config.to_dict(),
        "parity": dataclasses.asdict(parity),
        "export_seconds": time.perf_counter() - start,
        "versions": {"jax": jax.__version__, "equinox": eqx.__version__},
        **(extra or {}),
    }  # fmt: skip
    with atomic_write(path) as f:
        f.write(blob)
    with atomic_write(manifest_path(path), "w") as f:
        f.write(json.dumps(manifest, indent=2) + "\n")
    return manifest


# --------------------------------------------------------------------------- loading


@dataclasses.dataclass(frozen=True)
class Artifact:
    """A loaded StableHLO artifact and its manifest; call it on `uint8` images."""

    path: Path
    manifest: dict[str, Any]
    exported: Any

    def __call__(self, images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`(logits, probabilities)` for `uint8` images of shape `(n, 784)` or
        `(n, 28, 28)`.

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
        logits, probs = self.exported.call(jnp.asarray(flat))
        return np.asarray(logits), np.asarray(probs)


def load_artifact(path: str | os.PathLike) -> Artifact:
    """Load a StableHLO artifact, checking it against its manifest's SHA-256.

    **Raises:**

    `ExportError` for a missing artifact or manifest, a checksum that differs, or a
    file that is not a StableHLO export.
    """
    path = Path(path)
    try:
        blob = path.read_bytes()
        manifest = json.loads(manifest_path(path).read_text())
    except FileNotFoundError as e:
        raise ExportError(f"{e.filename} does not exist; export the model first.") from None
    except (OSError, ValueError) as e:
        raise ExportError(f"cannot read the artifact {path} or its manifest: {e}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != "stablehlo":
        raise ExportError(f"{manifest_path(path)} is not the manifest of a StableHLO export.")
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
