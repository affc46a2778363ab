"""Many members on one device: what the moves cost each member, and what shared batches
save.

1. Model-examples/sec of one epoch of the default recipe (moves and mirrors) for K
   members in one program, each drawing its own batches and moves (`own`), all on their
   first member's (`shared`, `TrainConfig(shared_batches=True)`), and without any
   augmentation (`none`, the ceiling the moves are measured against), in float32 and
   under `c=bf16`: measured in turns in this process, medians.
2. `fit` of K members for the recipe's whole length (`--fit K`), own and shared batches:
   the training seconds its summary counts (compiling apart).

    python benchmarks/members.py [--members 1 8 32 128] [--precisions float32 bf16]
        [--repeats 3] [--fit 128] [--fit-batches own shared] [--epochs 80]
        [--out benchmarks/results/members.md]
"""

import argparse
import time
from pathlib import Path

import eqx_fmnist as ef
from eqx_fmnist.ensemble import Seeds
from eqx_fmnist.fileio import atomic_write
from eqx_fmnist.state import init_members

from harness import machine_line, measure_interleaved

PRECISIONS = {"float32": "float32", "bf16": "p=f32,c=bf16,o=f32"}
BATCHES = {
    "own": {},
    "shared": {"shared_batches": True},
    "none": {"shift": 0, "mirror": False},
}


def epoch_runner(config: ef.TrainConfig, k: int, train: ef.ArrayDataset):
    """One epoch of `k` members of `config` per call (the state carried over)."""
    configs = [config.with_changes(seed=s) for s in range(k)]
    state = [init_members(configs, len(train))]
    steps = len(train) // config.batch_size

    def run():
        state[0], metrics = ef.train_steps(
            state[0], train, batch_size=config.batch_size, num_steps=steps
        )
        return metrics

    return run, k * steps * config.batch_size


def throughput(
    train: ef.ArrayDataset, ks: list[int], precisions: list[str], repeats: int
) -> list[str]:
    runs, examples = {}, {}
    for precision in precisions:
        spelled = PRECISIONS[precision]
        for k in ks:
            for batches, changes in BATCHES.items():
                config = ef.TrainConfig(precision=spelled, **changes)
                name = f"{precision} K={k} {batches}"
                runs[name], examples[name] = epoch_runner(config, k, train)
    results = {
        r.name: r
        for r in measure_interleaved(runs, examples=examples, batch_size=512, repeats=repeats)
    }
    lines = [
        "| precision | K | own batches (M model-ex/s) | shared | no augmentation "
        "| own / none | shared / none |",
        "|---|---|---|---|---|---|---|",
    ]
    for precision in precisions:
        for k in ks:
            own, shared, none = (
                results[f"{precision} K={k} {b}"].examples_per_sec for b in BATCHES
            )
            lines.append(
                f"| {precision} | {k} | {own / 1e6:.2f} | {shared / 1e6:.2f} | "
                f"{none / 1e6:.2f} | {own / none:.2f}x | {shared / none:.2f}x |"
            )
    return lines


def fits(
    splits: ef.Splits, k: int, precisions: list[str], batches: list[str], epochs: int
) -> list[str]:
    lines = [
        f"| precision | batches | training s ({k} members x {epochs} epochs) | compile s "
        "| wall s | ensemble test accuracy |",
        "|---|---|---|---|---|---|",
    ]
    for precision in precisions:
        for kind in batches:
            changes = {"precision": PRECISIONS[precision], **BATCHES[kind]}
            config = ef.TrainConfig(epochs=epochs, **changes)
            t = time.perf_counter()
            result = ef.fit(config, splits, members=Seeds(k))
            wall = time.perf_counter() - t
            lines.append(
                f"| {precision} | {kind} | {result.train_seconds:.1f} | "
                f"{result.compile_seconds:.1f} | {wall:.1f} | {result.test.accuracy:.4f} |"
            )
            print(lines[-1], flush=True)
    return lines


def write(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, nargs="+", default=[1, 8, 32, 128])
    parser.add_argument(
        "--precisions", nargs="+", choices=list(PRECISIONS), default=["float32", "bf16"]
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--fit", type=int, default=128, help="0: skip the whole runs")
    parser.add_argument(
        "--fit-batches", nargs="+", choices=["own", "shared"], default=["own", "shared"]
    )
    parser.add_argument("--epochs", type=int, default=ef.TrainConfig().epochs)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/members.md"))
    args = parser.parse_args()
    data = ef.load_fashion_mnist()
    splits = ef.split_data(data)
    lines = [machine_line(), "", "### One epoch of K members per call", ""]
    lines += throughput(splits.train, args.members, args.precisions, args.repeats)
    print("\n".join(lines), flush=True)
    write(args.out, lines)  # the table stands if the whole runs do not finish
    if args.fit:
        lines += ["", f"### `fit` of {args.fit} members, the recipe's {args.epochs} epochs", ""]
        lines += fits(splits, args.fit, args.precisions, args.fit_batches, args.epochs)
    write(args.out, lines)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
