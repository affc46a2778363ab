"""Test accuracy (all 10,000 images) of the codelab run and the default recipe, per
precision policy: each seed a member of one ensemble, trained in one program.

Trained on all 60,000 training images; one line per member (its own test accuracy, the
run `fit` would make with that seed), the members' mean, and the ensemble's (the mean
of the members' probabilities).

    python benchmarks/accuracy.py [--seeds 0 1 2 3 4] [--precision p=f32,c=f32,o=f32 ...]
        [--no-codelab] [--steps N] [--out benchmarks/results/accuracy.md]
"""

import argparse
from pathlib import Path

import eqx_fmnist as ef

from harness import machine_line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument(
        "--precision", nargs="+", default=["p=f32,c=f32,o=f32", "p=f32,c=bf16,o=f32"]
    )
    parser.add_argument("--no-codelab", action="store_true")
    parser.add_argument("--steps", type=int, help="a quick check: every run this many steps")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/accuracy.md"))
    args = parser.parse_args()
    lines = [
        machine_line(),
        "",
        "| run | precision | member (seed) | test accuracy | test loss |",
        "|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    splits = ef.split_data(ef.load_fashion_mnist())
    runs = [] if args.no_codelab else [("codelab", ef.TrainConfig.codelab(), "p=f32,c=f32,o=f32")]
    runs += [("default", ef.TrainConfig(), spec) for spec in args.precision]
    quick = {} if args.steps is None else {"steps": args.steps}
    for name, config, spec in runs:
        r = ef.fit_ensemble(config.with_changes(precision=spec, **quick), splits, args.seeds)
        rows = [
            f"| {name} | {spec} | {seed} | {m.accuracy:.4f} | {m.loss:.4f} |"
            for seed, m in zip(args.seeds, r.test.members, strict=True)
        ]
        rows += [
            f"| {name} | {spec} | mean ± std | {r.test.accuracy_mean:.4f} ± {r.test.accuracy_std:.4f} | |",
            f"| {name} | {spec} | **ensemble of {len(args.seeds)}** | "
            f"**{r.test.accuracy:.4f}** | {r.test.loss:.4f} |",
        ]
        print("\n".join(rows), flush=True)
        print(
            f"  ({r.examples_per_sec:,.0f} model-examples/sec, compile "
            f"{r.compile_seconds:.1f} s, train {r.train_seconds:.1f} s)",
            flush=True,
        )
        lines += rows
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
