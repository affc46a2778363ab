"""How far to trust a prediction, measured: calibration before and after temperature
scaling, what holding images out costs, the trust flag's rates, and photos through a
naive preparation and `prepare_image`.

1. The recipe with `calibration_size=5000`, three seeds: test NLL, Brier and ECE (15 bins)
   raw and at the fitted temperature; test accuracy against the same seeds trained on
   all 60,000 images.
2. The trust flag on the 10,000 test images and on generated images that are clearly not
   clothing: uniform noise, blank frames of one grey level, digits drawn with PIL.
3. Photo-like PNGs (a dark item on a white page, off-centre, non-square) prepared by the
   naive pipeline (pad to a square, resize) and by `prepare_image`; the figure shows both.

    python benchmarks/calibration.py [--seeds 0 1 2] [--steps N] [--out benchmarks/results/calibration.md]
"""

import argparse
import tempfile
from pathlib import Path

import jax.numpy as jnp
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from PIL import Image, ImageDraw

import eqx_fmnist as ef
from eqx_fmnist.calibration import calibration_report, evaluate_calibration
from eqx_fmnist.data import prepare_image
from eqx_fmnist.plots import save_figure
from eqx_fmnist.runs.report import reliability_figure
from eqx_fmnist.trust import features

from harness import machine_line


def not_clothing(rng: np.random.Generator) -> dict[str, np.ndarray]:
    noise = rng.integers(0, 256, (100, 784), dtype=np.uint8)
    blank = np.repeat(np.linspace(0, 255, 100).astype(np.uint8)[:, None], 784, axis=1)
    digits = []
    for i in range(100):
        im = Image.new("L", (28, 28), 0)
        size = int(rng.integers(16, 30))
        ImageDraw.Draw(im).text(
            (int(rng.integers(0, 12)), int(rng.integers(-4, 6))),
            str(i % 10),
            fill=255,
            font_size=size,
        )
        digits.append(np.asarray(im).reshape(-1))
    return {"uniform noise": noise, "blank frames": blank, "digits": np.stack(digits)}


def photos(folder: Path) -> dict[str, Path]:
    shapes = {
        "trouser": (
            (600, 900),
            [(200, 150), (420, 150), (440, 800), (340, 800), (310, 330), (280, 800), (180, 800)],
        ),
        "sneaker": (
            (1000, 600),
            [(150, 300), (300, 250), (420, 300), (650, 330), (820, 360), (850, 460), (150, 460)],
        ),
        "t-shirt": (
            (800, 700),
            [
                (250, 150),
                (350, 180),
                (450, 180),
                (550, 150),
                (700, 280),
                (620, 360),
                (560, 320),
                (560, 620),
                (240, 620),
                (240, 320),
                (180, 360),
                (100, 280),
            ],
        ),
    }
    paths = {}
    for name, (size, polygon) in shapes.items():
        im = Image.new("RGB", size, (250, 249, 246))
        ImageDraw.Draw(im).polygon(polygon, fill=(35, 35, 45))
        paths[name] = folder / f"{name}.png"
        im.save(paths[name])
    return paths


def naive_pipeline(path: Path, invert: bool) -> np.ndarray:
    """A naive preparation, for comparison: pad to a square with the border colour and
    resize to 28 x 28 (optionally inverting), with no cropping, framing or sharpening."""
    gray = Image.open(path).convert("L")
    pixels = np.asarray(gray)
    border = int(np.median(np.concatenate([pixels[0], pixels[-1], pixels[:, 0], pixels[:, -1]])))
    side = max(gray.size)
    square = Image.new("L", (side, side), border)
    square.paste(gray, ((side - gray.size[0]) // 2, (side - gray.size[1]) // 2))
    small = np.asarray(square.resize((28, 28), Image.Resampling.LANCZOS), dtype=np.uint8)
    return 255 - small if invert else small


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--calibrate", type=int, default=5000)
    parser.add_argument("--steps", type=int, help="a quick check: every run this many steps")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/calibration.md"))
    args = parser.parse_args()
    data = ef.load_fashion_mnist()
    train, test = ef.to_datasets(data)
    test_images = np.asarray(test.images)
    lines = [
        machine_line(),
        "",
        "The default recipe, `TrainConfig()` "
        f"({ef.TrainConfig().epochs} epochs, moved and mirrored batches).",
        "",
        f"### Calibration on the 10,000 test images ({args.calibrate:,} training images held "
        "out for the temperature)",
        "",
        "| seed | T | NLL raw | NLL scaled | Brier raw | Brier scaled | ECE raw | ECE scaled "
        f"| accuracy, {args.calibrate:,} held out | accuracy, all 60,000 |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    recipe = ef.TrainConfig(**({} if args.steps is None else {"steps": args.steps}))
    full = ef.fit_ensemble(recipe, ef.Splits(train, test), args.seeds)
    runs, kinds = [], not_clothing(np.random.default_rng(0))
    flag_rows, calibrations = [], []
    for seed, member in zip(args.seeds, full.test.members, strict=True):
        config = recipe.with_changes(seed=seed, calibration_size=args.calibrate)
        splits = ef.split_data((train, test), calibration_size=config.calibration_size)
        r = ef.fit(config, splits)
        calibration = ef.calibrate(r.model, splits.train, splits.calibration)
        t = calibration.temperature
        calibrations.append(calibration)
        raw, cal = (
            evaluate_calibration(r.model, test),
            evaluate_calibration(r.model, test, temperature=t),
        )
        runs.append((raw, cal, r, member))
        lines.append(
            f"| {seed} | {t:.3f} | {raw.nll:.4f} | {cal.nll:.4f} | {raw.brier:.4f} | {cal.brier:.4f} "
            f"| {raw.ece:.4f} | **{cal.ece:.4f}** | {r.test.accuracy:.4f} | {member.accuracy:.4f} |"
        )
        print(lines[-1], flush=True)
        trust = calibration.trust

        def rate(x, model=r.model, trust=trust):
            return float(trust.flags(features(model, jnp.asarray(x)), x).mean())

        flag_rows.append([rate(test_images)] + [rate(x) for x in kinds.values()])
    mean = lambda k: np.mean([getattr(c, k) for _, c, _, _ in runs])  # noqa: E731
    meanr = lambda k: np.mean([getattr(c, k) for c, _, _, _ in runs])  # noqa: E731
    lines += [
        f"| mean | | {meanr('nll'):.4f} | {mean('nll'):.4f} | {meanr('brier'):.4f} "
        f"| {mean('brier'):.4f} | {meanr('ece'):.4f} | **{mean('ece'):.4f}** "
        f"| {np.mean([r.test.accuracy for _, _, r, _ in runs]):.4f} "
        f"| {np.mean([m.accuracy for _, _, _, m in runs]):.4f} |",
        "",
        "### The trust flag: share of images flagged as unlike the training data",
        "",
        "| seed | 10,000 test images | "
        + " | ".join(f"{k} ({len(v)})" for k, v in kinds.items())
        + " |",
        "|---|---|" + "---|" * len(kinds),
    ]
    for seed, row in zip(args.seeds, flag_rows, strict=True):
        lines.append(f"| {seed} | " + " | ".join(f"{x:.1%}" for x in row) + " |")
    # The reliability diagram of the first seed.
    raw, cal, r, _ = runs[0]
    logits = np.asarray(ef.predict_logits(r.model, test.images))
    figure = reliability_figure(calibration_report(logits, data.test_labels, calibrations[0]))
    folder = args.out.parent
    save_figure(figure, folder / "reliability.png")
    # Photos: the naive preparation against prepare_image.
    tmp = Path(tempfile.mkdtemp())
    fig = Figure(figsize=(9, 7.5), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(3, 3)
    lines += [
        "",
        "### Photo-like PNGs: a naive preparation against `prepare_image` (seed "
        f"{args.seeds[0]}, calibrated)",
        "",
        "| photo | padded + resized | padded + resized, inverted | `prepare_image` "
        "(crop, frame, auto-invert) | flagged |",
        "|---|---|---|---|---|",
    ]
    for row, (name, path) in enumerate(photos(tmp).items()):
        x_old = [naive_pipeline(path, invert=False), naive_pipeline(path, invert=True)]
        new = prepare_image(path).pixels
        batch = np.stack([*x_old, new]).reshape(3, -1)
        probs = np.asarray(ef.predict_proba(r.model, jnp.asarray(batch)))
        scaled = np.asarray(
            ef.predict_proba(r.model, jnp.asarray(batch), temperature=calibrations[0].temperature)
        )
        shown = [probs[0], probs[1], scaled[2]]
        flagged = bool(
            calibrations[0].trust.flags(features(r.model, jnp.asarray(batch[2:])), batch[2:])[0]
        )
        cells = [f"{ef.CLASS_NAMES[p.argmax()]} {p.max():.1%}" for p in shown]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {'yes' if flagged else 'no'} |")
        for col, (img, title) in enumerate(
            zip([*x_old, new], ["padded + resized", "... inverted", "prepare_image"], strict=True)
        ):
            ax = axes[row, col]
            ax.imshow(img, cmap="gray", vmin=0, vmax=255)
            ax.set_title(f"{name}, {title}: {cells[col]}", fontsize=9)
            ax.axis("off")
    save_figure(fig, folder / "photos.png")
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"wrote {args.out}, {folder / 'reliability.png'}, {folder / 'photos.png'}")


if __name__ == "__main__":
    main()
