"""Many models in one program: throughput of K members vs one model, and the wall time of
`fit_ensemble` vs one `fit` per seed.

1. Model-examples/sec of an epoch of K = 1, 2, 4, 8 members in one compiled program
   (`train_steps` on a stacked state) against one model's fused epoch, measured in turns in
   this process (medians; the ratio is what to compare).
2. The recommended recipe with 5 seeds: `fit_ensemble` once vs five `fit` calls, in this
   process, with each member's test accuracy next to its single run's.

    python benchmarks/ensemble.py [--members 1 2 4 8] [--repeats 5] [--seeds 5] [--epochs 80]
        [--out benchmarks/results/ensemble.md]
"""

import argparse
import time
from pathlib import Path

import numpy as np

import eqx_fmnist as ef
from eqx_fmnist.state import init_members

from harness import machine_line, measure_interleaved


def throughput(train: ef.ArrayDataset, ks: list[int], repeats: int) -> list[str]:
    config = ef.TrainConfig()
    spe = len(train) // config.batch_size

    def runner(k: int):
        state = [
            init_members([config.with_changes(seed=s) for s in range(k)], len(train))
            if k > 1
            else ef.init_state(config, len(train))
        ]

        def run():
            state[0], metrics = ef.train_steps(
                state[0], train, batch_size=config.batch_size, num_steps=spe
            )
            return metrics

        return run

    runs = {f"K={k}": runner(k) for k in ks}
    examples = {f"K={k}": k * spe * config.batch_size for k in ks}
    results = measure_interleaved(
        runs, examples=examples, batch_size=config.batch_size, repeats=repeats
    )
    single = results[0].examples_per_sec
    lines = [
        "| members K | model-examples/sec (median) | vs one model | compile s |",
        "|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.name[2:]} | {r.examples_per_sec:,.0f} | {r.examples_per_sec / single:.2f}x "
            f"| {r.compile_seconds:.2f} |"
        )
    return lines


def wall_time(data, seeds: list[int], epochs: int) -> list[str]:
    config = ef.TrainConfig(epochs=epochs)
    t = time.perf_counter()
    ensemble = ef.fit_ensemble(config, data, seeds)
    ensemble_seconds = time.perf_counter() - t
    singles, t = [], time.perf_counter()
    for s in seeds:
        singles.append(ef.fit(config.with_changes(seed=s), data))
    singles_seconds = time.perf_counter() - t
    lines = [
        f"`fit_ensemble` of {len(seeds)} seeds: **{ensemble_seconds:.1f} s** (compile "
        f"{ensemble.compile_seconds:.1f} s); {len(seeds)} `fit` calls: "
        f"**{singles_seconds:.1f} s** (compile {sum(r.compile_seconds for r in singles):.1f} s) "
        f"= {singles_seconds / ensemble_seconds:.2f}x the ensemble's wall time.",
        "",
        "| seed | member test accuracy | single run | difference |",
        "|---|---|---|---|",
    ]
    diffs = []
    for s, m, r in zip(seeds, ensemble.test.members, singles, strict=True):
        diffs.append(m.accuracy - r.test.accuracy)
        lines.append(f"| {s} | {m.accuracy:.4f} | {r.test.accuracy:.4f} | {diffs[-1]:+.4f} |")
    single_accs = [r.test.accuracy for r in singles]
    lines += [
        f"| mean ± std | {ensemble.test.accuracy_mean:.4f} ± {ensemble.test.accuracy_std:.4f} "
        f"| {np.mean(single_accs):.4f} ± {np.std(single_accs, ddof=1):.4f} "
        f"| max abs {max(map(abs, diffs)):.4f} |",
        f"| **ensemble** (mean probability) | **{ensemble.test.accuracy:.4f}** | | |",
    ]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=ef.TrainConfig().epochs)
    parser.add_argument("--skip-wall", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/ensemble.md"))
    args = parser.parse_args()
    lines = [
        machine_line(),
        "",
        "### K members in one program vs one model (one epoch of the recipe per call)",
        "",
    ]
    data = ef.split_data(ef.load_fashion_mnist())
    lines += throughput(data.train, args.members, args.repeats)
    print("\n".join(lines), flush=True)
    if not args.skip_wall:
        lines += ["", f"### The recipe ({args.epochs} epochs), {args.seeds} seeds", ""]
        wall = wall_time(data, list(range(args.seeds)), args.epochs)
        print("\n".join(wall), flush=True)
        lines += wall
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
