"""Does the trust flag catch confident mistakes on images unlike the data set?

Probes made from what is installed: letters and digits drawn with PIL's DejaVu font,
filled and outlined shapes, test items turned by 90 and 180 degrees, and mirrored shoes
(which a model trained on mirrors should simply get right). For each, among the answers
given with a (calibrated) probability of at least 0.9 that are wrong, the share the flag
catches; on the real test set, the share of all answers and of right answers flagged.

Two models, seed 0, 5,000 training images held out to calibrate: the recipe before
augmentation, and the default recipe (moves and mirrors). The trust flag (a Mahalanobis
distance on the hidden layers, plus ink and contrast) is fitted on the training images
as they are and, for the default recipe, also on the training augmentation's largest
moves (`moves=ef.trust_moves(config)`). How often each flags the clean, mirrored and
2-pixel-shifted test images (mean of the four directions) is measured too.

    python benchmarks/trust_probes.py [--out benchmarks/results/trust_probes.md]
"""

import argparse
from pathlib import Path

import jax.numpy as jnp
import numpy as np
from PIL import Image, ImageDraw, ImageFont

import eqx_fmnist as ef
from eqx_fmnist.trust import AS_THEY_ARE, features

from harness import machine_line

CONFIDENT = 0.9
FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf"


def drawn(rng, texts, n=200) -> np.ndarray:
    out = []
    for i in range(n):
        im = Image.new("L", (28, 28), 0)
        size = int(rng.integers(14, 27))
        font = ImageFont.truetype(FONT, size) if Path(FONT).is_file() else None
        at = (int(rng.integers(0, 10)), int(rng.integers(-2, 6)))
        ImageDraw.Draw(im).text(
            at, texts[i % len(texts)], fill=int(rng.integers(150, 256)), font=font, font_size=size
        )
        out.append(np.asarray(im).reshape(-1))
    return np.stack(out)


def shapes(rng, n=200) -> np.ndarray:
    out = []
    for i in range(n):
        im = Image.new("L", (28, 28), 0)
        d = ImageDraw.Draw(im)
        x0, y0 = rng.integers(1, 10, 2)
        x1, y1 = rng.integers(16, 27, 2)
        box, fill = [int(x0), int(y0), int(x1), int(y1)], int(rng.integers(120, 256))
        kind, filled = i % 3, (i // 3) % 2 == 0
        if kind == 0:
            d.ellipse(box, fill=fill if filled else None, outline=fill, width=2)
        elif kind == 1:
            d.rectangle(box, fill=fill if filled else None, outline=fill, width=2)
        else:
            tri = [(box[0], box[3]), (box[2], box[3]), ((box[0] + box[2]) // 2, box[1])]
            d.polygon(tri, fill=fill if filled else None, outline=fill)
        out.append(np.asarray(im).reshape(-1))
    return np.stack(out)


def probes(data) -> dict[str, tuple[np.ndarray, np.ndarray | None]]:
    """name -> (images, labels or None: every answer is wrong)."""
    rng = np.random.default_rng(0)
    x, y = data.test_images[:1000], data.test_labels[:1000]
    shoes = np.isin(data.test_labels, (5, 7, 9))
    letters = [chr(c) for c in range(ord("A"), ord("Z") + 1)] + [
        chr(c) for c in range(ord("a"), ord("z") + 1)
    ]
    return {
        "letters": (drawn(rng, letters), None),
        "digits": (drawn(rng, [str(d) for d in range(10)]), None),
        "shapes": (shapes(rng), None),
        "items turned 90°": (np.rot90(x, 1, axes=(1, 2)).reshape(-1, 784), y),
        "items upside down": (np.rot90(x, 2, axes=(1, 2)).reshape(-1, 784), y),
        "mirrored shoes": (
            data.test_images[shoes][:1000, :, ::-1].reshape(-1, 784),
            data.test_labels[shoes][:1000],
        ),
        "noise": (rng.integers(0, 256, (200, 784)).astype(np.uint8), None),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/trust_probes.md"))
    parser.add_argument("--steps", type=int, help="a quick check: train this many steps")
    args = parser.parse_args()
    data = ef.load_fashion_mnist()
    kinds = probes(data)
    test_x, test_y = jnp.asarray(data.test_images.reshape(-1, 784)), data.test_labels
    moved = {
        "test: mirrored": [ef.move_images(test_x, mirror=True)],
        "test: shifted 2 px": [
            ef.move_images(test_x, dx=dx, dy=dy) for dx, dy in ((2, 0), (-2, 0), (0, 2), (0, -2))
        ],
    }
    lines = [
        f"{machine_line()} Seed 0, 5,000 "
        f"training images held out to calibrate. A probe's cell: flagged / wrong answers "
        f"given with probability >= {CONFIDENT} (calibrated), of its images.",
        "",
        "| model | trust fitted on | test: flagged | test: right answers flagged | "
        + " | ".join(moved)
        + " | "
        + " | ".join(f"{k} ({len(v[0])})" for k, v in kinds.items())
        + " |",
        "|---|---|---|---|" + "---|" * (len(moved) + len(kinds)),
    ]
    recipes = {
        "before: no augmentation, 30 epochs": ef.TrainConfig(shift=0, mirror=False, epochs=30),
        "after: the default (moves, mirrors)": ef.TrainConfig(),
    }
    for name, config in recipes.items():
        config = config.with_changes(
            calibration_size=5000, **({"steps": args.steps} if args.steps else {})
        )
        splits = ef.split_data(data, calibration_size=config.calibration_size)
        r = ef.fit(config, splits)

        def confident_wrong(x, y, model=r.model, t=None):
            logits = np.asarray(ef.predict_logits(model, jnp.asarray(x))) / t
            p = np.exp(logits - logits.max(1, keepdims=True))
            p /= p.sum(1, keepdims=True)
            wrong = np.ones(len(x), bool) if y is None else p.argmax(1) != y
            return wrong & (p.max(1) >= CONFIDENT)

        right = np.asarray(ef.predict(r.model, test_x)) == test_y
        for moves in dict.fromkeys((AS_THEY_ARE, ef.trust_moves(config))):
            cal = ef.calibrate(r.model, splits.train, splits.calibration, moves=moves)

            def flags(x, model=r.model, trust=cal.trust):
                return trust.flags(features(model, jnp.asarray(x)), np.asarray(x))

            f = flags(test_x)
            cells = [f"{f.mean():.1%}", f"{f[right].mean():.1%}"]
            cells += [f"{np.mean([flags(x).mean() for x in xs]):.1%}" for xs in moved.values()]
            for x, y in kinds.values():
                cw = confident_wrong(x, y, t=cal.temperature)
                cells.append(f"{(flags(x) & cw).sum()} / {cw.sum()}")
            fitted = "as they are" if moves == AS_THEY_ARE else f"{len(moves)} moves"
            lines.append(f"| {name} | {fitted} | " + " | ".join(cells) + " |")
            print(lines[-1], flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
