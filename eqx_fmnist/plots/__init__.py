"""Matplotlib figures from plain numpy arrays; no JAX needed to call them.

Each function returns a `matplotlib.figure.Figure`; save it with
[`save_figure`][eqx_fmnist.plots.figure.save_figure] (atomic) or `fig.savefig(...)`. Figures
are built with the object API on a non-interactive canvas, so they work without a
display and never touch pyplot's global state.

The modules: `figure` (the canvas, saving, inlining), `training` (data, curves, sweeps,
throughput), `answers` (attributions, confusion, reliability, sets, robustness).
"""

from .answers import (
    plot_confusion_matrix as plot_confusion_matrix,
    plot_explanation as plot_explanation,
    plot_reliability as plot_reliability,
    plot_robustness as plot_robustness,
    plot_sets as plot_sets,
)
from .figure import (
    figure_to_html as figure_to_html,
    new_figure as new_figure,
    save_figure as save_figure,
    save_pixels as save_pixels,
)
from .training import (
    plot_examples as plot_examples,
    plot_folds as plot_folds,
    plot_heatmap as plot_heatmap,
    plot_predictions as plot_predictions,
    plot_throughput as plot_throughput,
    plot_training_curve as plot_training_curve,
)
