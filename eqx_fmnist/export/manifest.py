"""Where an artifact's manifest lives, and the one error an export raises."""

import hashlib
import json
import os
from pathlib import Path
from typing import Any

MANIFEST_SUFFIX = ".manifest.json"


class ExportError(ValueError):
    """An export failed its check, or an artifact is missing, corrupt or not one."""


def manifest_path(path: str | os.PathLike) -> Path:
    """The manifest beside an artifact: `PATH.manifest.json`."""
    path = Path(path)
    return path.with_name(path.name + MANIFEST_SUFFIX)


EXPORT_SUFFIXES = (".stablehlo", ".safetensors", ".onnx", ".html")
"""The names the exports give their files (`model.stablehlo`, ...)."""


def is_export(path: str | os.PathLike) -> bool:
    """Whether `path` is an artifact: a file with its manifest beside it (not a run
    folder or a checkpoint).

    **Raises:**

    `ExportError` for a file named as an export whose manifest is not beside it: it is
    an artifact that cannot be read, not a checkpoint.
    """
    path = Path(path)
    if not path.is_file():
        return False
    if manifest_path(path).is_file():
        return True
    if path.suffix in EXPORT_SUFFIXES:
        raise ExportError(
            f"{path} is named as an export, but its manifest {manifest_path(path).name} is "
            "not beside it (it says how to read the artifact): copy it there, or export "
            "the model again."
        )
    return False


SELF_CHECK = "manifest_sha256"
"""The manifest's entry that holds the SHA-256 of the rest of it (`sealed`)."""


def sealed(manifest: dict[str, Any]) -> dict[str, Any]:
    """`manifest` with its own checksum: the SHA-256 of its canonical JSON (keys sorted),
    so that an edited manifest (a threshold, a coverage) is told from the one the export
    checked and wrote."""
    return manifest | {SELF_CHECK: _digest(manifest)}


def _digest(manifest: dict[str, Any]) -> str:
    rest = {k: v for k, v in manifest.items() if k != SELF_CHECK}
    return hashlib.sha256(json.dumps(rest, sort_keys=True).encode()).hexdigest()


def read_manifest(path: str | os.PathLike) -> dict[str, Any]:
    """The manifest of the artifact at `path`, checked against its own checksum (a
    manifest of an earlier version, without one, is taken as it is): the one reader of a
    manifest.

    **Raises:**

    `ExportError` naming the manifest when it is missing, unreadable, not a JSON object,
    or edited since it was written.
    """
    file = manifest_path(path)
    try:
        manifest = json.loads(file.read_text())
    except FileNotFoundError:
        raise ExportError(f"{file} does not exist; export the model first.") from None
    except (OSError, ValueError) as e:
        raise ExportError(
            f"cannot read the manifest {file}: {e}; export the model again."
        ) from None
    if not isinstance(manifest, dict):
        raise ExportError(f"{file} is not an export's manifest (not a JSON object).")
    if SELF_CHECK in manifest and manifest[SELF_CHECK] != _digest(manifest):
        raise ExportError(
            f"{file} was edited since it was written (its {SELF_CHECK} differs): its "
            "numbers cannot be trusted; export the model again."
        )
    return manifest
