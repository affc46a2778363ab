"""Matplotlib figures from plain numpy arrays; no JAX needed to call them.

Each function returns a `matplotlib.figure.Figure`; save it with
[`save_figure`][eqx_fmnist.plots.save_figure] (atomic) or `fig.savefig(...)`. Figures
are built with the object API on a non-interactive canvas, so they work without a
display and never touch pyplot's global state.
"""

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from jaxtyping import Integer, UInt8
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from .data import CLASS_NAMES, NUM_CLASSES


def _figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig: Figure, path: str | os.PathLike, *, dpi: int = 120) -> Path:
    """Save `fig` as a PNG through a temporary file, so no half-written image is left.

    **Returns:**

    The path written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as f:
            fig.savefig(f, format="png", dpi=dpi)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def plot_examples(
    images: UInt8[np.ndarray, "n 28 28"],
    labels: Integer[np.ndarray, " n"],
    *,
    class_names: Sequence[str] = CLASS_NAMES,
) -> Figure:
    """One example of each class in a 2 x 5 grid, the class name above each.

    **Arguments:**

    - `images`: images of shape `(n, 28, 28)`; the first of each class is shown.
    - `labels`: their labels, shape `(n,)`.
    - `class_names`: names for the titles. Defaults to `CLASS_NAMES`.

    **Returns:**

    The figure.
    """
    fig = _figure(10.0, 4.6)
    axes = fig.subplots(2, 5)
    for c, ax in enumerate(axes.flat[:NUM_CLASSES]):
        (where,) = np.nonzero(labels == c)
        ax.set_axis_off()
        if where.size:
            ax.imshow(images[where[0]], cmap="gray_r", vmin=0, vmax=255)
        ax.set_title(f"{c}: {class_names[c]}", fontsize=11)
    return fig
