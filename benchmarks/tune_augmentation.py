"""How the augmentation, the length and the optimiser's numbers were chosen: validation
accuracy (5,000 training images held out, a fixed split; never the test set) on the
images as they are, mirrored, and shifted by 1, 2 and 3 pixels, for each candidate.

A candidate is a set of `TrainConfig` changes, optionally with variants that differ only
in numbers members may differ in (weight decay, label smoothing, learning rate): those
train as members of one compiled program. Each result is one JSON line (`--jsonl`), and
the table is written from those lines (`--table-from` rebuilds it from a saved file).

    python benchmarks/tune_augmentation.py [--only NAME ...] [--jsonl FILE]
        [--out benchmarks/results/tune_augmentation.md]
"""

import argparse
import json
import time
from pathlib import Path

import numpy as np

VALIDATION = 5000
# name: (changes, variants or None)
S1 = {"shift": 1}
S2 = {"shift": 2, "shift_distribution": "uniform"}
TRI = {"shift": 2, "shift_distribution": "triangular"}
# name: (changes, variants or None); every candidate mirrors unless it says otherwise.
CANDIDATES = {
    "no augmentation, 30 epochs (the recipe before)": ({"shift": 0, "mirror": False, "epochs": 30}, None),
    "shift 1 + mirror, 60 epochs": ({**S1, "epochs": 60}, None),
    "shift 2 + mirror, 60 epochs": ({**S2, "epochs": 60}, None),
    "shift 1 + mirror, 60 epochs, EMA 0.999": ({**S1, "epochs": 60, "ema_decay": 0.999}, None),
    "shift 2 + mirror + erase 0.3, 60 epochs": ({**S2, "epochs": 60, "erase": 0.3}, None),
    "shift 1 + mirror, 80 epochs": ({**S1, "epochs": 80}, None),
    "shift 1 + mirror, 100 epochs": ({**S1, "epochs": 100}, None),
    "shift 2 + mirror, 200 epochs, EMA 0.999": (
        {**S2, "epochs": 200, "ema_decay": 0.999},
        [{"weight_decay": 0.05}, {"weight_decay": 0.01},
         {"weight_decay": 0.05, "label_smoothing": 0.0}, {"weight_decay": 0.1}],
    ),
    "shift 1 + mirror, 150 epochs": (
        {**S1, "epochs": 150},
        [{"weight_decay": 0.05}, {"weight_decay": 0.01}, {"label_smoothing": 0.0},
         {"learning_rate": 0.002}],
    ),
    "shift 1 + mirror, 400 epochs": ({**S1, "epochs": 400}, [{"label_smoothing": 0.1}, {"label_smoothing": 0.0}]),
    "shift 2 + mirror, 400 epochs": ({**S2, "epochs": 400}, None),
    "shift 1 + mirror + erase 0.25, 400 epochs": ({**S1, "epochs": 400, "erase": 0.25}, None),
    "shift 1 + mirror, 800 epochs": ({**S1, "epochs": 800}, None),
    "shift 2 (triangular) + mirror, 400 epochs": ({**TRI, "epochs": 400}, None),
    "shift 2 (triangular) + mirror, 80 epochs": ({**TRI, "epochs": 80}, None),
}  # fmt: skip
COLUMNS = ("valid", "mirror", "shift1", "shift2", "shift3")


def run(names, jsonl: Path) -> None:
    import eqx_fmnist as ef
    from eqx_fmnist.augment import move_images

    splits = ef.split_data(ef.load_fashion_mnist(), validation_size=VALIDATION)
    val = splits.validation
    moved = {"mirror": [move_images(val.images, mirror=True)]}
    for s in (1, 2, 3):
        moves = ((s, 0), (-s, 0), (0, s), (0, -s))
        moved[f"shift{s}"] = [move_images(val.images, dx=x, dy=y) for x, y in moves]
    held = ef.Splits(splits.train, None, val, None)
    for name in names:
        changes, variants = CANDIDATES[name]
        base = ef.TrainConfig(validation_size=VALIDATION, **changes)
        configs = [base.with_changes(**v) for v in variants] if variants else base
        t = time.perf_counter()
        r = ef.fit(configs, held)
        wall = time.perf_counter() - t
        count = len(variants) if variants else None
        models = [ef.select_members(r.model, i) for i in range(count)] if count else [r.model]
        for i, m in enumerate(models):
            rec = {"name": name, "variant": variants[i] if variants else {}, "wall": wall,
                   "train_s": r.train_seconds, "valid": ef.evaluate(m, val, policy=r.policy).accuracy}  # fmt: skip
            for k, sets in moved.items():
                accs = [ef.evaluate(m, ef.ArrayDataset(x, val.labels), policy=r.policy).accuracy for x in sets]  # fmt: skip
                rec[k] = float(np.mean(accs))
            with jsonl.open("a") as f:
                f.write(json.dumps(rec) + "\n")
            print(json.dumps(rec), flush=True)


def table(records: list[dict]) -> str:
    lines = [
        f"Validation accuracy ({VALIDATION:,} held-out training images), seed 0; members of "
        "one program share its train time.",
        "",
        "| candidate | variant | clean | mirrored | shift 1 | shift 2 | shift 3 | train s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        variant = ", ".join(f"{k} {v:g}" for k, v in r["variant"].items()) or "-"
        cells = " | ".join(f"{r[k]:.4f}" for k in COLUMNS)
        lines.append(f"| {r['name']} | {variant} | {cells} | {r['train_s']:.0f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=list(CANDIDATES), default=list(CANDIDATES))
    parser.add_argument("--jsonl", type=Path, default=Path("tune_augmentation.jsonl"))
    parser.add_argument("--table-from", type=Path, help="write the table from saved JSON lines")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/tune_augmentation.md"))
    args = parser.parse_args()
    source = args.table_from
    if source is None:
        run(args.only, args.jsonl)
        source = args.jsonl
    records = [json.loads(line) for line in source.read_text().splitlines() if line.strip()]
    args.out.write_text(table(records))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
