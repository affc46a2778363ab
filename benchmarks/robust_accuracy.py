"""Test accuracy on the images as they are, mirrored, and shifted by 1, 2 and 3 pixels,
for the recipe before augmentation (30 epochs), the default, `TrainConfig.best()`, an ensemble
of `best()` members and a single MLP distilled from that ensemble, with the published
plain-MLP figures beside them.

Each recipe's seeds train as members of one compiled program (member `s` is the run
`fit` would make with seed `s`); a row is the mean over its seeds, and the train time is
the program's divided by its members. Everything trains on all 60,000 training images
and is scored on all 10,000 test images; the recipes themselves were chosen on a
validation split (`benchmarks/levers.py`), never on this table.

    python benchmarks/robust_accuracy.py [--seeds 0 1 2] [--ensemble 5]
        [--distill-seeds 0] [--out benchmarks/results/robust_accuracy.md]
"""

import argparse
import json
from pathlib import Path

import numpy as np

import eqx_fmnist as ef

from harness import machine_line

PUBLISHED = [
    (
        "MLP 256-128-100, no preprocessing (the benchmark table of "
        "https://github.com/zalandoresearch/fashion-mnist, by @heitorrapela)",
        0.8833,
    ),
]
TODAY = ef.TrainConfig(shift=0, mirror=False, epochs=30)
"""The recipe before augmentation: 30 epochs, no augmentation."""


def robustness_rows(result: ef.TrainResult, test: ef.ArrayDataset, *, ensemble: bool):
    """Each member's robustness, or the ensemble's."""
    if ensemble or result.num_members is None:
        models = [result.model]
    else:
        models = [ef.select_members(result.model, i) for i in range(result.num_members)]
    return [ef.evaluate_robustness(m, test, policy=result.policy).to_dict() for m in models]


def row(name: str, records: list[dict], seconds: float, seeds: str) -> tuple[str, dict]:
    mean = {k: float(np.mean([r[k] for r in records])) for k in records[0]}
    cells = " | ".join(
        f"{mean[k]:.4f}" for k in ("clean", "mirrored", "shift1", "shift2", "shift3")
    )
    return f"| {name} | {seeds} | {cells} | {seconds:.0f} |", mean


def draw(results: dict, path: Path) -> Path:
    """Accuracy against the shift for each model (mirrored as a hollow marker at -1)."""
    from matplotlib.figure import Figure

    from eqx_fmnist.plots import save_figure

    fig = Figure(figsize=(7.5, 4.5), layout="constrained")
    ax = fig.subplots()
    for name, r in results.items():
        if "all" in name:
            continue
        line = ax.plot(
            [0, 1, 2, 3],
            [r["clean"], r["shift1"], r["shift2"], r["shift3"]],
            marker="o",
            label=name.replace("`", ""),
        )[0]
        ax.plot([-1], [r["mirrored"]], marker="s", fillstyle="none", color=line.get_color())
    ax.set_xticks([-1, 0, 1, 2, 3], ["mirrored", "as they are", "1 px", "2 px", "3 px"])
    ax.set_ylabel("test accuracy (all 10,000)")
    ax.set_ylim(0.5, 0.93)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower left", fontsize=8)
    ax.set_title("Test images mirrored and shifted (mean of 4 directions)")
    return save_figure(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--ensemble", type=int, default=5, help="members of best() in the ensemble")
    parser.add_argument("--distill-seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--steps", type=int, help="a quick check: every run this many steps")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/robust_accuracy.md"))
    parser.add_argument("--figure-only", action="store_true", help="redraw from the saved JSON")
    args = parser.parse_args()
    if args.figure_only:
        results = json.loads(args.out.with_suffix(".json").read_text())
        print(f"wrote {draw(results, args.out.with_suffix('.png'))}")
        return
    data = ef.load_fashion_mnist()
    train, test = ef.to_datasets(data)
    quick = {} if args.steps is None else {"steps": args.steps}
    lines = [
        f"{machine_line()} Test accuracy on all 10,000 test images; shifts are the mean "
        "of left, right, up and down (zero fill).",
        "",
        "| model | seeds | clean | mirrored | shift 1 px | shift 2 px | shift 3 px | train s (each) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    results = {}

    def report(name, configs, *, teacher=None, ensemble=False, seeds_shown=None):
        listed = ef.ensemble.Listed([c.with_changes(**quick) for c in configs])
        r = ef.fit(listed.members[0], ef.Splits(train, test), members=listed, teacher=teacher)
        records = robustness_rows(r, test, ensemble=ensemble)
        seconds = r.train_seconds / len(configs) if not ensemble else r.train_seconds
        seeds = seeds_shown or ",".join(str(c.seed) for c in configs)
        line, mean = row(name, records, seconds, seeds)
        lines.append(line)
        results[name] = {**mean, "train_seconds": seconds, "seeds": seeds}
        print(line, flush=True)
        return r

    seeds, ens_seeds = args.seeds, list(range(args.ensemble))
    report(
        "before augmentation (30 epochs, no augmentation)",
        [TODAY.with_changes(seed=s) for s in seeds],
    )
    report("the default, `TrainConfig()`", [ef.TrainConfig(seed=s) for s in seeds])
    best = ef.TrainConfig.best()
    listed = ef.ensemble.Listed([best.with_changes(seed=s, **quick) for s in ens_seeds])
    members = ef.fit(listed.members[0], ef.Splits(train, test), members=listed)
    each = robustness_rows(members, test, ensemble=False)
    per = members.train_seconds / len(ens_seeds)
    for name, recs in (
        ("`TrainConfig.best()`", each[: len(seeds)]),
        (f"`TrainConfig.best()`, all {len(ens_seeds)} members", each),
    ):
        line, mean = row(name, recs, per, ",".join(map(str, ens_seeds[: len(recs)])))
        lines.append(line)
        results[name] = {**mean, "train_seconds": per}
        print(line, flush=True)
    ensemble = robustness_rows(members, test, ensemble=True)
    line, mean = row(
        f"ensemble of {len(ens_seeds)} `best()`",
        ensemble,
        members.train_seconds,
        f"0-{len(ens_seeds) - 1}",
    )
    lines.append(line)
    results["ensemble"] = {**mean, "train_seconds": members.train_seconds}
    print(line, flush=True)
    report(
        f"`best()` distilled from the ensemble of {len(ens_seeds)}",
        [best.with_changes(seed=s) for s in args.distill_seeds],
        teacher=members.model,
    )
    lines += ["", "Published plain-MLP test accuracies (clean images):", ""]
    lines += [f"- {name}: {acc:.4f}" for name, acc in PUBLISHED]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    args.out.with_suffix(".json").write_text(json.dumps(results, indent=2) + "\n")
    draw(results, args.out.with_suffix(".png"))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
