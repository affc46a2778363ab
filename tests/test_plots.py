"""Figures from plain numpy: what each draws, checked on the figure's own artists."""

import numpy as np
import pytest


def test_the_heatmap_writes_every_cell_and_outlines_the_best():
    from matplotlib.patches import Rectangle

    from eqx_fmnist.plots import plot_heatmap

    values = np.array([[0.81, 0.83, np.nan], [0.85, 0.84, 0.80]])
    fig = plot_heatmap(
        values,
        row_labels=["a", "b"],
        col_labels=["x", "y", "z"],
        row_name="r",
        col_name="c",
        title="t",
    )
    ax = fig.axes[0]
    texts = sorted(t.get_text() for t in ax.texts)
    assert texts == sorted(f"{v:.4f}" for v in values[np.isfinite(values)])
    (box,) = [p for p in ax.patches if isinstance(p, Rectangle) and not p.get_fill()]
    assert box.get_xy() == (-0.5, 0.5)  # column 0, row 1: the best, 0.85


@pytest.mark.figures
def test_one_example_per_class_grid(real_data, tmp_path):
    from eqx_fmnist.plots import plot_examples, save_figure

    fig = plot_examples(real_data.train_images, real_data.train_labels)
    path = save_figure(fig, tmp_path / "examples.png")
    blob = path.read_bytes()
    assert blob.startswith(b"\x89PNG\r\n\x1a\n") and len(blob) > 10_000
    # Trousers are tall and narrow, bags wide: a check that images match their labels.
    trousers = real_data.train_images[real_data.train_labels == 1].mean(0)
    bags = real_data.train_images[real_data.train_labels == 8].mean(0)
    assert trousers[16:, 13:15].mean() < trousers[16:, 8:11].mean()  # the gap between the legs
    assert bags[20:26].mean() > trousers[20:26].mean()
