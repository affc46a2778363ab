"""The figures' canvas: a `Figure` on a non-interactive Agg canvas (`new_figure`), saved
atomically as PNG (`save_figure`) or inlined in a page (`figure_to_html`)."""

import os
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ..fileio import atomic_write


def new_figure(width: float, height: float, *, grid: bool = False) -> Figure:
    """A figure on a non-interactive canvas; a `grid` of images without axes gets fixed
    margins (constrained layout would draw it twice to find the same ones)."""
    fig = Figure(figsize=(width, height), layout=None if grid else "constrained")
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig: Figure, path: str | os.PathLike, *, dpi: int = 120) -> Path:
    """Save `fig` as a PNG through a temporary file, so no half-written image is left.

    **Returns:**

    The path written.
    """
    path = Path(path)
    with atomic_write(path) as f:
        fig.savefig(f, format="png", dpi=dpi)
    return path


def figure_to_html(fig: Figure, *, alt: str = "figure", dpi: int = 100) -> str:
    """An `<img>` tag holding `fig` as an inline PNG, for notebooks and the docs."""
    import base64
    import io

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    data = base64.b64encode(buffer.getvalue()).decode()
    return f'<img alt="{alt}" src="data:image/png;base64,{data}">'
