"""Why the model confuses what it confuses: for the class pairs the test confusion matrix
shows most confused, one test image it gets right and the one it gets most confidently
wrong, each with its integrated-gradients map (what pushed it to the class it said, and,
for the wrong one, to the class it should have said).

The default recipe (seed 0) trains on all 60,000 training images; pairs are ranked by
how many test images of the true class went to the other (true -> said). For each pair
the right image is the true class's most confident correct answer among those whose
second guess is the other class (the look-alike that still came out right), the wrong
one the image of the true class given the other class with the highest probability.

    python benchmarks/confused_pairs.py [--pairs 4] [--epochs 80]
        [--out benchmarks/results/confused_pairs.md] [--figure docs/images/confused-pairs.png]
"""

import argparse
from pathlib import Path

import jax.numpy as jnp
import numpy as np

import eqx_fmnist as ef

from harness import machine_line


def most_confused_pairs(cm: np.ndarray, count: int) -> list[tuple[int, int, int]]:
    """`(true, said, images)` of the `count` largest off-diagonal cells."""
    off = cm.copy()
    np.fill_diagonal(off, -1)
    order = np.argsort(off, axis=None)[::-1][:count]
    return [
        (int(i), int(j), int(off[i, j]))
        for i, j in zip(*np.unravel_index(order, cm.shape), strict=True)
    ]


def chosen(probs: np.ndarray, labels: np.ndarray, true: int, said: int) -> tuple[int, int]:
    """The indices of the right image and the confidently wrong one for a pair."""
    guess = probs.argmax(axis=1)
    second = np.argsort(probs, axis=1)[:, -2]
    right = np.flatnonzero((labels == true) & (guess == true) & (second == said))
    right = right if len(right) else np.flatnonzero((labels == true) & (guess == true))
    wrong = np.flatnonzero((labels == true) & (guess == said))
    return int(right[probs[right, true].argmax()]), int(wrong[probs[wrong, said].argmax()])


def draw(images, probs, pairs, maps, names, title):
    """One row per pair: the right image and its map, the wrong image, its map for the
    class it said and for the true class."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(pairs), 5, figsize=(12, 2.7 * len(pairs)), squeeze=False)
    for row, ((true, said, count), (right, wrong)) in enumerate(pairs):
        cells = [
            (images[right], None, f"right: {names[true]} {probs[right, true]:.0%}"),
            (images[right], maps[(right, true)], f"for {names[true]}"),
            (
                images[wrong],
                None,
                f"wrong: {names[said]} {probs[wrong, said]:.0%}\n"
                f"(is {names[true]}, {probs[wrong, true]:.0%})",
            ),
            (images[wrong], maps[(wrong, said)], f"for {names[said]} (said)"),
            (images[wrong], maps[(wrong, true)], f"for {names[true]} (true)"),
        ]
        for ax, (image, amap, label) in zip(axes[row], cells, strict=True):
            ax.set_axis_off()
            if amap is None:
                ax.imshow(image.reshape(28, 28), cmap="gray_r", vmin=0, vmax=255)
            else:
                scale = float(np.abs(amap).max()) or 1.0
                ax.imshow(image.reshape(28, 28), cmap="gray_r", vmin=0, vmax=255, alpha=0.35)
                ax.imshow(amap.reshape(28, 28), cmap="RdBu_r", vmin=-scale, vmax=scale, alpha=0.85)
            ax.set_title(label, fontsize=9)
        axes[row, 0].text(
            -0.15,
            0.5,
            f"{names[true]} -> {names[said]}\n{count} test images",
            transform=axes[row, 0].transAxes,
            ha="right",
            va="center",
            fontsize=10,
        )
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=80)
    parser.add_argument("--steps", type=int, help="a quick check: train this many steps")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/confused_pairs.md"))
    parser.add_argument("--figure", type=Path, default=Path("docs/images/confused-pairs.png"))
    args = parser.parse_args()
    data = ef.load_fashion_mnist()
    config = ef.TrainConfig(**({"steps": args.steps} if args.steps else {"epochs": args.epochs}))
    result = ef.fit(config, ef.split_data(data))
    images = data.test_images.reshape(len(data.test_images), -1)
    labels = data.test_labels.astype(int)
    probs = np.asarray(ef.predict_proba(result.model, jnp.asarray(images)))
    cm = np.asarray(ef.confusion_matrix(labels, probs.argmax(axis=1)))
    pairs = [(p, chosen(probs, labels, p[0], p[1])) for p in most_confused_pairs(cm, args.pairs)]
    wanted = sorted(
        {(right, t) for (t, _, _), (right, _) in pairs}  # (image, class) maps
        | {(wrong, c) for (t, s, _), (_, wrong) in pairs for c in (s, t)}
    )
    index = np.array([i for i, _ in wanted])
    e = ef.explain(result.model, images[index], target=np.array([c for _, c in wanted]))
    maps = {key: e.attributions[k] for k, key in enumerate(wanted)}
    title = (
        f"Default recipe ({config.epochs or config.steps} {'epochs' if config.epochs else 'steps'}"
        f", test accuracy {result.test.accuracy:.4f}): the most confused pairs; red pushed "
        "towards the class named, blue away"
    )
    fig = draw(images, probs, pairs, maps, ef.CLASS_NAMES, title)
    for folder in (args.out.parent, args.figure.parent):
        folder.mkdir(parents=True, exist_ok=True)
    figure = args.figure
    fig.savefig(figure, dpi=90)
    lines = [
        f"{machine_line()} {title}.",
        "",
        "| true -> said | test images | right (index, p) | wrong (index, p said, p true) | "
        "completeness error (largest of the pair's maps) |",
        "|---|---|---|---|---|",
    ]
    errors = dict(zip(wanted, e.completeness_error, strict=True))
    for (true, said, count), (right, wrong) in pairs:
        worst = max(errors[(right, true)], errors[(wrong, said)], errors[(wrong, true)])
        lines.append(
            f"| {ef.CLASS_NAMES[true]} -> {ef.CLASS_NAMES[said]} | {count} "
            f"| {right}, {probs[right, true]:.3f} | {wrong}, {probs[wrong, said]:.3f}, "
            f"{probs[wrong, true]:.3f} | {worst:.1e} |"
        )
    args.out.write_text("\n".join(lines) + f"\n\nFigure: `{figure}`.\n")
    print("\n".join(lines))
    print(f"wrote {args.out} and {figure}")


if __name__ == "__main__":
    main()
