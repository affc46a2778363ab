"""Figures of data and training: example grids, training curves, the folds' curves,
predictions, sweep heatmaps and throughput bars."""

from collections.abc import Sequence

import numpy as np
from jaxtyping import Float, Integer, UInt8
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from ..data import CLASS_NAMES, NUM_CLASSES
from .figure import image_grid, new_figure


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
    """
    fig = new_figure(10.0, 4.6, grid=True)
    first = [np.nonzero(labels == c)[0] for c in range(NUM_CLASSES)]
    image_grid(
        fig,
        [images[w[0]] if w.size else None for w in first],
        [(f"{c}: {class_names[c]}", "black") for c in range(NUM_CLASSES)],
        cols=5,
        box=(0.01, 0.01, 0.99, 0.93),
        gaps=(0.08, 0.15),
        fontsize=11,
    )
    return fig


def plot_training_curve(
    steps: Integer[np.ndarray, " k"] | Sequence[int],
    loss: Float[np.ndarray, " k"] | Sequence[float],
    accuracy: Float[np.ndarray, " k"] | Sequence[float],
    *,
    title: str = "Training",
) -> Figure:
    """Training loss (left axis) and batch accuracy (right axis) against the step.

    **Arguments:**

    - `steps`, `loss`, `accuracy`: one value per logging interval, shape `(k,)`.
    - `title`: the figure title. Defaults to `"Training"`.
    """
    fig = new_figure(7.0, 4.0)
    ax = fig.subplots()
    ax.plot(steps, loss, color="tab:blue", marker="o", markersize=3, label="loss")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (interval mean)", color="tab:blue")
    ax.tick_params(axis="y", labelcolor="tab:blue")
    ax.grid(alpha=0.3)
    ax2 = ax.twinx()
    ax2.plot(steps, accuracy, color="tab:orange", marker="s", markersize=3, label="accuracy")
    ax2.set_ylabel("batch accuracy (interval mean)", color="tab:orange")
    ax2.tick_params(axis="y", labelcolor="tab:orange")
    ax.set_title(title)
    return fig


def plot_folds(
    steps: Sequence[int],
    accuracy: Float[np.ndarray, "folds k"],
    loss: Float[np.ndarray, "folds k"],
    *,
    title: str = "Cross-validation",
) -> Figure:
    """Each fold's held-out accuracy (left) and training loss (right) against the step."""
    fig = new_figure(10.0, 3.8)
    left, right = fig.subplots(1, 2)
    for i, (a, each) in enumerate(zip(accuracy, loss, strict=True)):
        left.plot(steps, a, marker="o", markersize=3, label=f"fold {i}")
        right.plot(steps, each, marker="o", markersize=3, label=f"fold {i}")
    left.set(xlabel="step", ylabel="accuracy on its held-out fold")
    right.set(xlabel="step", ylabel="training loss (interval mean)")
    for ax in (left, right):
        ax.grid(alpha=0.3)
    left.legend(fontsize=8)
    fig.suptitle(title)
    return fig


def plot_predictions(
    images: UInt8[np.ndarray, "n 28 28"],
    labels: Integer[np.ndarray, " n"],
    predictions: Integer[np.ndarray, " n"],
    *,
    class_names: Sequence[str] = CLASS_NAMES,
    rows: int = 5,
    cols: int = 5,
    notes: Sequence[str] | None = None,
    title: str = "predicted / true",
) -> Figure:
    """A grid of images titled "predicted / true", green when right and red when wrong
    (a label audit's suspects: "suggested / given", with a note under each).

    **Arguments:**

    - `images`: at least `rows * cols` images of shape `(28, 28)`.
    - `labels`, `predictions`: their true and predicted classes.
    - `class_names`: names for the titles. Defaults to `CLASS_NAMES`.
    - `rows`, `cols`: the grid. Defaults to 5 x 5.
    - `notes`: a line under each title. Defaults to `None`: none.
    - `title`: the figure's. Defaults to `"predicted / true"`.
    """
    height = 2.35 * rows + 0.3
    fig = new_figure(2.2 * cols, height, grid=True)
    cells = []
    titles = []
    for i in range(rows * cols):
        if i >= len(images) or labels[i] < 0:  # a negative label: an empty cell
            cells.append(None)
            titles.append(("", "black"))
            continue
        cells.append(images[i])
        note = f"\n{notes[i]}" if notes is not None else ""
        titles.append(
            (
                f"{class_names[predictions[i]]}\n/ {class_names[labels[i]]}{note}",
                "tab:green" if predictions[i] == labels[i] else "tab:red",
            )
        )
    # Inches kept free above the grid: the figure's title and the first row's titles.
    top = 1 - (0.75 if notes is None else 1.0) / height
    image_grid(
        fig,
        cells,
        titles,
        cols=cols,
        box=(0.01, 0.01, 0.99, top),
        gaps=(0.1, 0.25 if notes is None else 0.45),
        fontsize=9,
    )
    fig.suptitle(title)
    return fig


def plot_heatmap(
    values: Float[np.ndarray, "rows cols"],
    *,
    row_labels: Sequence[str],
    col_labels: Sequence[str],
    row_name: str,
    col_name: str,
    title: str,
    value_name: str = "validation accuracy",
    min_span: float = 0.0,
) -> Figure:
    """A grid of numbers (e.g. a sweep's validation accuracy over two hyperparameters),
    each written in its cell, the best outlined.

    **Arguments:**

    - `values`: shape `(rows, cols)`; NaN cells are left blank.
    - `row_labels`, `col_labels`: the tick labels; `row_name`, `col_name`: the axes.
    - `title`: the figure's title; `value_name`: the colour bar's label.
    - `min_span`: the colour scale spans at least this much around the values' middle,
        so that differences smaller than the noise do not look like the whole range.
        Defaults to `0.0`: the values' own range.
    """
    values = np.asarray(values, dtype=float)
    rows, cols = values.shape
    fig = new_figure(1.6 + 1.3 * cols, 1.4 + 0.75 * rows)
    ax = fig.subplots()
    low, high = (np.nanmin(values), np.nanmax(values)) if np.isfinite(values).any() else (0, 1)
    if high - low < min_span:
        centre = (high + low) / 2
        low, high = centre - min_span / 2, centre + min_span / 2
    image = ax.imshow(values, cmap="viridis", aspect="auto", vmin=low, vmax=high)
    ax.set_xticks(np.arange(cols), col_labels)
    ax.set_yticks(np.arange(rows), row_labels)
    ax.set_xlabel(col_name)
    ax.set_ylabel(row_name)
    middle = np.nanmean(values) if np.isfinite(values).any() else 0.0
    for r in range(rows):
        for c in range(cols):
            if np.isfinite(values[r, c]):
                color = "black" if values[r, c] > middle else "white"
                ax.text(c, r, f"{values[r, c]:.4f}", ha="center", va="center", color=color)
    if np.isfinite(values).any():
        r, c = np.unravel_index(np.nanargmax(values), values.shape)
        ax.add_patch(Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=2))
    fig.colorbar(image, ax=ax, label=value_name, shrink=0.8)
    ax.set_title(title)
    return fig


def plot_throughput(
    names: Sequence[str],
    values: Sequence[float],
    *,
    unit: str = "examples/sec",
    title: str = "Training throughput",
    bound: float | None = None,
) -> Figure:
    """Horizontal bars, one per variant, each labelled with its value and unit.

    **Arguments:**

    - `names`, `values`: the variants and their throughputs.
    - `unit`: the unit of `values`. Defaults to `"examples/sec"`.
    - `title`: the figure title.
    - `bound`: an upper bound to draw as a dashed line (e.g. the matmul bound).
    """
    fig = new_figure(8.0, 0.55 * len(names) + 1.6)
    ax = fig.subplots()
    y = np.arange(len(names))
    ax.barh(y, values, color="tab:blue")
    ax.set_yticks(y, names)
    ax.invert_yaxis()
    top = max([*values, bound or 0.0])
    for yi, v in zip(y, values, strict=True):
        ax.text(v + 0.01 * top, float(yi), f"{v:,.0f} {unit}", va="center", fontsize=9)
    if bound is not None:
        ax.axvline(bound, color="tab:red", linestyle="--", label=f"bound {bound:,.0f}")
        ax.legend(loc="lower right")
    ax.set_xlim(0, top * 1.35)
    ax.set_xlabel(unit)
    ax.set_title(title)
    return fig
