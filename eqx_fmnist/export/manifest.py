"""Where an artifact's manifest lives, and the one error an export raises."""

import os
from pathlib import Path

MANIFEST_SUFFIX = ".manifest.json"


class ExportError(ValueError):
    """An export failed its check, or an artifact is missing, corrupt or not one."""


def manifest_path(path: str | os.PathLike) -> Path:
    """The manifest beside an artifact: `PATH.manifest.json`."""
    path = Path(path)
    return path.with_name(path.name + MANIFEST_SUFFIX)
