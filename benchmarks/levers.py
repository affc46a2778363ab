"""The recipe's cheap levers, each alone, on a validation split: label smoothing 0.2 and
0.3 (0.1 today), batches of 1024 and 2048 (512 today, the peak learning rate scaled by
the square root of the batch), AdamW without weight decay on the biases, moves of up to
1 pixel instead of 2, and no augmentation at all. Each candidate is the default recipe
(80 epochs) with one change, trained on 55,000 training images and scored on the 5,000
held out (a fixed split; the test set plays no part), clean, mirrored and shifted by
2 pixels, for each seed.

    python benchmarks/levers.py [--seeds 0 1] [--epochs 80] [--out benchmarks/results/levers.md]
"""

import argparse
import math
from pathlib import Path

import numpy as np

import eqx_fmnist as ef

from harness import machine_line

BASE_BATCH = 512


def candidates() -> dict[str, dict]:
    """Each candidate's changes to the default recipe."""
    base = ef.TrainConfig()

    def batch(n: int) -> dict:
        return dict(batch_size=n, learning_rate=base.learning_rate * math.sqrt(n / BASE_BATCH))

    return {
        "the default recipe": {},
        "label smoothing 0.2": dict(label_smoothing=0.2),
        "label smoothing 0.3": dict(label_smoothing=0.3),
        "batch 1024 (lr x sqrt 2)": batch(1024),
        "batch 2048 (lr x 2)": batch(2048),
        "no weight decay on biases": dict(decay_biases=False),
        "moves of up to 1 pixel": dict(shift=1),
        "no augmentation": dict(shift=0, mirror=False),
    }


def scores(result, splits) -> tuple[float, float, float]:
    """Validation accuracy clean, mirrored, and the mean over 2-pixel moves left, right,
    up and down."""
    model, policy, valid = result.model, result.policy, splits.validation
    rob = ef.evaluate_robustness(model, valid, policy=policy, shifts=(2,))
    return result.validation.accuracy, rob.mirrored, rob.shifted[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--epochs", type=int, default=80)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/levers.md"))
    args = parser.parse_args()
    splits = ef.split_data(ef.load_fashion_mnist(), validation_size=5000)
    rows = []
    for name, changes in candidates().items():
        config = ef.TrainConfig(epochs=args.epochs, validation_size=5000, **changes)
        found = []
        for seed in args.seeds:
            result = ef.fit(config.with_changes(seed=seed), splits)
            found.append(scores(result, splits))
            print(name, seed, *(f"{s:.4f}" for s in found[-1]), flush=True)
        rows.append((name, np.array(found)))
    base = rows[0][1][:, 0].mean()
    seeds = ", ".join(map(str, args.seeds))
    lines = [
        machine_line(),
        "",
        f"Validation accuracy (5,000 held-out training images), the mean of seeds {seeds}; "
        f"{args.epochs} epochs on the other 55,000. Shifted: the mean over moves of 2 "
        "pixels left, right, up and down.",
        "",
        "| candidate | clean (each seed) | clean | vs default | mirrored | shifted 2 px |",
        "|---|---|---|---|---|---|",
    ]
    for name, found in rows:
        each = ", ".join(f"{v:.4f}" for v in found[:, 0])
        clean, mirrored, shifted = found.mean(0)
        lines.append(
            f"| {name} | {each} | {clean:.4f} | {100 * (clean - base):+.2f} | {mirrored:.4f} "
            f"| {shifted:.4f} |"
        )
    lines += [
        "",
        "With 5,000 validation images one seed's accuracy has a standard error of about "
        "0.4 points, the mean of two about 0.3: a lever is kept only when it gains more.",
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
