"""Tune the recommended recipe on a validation split carved from the training set.

The test set is not looked at here. Each variant trains on 50,000 training images and
is scored on the other 10,000 (a fixed split, the same for every seed); the winner then
becomes `TrainConfig`'s defaults and is measured once on the test set by
`benchmarks/accuracy.py`.

    python benchmarks/tune_recipe.py [--seeds 0 1] [--out benchmarks/results/tune.md]
"""

import argparse
import dataclasses
import statistics
import time
from pathlib import Path

import eqx_fmnist as ef

BASE = dict(validation_size=10_000)
VARIANTS = {
    "warmup-cosine 20 ep": dict(epochs=20),
    "warmup-cosine 30 ep": dict(epochs=30),
    "warmup-cosine 40 ep": dict(epochs=40),
    "30 ep, label smoothing 0.1": dict(epochs=30, label_smoothing=0.1),
    "30 ep, weight decay 1e-2": dict(epochs=30, weight_decay=1e-2),
    "30 ep, weight decay 5e-2": dict(epochs=30, weight_decay=5e-2),
    "30 ep, lr 2e-3": dict(epochs=30, learning_rate=2e-3),
    "30 ep, batch 256": dict(epochs=30, batch_size=256),
    "30 ep, ls 0.1, wd 5e-2": dict(epochs=30, label_smoothing=0.1, weight_decay=5e-2),
    # Round two, around the winner of round one (label smoothing).
    "20 ep, ls 0.1": dict(epochs=20, label_smoothing=0.1),
    "20 ep, ls 0.1, wd 5e-2": dict(epochs=20, label_smoothing=0.1, weight_decay=5e-2),
    "30 ep, ls 0.2": dict(epochs=30, label_smoothing=0.2),
    "40 ep, ls 0.1, wd 5e-2": dict(epochs=40, label_smoothing=0.1, weight_decay=5e-2),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--only", nargs="*", help="names of variants to run")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/tune.md"))
    args = parser.parse_args()
    data = ef.load_fashion_mnist()
    rows = []
    for name, overrides in VARIANTS.items():
        if args.only and name not in args.only:
            continue
        accs, best, secs = [], [], []
        for seed in args.seeds:
            config = ef.TrainConfig(**(BASE | overrides), seed=seed)
            t = time.perf_counter()
            result = ef.fit(config, data)
            secs.append(time.perf_counter() - t)
            accs.append(result.validation.accuracy)
            best.append(max(h["valid_accuracy"] for h in result.history))
        row = (
            name,
            statistics.mean(accs),
            min(accs),
            statistics.mean(best),
            statistics.median(secs),
        )
        rows.append(row)
        print(
            f"{row[0]:32s} final {row[1]:.4f} (min {row[2]:.4f}) best-epoch {row[3]:.4f} {row[4]:.1f}s",
            flush=True,
        )
    lines = [
        f"Validation accuracy (10,000 held-out training images), mean over seeds {args.seeds}.",
        "",
        "| variant | final | worst seed | best epoch (mean) | seconds |",
        "|---|---|---|---|---|",
    ]
    lines += [f"| {n} | {a:.4f} | {m:.4f} | {b:.4f} | {s:.1f} |" for n, a, m, b, s in rows]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}; base config: {dataclasses.asdict(ef.TrainConfig(**BASE))}")


if __name__ == "__main__":
    main()
