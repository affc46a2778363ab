"""The figures' canvas: a `Figure` on a non-interactive Agg canvas (`new_figure`), saved
atomically as PNG (`save_figure`) or inlined in a page (`figure_to_html`); an image's pixels enlarged (`save_pixels`)."""

import os
from collections.abc import Sequence
from pathlib import Path

import matplotlib
import numpy as np
from jaxtyping import UInt8
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ..fileio import atomic_write


def new_figure(width: float, height: float, *, grid: bool = False) -> Figure:
    """A figure on a non-interactive canvas; a `grid` of images without axes gets fixed
    margins (constrained layout would draw it twice to find the same ones)."""
    fig = Figure(figsize=(width, height), layout=None if grid else "constrained")
    FigureCanvasAgg(fig)
    return fig


def image_grid(
    fig: Figure,
    images: Sequence[UInt8[np.ndarray, "28 28"] | None],
    titles: Sequence[tuple[str, str]],
    *,
    cols: int,
    box: tuple[float, float, float, float],
    gaps: tuple[float, float],
    fontsize: int,
) -> None:
    """Images in a grid drawn as one picture on one axes, each with its title above it:
    an axes per image would make matplotlib lay out and draw a few hundred hidden ticks.

    **Arguments:**

    - `fig`: the figure (from `new_figure(..., grid=True)`).
    - `images`: one `(28, 28)` image per cell, row by row; `None` leaves a cell empty.
    - `titles`: `(text, colour)` per cell.
    - `cols`: cells per row.
    - `box`: `(left, bottom, right, top)` of the grid, in figure fractions.
    - `gaps`: `(across, down)` between cells, in fractions of a cell, at least: the
        cells spread over the box.
    - `fontsize`: the titles'.
    """
    rows = -(-len(images) // cols)
    left, bottom, right, top = box
    width, height = fig.get_size_inches() * (right - left, top - bottom)
    # Square pixels as large as the box allows, the cells spread over it (never closer
    # than `gaps`).
    inch = min(width / (28 * (1 + gaps[0]) * cols), height / (28 * (1 + gaps[1]) * rows))
    step_x, step_y = width / inch / cols, height / inch / rows
    canvas = np.full((round(step_y * rows), round(step_x * cols)), np.nan)
    ax = fig.add_axes((left, bottom, right - left, top - bottom))
    ax.set_axis_off()
    for i, (image, (text, colour)) in enumerate(zip(images, titles, strict=True)):
        y, x = round(step_y * (i // cols) + 28 * gaps[1]), round(step_x * (i % cols))
        if image is not None:
            canvas[y : y + 28, x : x + 28] = image
        ax.text(x + 13.5, y - 1.5, text, ha="center", va="bottom", color=colour, fontsize=fontsize)
    cmap = matplotlib.colormaps["gray_r"].with_extremes(bad="white")
    ax.imshow(np.ma.masked_invalid(canvas), cmap=cmap, vmin=0, vmax=255, interpolation="nearest")
    ax.set_xlim(-0.5 - (step_x - 28) / 2, canvas.shape[1] - (step_x - 28) / 2 - 0.5)


def save_figure(fig: Figure, path: str | os.PathLike, *, dpi: int = 120) -> Path:
    """Save `fig` as a PNG through a temporary file, so no half-written image is left.

    **Returns:**

    The path written.
    """
    path = Path(path)
    with atomic_write(path) as f:
        fig.savefig(f, format="png", dpi=dpi)
    return path


def save_pixels(
    pixels: UInt8[np.ndarray, "h w"], path: str | os.PathLike, *, scale: int = 8
) -> Path:
    """An image's pixels as a PNG, enlarged `scale` times without smoothing (what a
    model saw), written atomically."""
    from PIL import Image  # matplotlib's own dependency

    height, width = pixels.shape
    big = Image.fromarray(pixels).resize((width * scale, height * scale), Image.Resampling.NEAREST)
    with atomic_write(path) as f:
        big.save(f, format="PNG")
    return Path(path)


class InlineFigure(str):
    """A figure as an `<img>` tag holding an inline PNG (a `str`: `print` writes the tag,
    which a page built from printed HTML shows), that a notebook displays as the image
    (IPython's `_repr_png_`). Its `repr` is the image's alt text."""

    alt: str

    def __new__(cls, png: bytes, alt: str) -> "InlineFigure":
        import base64

        data = base64.b64encode(png).decode()
        tag = super().__new__(cls, f'<img alt="{alt}" src="data:image/png;base64,{data}">')
        tag.alt = alt
        return tag

    def _repr_png_(self) -> bytes:
        import base64

        return base64.b64decode(self.split("base64,", 1)[1].rstrip('">'))

    def __repr__(self) -> str:
        return self.alt


def figure_to_html(fig: Figure, *, alt: str = "figure", dpi: int = 100) -> InlineFigure:
    """`fig` as an inline PNG: an `<img>` tag to print into a page, which a notebook
    shows as the image ([`InlineFigure`][eqx_fmnist.plots.figure.InlineFigure])."""
    import io

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return InlineFigure(buffer.getvalue(), alt)
