"""Figures of what a model answers: attributions, the confusion matrix, reliability,
prediction sets and robustness to moved images."""

from collections.abc import Sequence

import numpy as np
from jaxtyping import Float, Integer, UInt8
from matplotlib.figure import Figure

from ..data import CLASS_NAMES
from .figure import new_figure


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
    fig = new_figure(9.5, 3.6)
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
    ax_bars.barh(
        [class_names[c] for c in order][::-1],
        probabilities[order][::-1],
        color=["tab:red" if c == target else "tab:gray" for c in order][::-1],
    )
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
    fig = new_figure(8.0, 7.0)
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
    fig = new_figure(6.0, 6.5)
    top, bottom = fig.subplots(2, 1, height_ratios=(3, 1), sharex=True)
    top.plot([0, 1], [0, 1], color="grey", linestyle="--", linewidth=1, label="perfect")
    for label, (confidence, accuracy, count) in curves.items():
        keep = np.asarray(count) > 0
        conf = np.asarray(confidence)[keep]
        acc = np.asarray(accuracy)[keep]
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
    fig = new_figure(7.0, 5.5)
    top, bottom = fig.subplots(2, 1, sharex=True)
    covered = np.asarray(class_coverage)
    where = np.arange(len(class_coverage))
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
    fig = new_figure(5.5, 4.0)
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
