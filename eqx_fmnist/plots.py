"""Matplotlib figures from plain numpy arrays; no JAX needed to call them.

Each function returns a `matplotlib.figure.Figure`; save it with
[`save_figure`][eqx_fmnist.plots.save_figure] (atomic) or `fig.savefig(...)`. Figures
are built with the object API on a non-interactive canvas, so they work without a
display and never touch pyplot's global state.
"""

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from jaxtyping import Float, Integer, UInt8
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from .data import CLASS_NAMES, NUM_CLASSES
from .fileio import atomic_write


def _figure(width: float, height: float, *, grid: bool = False) -> Figure:
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
    fig = _figure(10.0, 4.6, grid=True)
    axes = fig.subplots(2, 5, gridspec_kw=dict(left=0.01, right=0.99, bottom=0.01, top=0.93,
                                               wspace=0.08, hspace=0.15))  # fmt: skip
    for c, ax in enumerate(axes.flat[:NUM_CLASSES]):
        (where,) = np.nonzero(labels == c)
        ax.set_axis_off()
        if where.size:
            ax.imshow(images[where[0]], cmap="gray_r", vmin=0, vmax=255)
        ax.set_title(f"{c}: {class_names[c]}", fontsize=11)
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
    fig = _figure(7.0, 4.0)
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
    fig = _figure(10.0, 3.8)
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
    fig = _figure(2.2 * cols, height, grid=True)
    # Inches kept free above the grid: the figure's title and the first row's titles.
    axes = fig.subplots(rows, cols, squeeze=False, gridspec_kw=dict(
        left=0.01, right=0.99, bottom=0.01, top=1 - (0.75 if notes is None else 1.0) / height,
        wspace=0.1,
        hspace=0.25 if notes is None else 0.45))  # fmt: skip
    for i, ax in enumerate(axes.flat):
        ax.set_axis_off()
        if i >= len(images) or labels[i] < 0:  # a negative label: an empty cell
            continue
        ax.imshow(images[i], cmap="gray_r", vmin=0, vmax=255)
        right = predictions[i] == labels[i]
        note = f"\n{notes[i]}" if notes is not None else ""
        ax.set_title(f"{class_names[predictions[i]]}\n/ {class_names[labels[i]]}{note}",
                     color="tab:green" if right else "tab:red", fontsize=9)  # fmt: skip
    fig.suptitle(title)
    return fig


def plot_explanation(
    image: UInt8[np.ndarray, "28 28"],
    attributions: Float[np.ndarray, "28 28"],
    probabilities: Float[np.ndarray, " classes"],
    target: int,
    *,
    class_names: Sequence[str] = CLASS_NAMES,
    top: int = 3,
    title: str | None = None,
) -> Figure:
    """The `uint8` 28 x 28 `image`, its `attributions` over it (an
    [`Explanation`][eqx_fmnist.attributions.Explanation]'s row as 28 x 28; red raised the
    score of class `target`, blue lowered it, on one symmetric scale), and the `top`
    classes by `probabilities` (default 3); `title` defaults to the class explained."""
    fig = _figure(9.5, 3.6)
    ax_image, ax_map, ax_bars = fig.subplots(1, 3, gridspec_kw=dict(width_ratios=[1, 1, 1.2]))
    for ax in (ax_image, ax_map):
        ax.set_axis_off()
    ax_image.imshow(image, cmap="gray_r", vmin=0, vmax=255)
    ax_image.set_title("the input")
    scale = float(np.abs(attributions).max()) or 1.0
    ax_map.imshow(image, cmap="gray_r", vmin=0, vmax=255, alpha=0.35)
    shown = ax_map.imshow(attributions, cmap="RdBu_r", vmin=-scale, vmax=scale, alpha=0.85)
    fig.colorbar(shown, ax=ax_map, shrink=0.8)
    ax_map.set_title(f"red: for {class_names[target]}, blue: against", fontsize=9)
    order = np.argsort(probabilities)[::-1][:top]
    ax_bars.barh([class_names[c] for c in order][::-1], probabilities[order][::-1],
                 color=["tab:red" if c == target else "tab:gray" for c in order][::-1])  # fmt: skip
    ax_bars.set(xlim=(0, 1), xlabel="probability")
    fig.suptitle(title or f"why {class_names[target]}?")
    return fig


def plot_confusion_matrix(
    cm: Integer[np.ndarray, "k k"],
    *,
    class_names: Sequence[str] = CLASS_NAMES,
    title: str | None = None,
) -> Figure:
    """The confusion matrix, each row normalised by its true class's count.

    Percentages are written on the diagonal and in every cell of 8% or more.

    **Arguments:**

    - `cm`: counts, rows true classes, columns predicted classes.
    - `class_names`: axis labels. Defaults to `CLASS_NAMES`.
    - `title`: defaults to the overall accuracy.
    """
    cm = np.asarray(cm)
    rates = cm / np.maximum(cm.sum(axis=1, keepdims=True), 1)
    fig = _figure(8.0, 7.0)
    ax = fig.subplots()
    image = ax.imshow(rates, cmap="Blues", vmin=0, vmax=1)
    k = len(cm)
    ticks = np.arange(k)
    ax.set_xticks(ticks, class_names[:k], rotation=45, ha="right")
    ax.set_yticks(ticks, class_names[:k])
    ax.set_xlabel("predicted class")
    ax.set_ylabel("true class")
    for t in range(k):
        for p in range(k):
            if t == p or rates[t, p] >= 0.08:
                ax.text(
                    p,
                    t,
                    f"{100 * rates[t, p]:.0f}%",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white" if rates[t, p] > 0.5 else "black",
                )
    fig.colorbar(image, ax=ax, label="fraction of the true class", shrink=0.8)
    accuracy = np.trace(cm) / max(cm.sum(), 1)
    ax.set_title(title or f"Confusion matrix: accuracy {accuracy:.2%} of {cm.sum():,} images")
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
    fig = _figure(1.6 + 1.3 * cols, 1.4 + 0.75 * rows)
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


def plot_reliability(
    curves: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]],
    *,
    title: str = "Reliability: accuracy against confidence",
) -> Figure:
    """A reliability diagram: for each confidence bin, the accuracy of its examples
    against their mean confidence (the diagonal is perfect calibration), and below, how
    many examples each bin holds.

    **Arguments:**

    - `curves`: label -> `(bin_confidence, bin_accuracy, bin_count)`, e.g.
        `{"raw, ECE 0.066": (...), "T = 0.73, ECE 0.018": (...)}`; empty bins are NaN.
    - `title`: the figure's title.
    """
    fig = _figure(6.0, 6.5)
    top, bottom = fig.subplots(2, 1, height_ratios=(3, 1), sharex=True)
    top.plot([0, 1], [0, 1], color="grey", linestyle="--", linewidth=1, label="perfect")
    for label, (confidence, accuracy, count) in curves.items():
        keep = np.asarray(count) > 0
        conf, acc = np.asarray(confidence)[keep], np.asarray(accuracy)[keep]
        top.plot(conf, acc, marker="o", label=label)
        bottom.plot(conf, np.asarray(count)[keep], marker=".", label=label)
    top.set_ylabel("accuracy in the bin")
    top.set_xlim(0, 1)
    top.set_ylim(0, 1)
    top.legend(loc="upper left")
    top.set_title(title)
    bottom.set_yscale("log")
    bottom.set_xlabel("confidence (top-class probability), mean of the bin")
    bottom.set_ylabel("examples")
    return fig


def plot_sets(
    class_coverage: Sequence[float],
    class_size: Sequence[float],
    coverage: float,
    *,
    class_names: Sequence[str] = CLASS_NAMES,
    title: str = "Prediction sets on the test images",
) -> Figure:
    """Conformal prediction sets by true class: `class_coverage`, the share whose set
    holds the true class, against the `coverage` asked for (a dashed line), and
    `class_size`, the mean set size."""
    fig = _figure(7.0, 5.5)
    top, bottom = fig.subplots(2, 1, sharex=True)
    covered, where = np.asarray(class_coverage), np.arange(len(class_coverage))
    top.bar(where, covered, color=np.where(covered < coverage, "tab:red", "tab:blue"))
    top.axhline(coverage, color="black", linestyle="--", linewidth=1)
    top.text(len(covered) - 0.5, coverage, f"target {coverage:.0%}", ha="right", va="bottom")
    top.set_ylim(max(0.0, min(covered.min(), coverage) - 0.1), 1.0)
    top.set(ylabel="coverage (red: below the target)", title=title)
    bottom.bar(where, class_size, color="tab:gray")
    bottom.set(ylabel="mean set size")
    bottom.set_xticks(where, class_names, rotation=45, ha="right")
    return fig


def plot_robustness(
    shifts: Sequence[int],
    shifted: Sequence[float],
    *,
    mirrored: float,
    title: str = "Accuracy on moved test images",
) -> Figure:
    """Accuracy against the shift, in pixels (0: the images as they are), with the
    mirrored images' accuracy as a dashed line.

    **Arguments:**

    - `shifts`: pixel distances, `0` first.
    - `shifted`: the accuracy at each.
    - `mirrored`: the accuracy on mirrored images.
    - `title`: the figure's title.
    """
    fig = _figure(5.5, 4.0)
    ax = fig.subplots()
    ax.plot(list(shifts), list(shifted), marker="o", label="shifted (mean of 4 directions)")
    ax.axhline(mirrored, color="tab:orange", linestyle="--", label=f"mirrored: {mirrored:.3f}")
    for x, y in zip(shifts, shifted, strict=True):
        ax.annotate(f"{y:.3f}", (x, y), textcoords="offset points", xytext=(0, 6), ha="center")
    ax.set_xticks(list(shifts))
    ax.set_xlabel("shift (pixels)")
    ax.set_ylabel("test accuracy")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower left")
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
    fig = _figure(8.0, 0.55 * len(names) + 1.6)
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
