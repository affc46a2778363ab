"""Training throughput of every path in one process: the codelab's loop without and
with `jax.jit`, the library's per-step and fused paths, and PyTorch's loop if it is
installed, each reading its loss back every 25 steps; then `fit` at two logging
cadences, precision policies, and batch sizes against the matmul bound (the tables of
`eqx-fmnist bench`, which measures the library's paths alone).

    python benchmarks/throughput.py [--quick] [--repeats 5] [--out benchmarks/results]
"""

import argparse
from pathlib import Path

from baselines import all_trainers

import eqx_fmnist as ef
from eqx_fmnist.bench import run_benchmark
from eqx_fmnist.fileio import atomic_write
from eqx_fmnist.plots import save_figure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run of seconds")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, help="write throughput.md and throughput.png here")
    args = parser.parse_args()
    trainers, skipped = all_trainers()
    # The un-jitted loop is about ten times slower: it runs a sixth of the steps.
    steps = {"python_dispatch": 25}
    report = run_benchmark(
        ef.to_datasets(ef.load_fashion_mnist()),
        quick=args.quick,
        repeats=args.repeats,
        progress=lambda what: print(f"measuring {what} ...", flush=True),
        trainers=trainers,
        steps=steps,
        skipped=skipped,
    )
    print(report.to_markdown())
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        with atomic_write(args.out / "throughput.md", "w") as f:
            f.write(report.to_markdown())
        save_figure(report.figure(), args.out / "throughput.png")
        print(f"wrote {args.out}/throughput.md and throughput.png")


if __name__ == "__main__":
    main()
