"""Tune the recipe with one sweep: every grid point x seed is a member of one compiled
program, ranked on a validation split carved from the training set.

The test set is not used to choose: each member trains on 50,000 training images and is
scored on the other 10,000 (a fixed split, the same for every seed); only the winning
point's seeds are then tested. Then the best members (by validation accuracy) are
trained again on all 60,000 images, as one program, and their ensemble is tested: the
best ensemble of at most `--top` members of this MLP that the sweep points to.

    python benchmarks/tune_recipe.py [--epochs 30] [--seeds 2] [--learning-rate 2e-3 3e-3 5e-3]
        [--weight-decay 1e-2 5e-2] [--label-smoothing 0.05 0.1] [--top 8]
        [--out benchmarks/results/sweep]
"""

import argparse
import time
from pathlib import Path

import equinox as eqx

import eqx_fmnist as ef
from eqx_fmnist import step
from eqx_fmnist.bench import machine_facts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--learning-rate", type=float, nargs="+", default=[2e-3, 3e-3, 5e-3])
    parser.add_argument("--weight-decay", type=float, nargs="+", default=[1e-2, 5e-2])
    parser.add_argument("--label-smoothing", type=float, nargs="+", default=[0.05, 0.1])
    parser.add_argument("--top", type=int, default=8)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/sweep"))
    args = parser.parse_args()
    facts = machine_facts()
    grid = {
        "learning_rate": args.learning_rate,
        "weight_decay": args.weight_decay,
        "label_smoothing": args.label_smoothing,
    }
    data = ef.load_fashion_mnist()
    config = ef.TrainConfig(epochs=args.epochs)
    traces = eqx.debug.get_num_traces(step._steps_traced)
    t = time.perf_counter()
    result = ef.sweep(config, grid, seeds=args.seeds, data=data)
    seconds = time.perf_counter() - t
    traces = eqx.debug.get_num_traces(step._steps_traced) - traces
    paths = result.write(args.out)
    k = len(result.members.configs)
    top = [
        result.members.configs[i].with_changes(validation_size=0)
        for i in result.top_members(args.top)
    ]
    t = time.perf_counter()
    best = ef.fit(top, data)
    top_seconds = time.perf_counter() - t
    lines = [
        f"Machine: {facts['cpu']}, {facts['cores']} cores ({', '.join(facts['flags'])}); "
        f"jax {facts['jax']}.",
        "",
        f"Produced by `python benchmarks/tune_recipe.py`: {len(result.points)} grid points x "
        f"{len(result.seeds)} seeds = {k} members of the {args.epochs}-epoch recipe in one "
        f"program, **{traces} trace** of the training chunk, {seconds:.0f} s in all "
        f"(compile {result.members.compile_seconds:.1f} s, "
        f"{result.members.examples_per_sec:,.0f} model-examples/sec).",
        "",
        result.to_markdown(),
        f"The {args.top} members with the best validation accuracy, trained again on all "
        f"60,000 images as one program ({top_seconds:.0f} s):",
        "",
        "| member | learning_rate | weight_decay | label_smoothing | seed | test accuracy |",
        "|---|---|---|---|---|---|",
    ]
    for i, (c, m) in enumerate(zip(top, best.members, strict=True)):
        lines.append(
            f"| {i} | {c.learning_rate:g} | {c.weight_decay:g} | {c.label_smoothing:g} "
            f"| {c.seed} | {m.accuracy:.4f} |"
        )
    lines += [
        f"| mean ± std | | | | | {best.test.accuracy_mean:.4f} ± {best.test.accuracy_std:.4f} |",
        f"| **ensemble** | | | | | **{best.test.accuracy:.4f}** |",
    ]
    text = "\n".join(lines) + "\n"
    (args.out / "tune.md").write_text(text)
    print(text)
    print("wrote", *paths, args.out / "tune.md")


if __name__ == "__main__":
    main()
