"""Where an artifact's manifest lives, and the one error an export raises."""

import json
import os
from pathlib import Path

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


def read_manifest(path: str | os.PathLike) -> dict:
    """The manifest of the artifact at `path`.

    **Raises:**

    `ExportError` naming the manifest when it is missing, unreadable or not a JSON object.
    """
    file = manifest_path(path)
    try:
        manifest = json.loads(file.read_text())
    except (OSError, ValueError) as e:
        raise ExportError(
            f"cannot read the manifest {file}: {e}; export the model again."
        ) from None
    if not isinstance(manifest, dict):
        raise ExportError(f"{file} is not an export's manifest (not a JSON object).")
    return manifest
