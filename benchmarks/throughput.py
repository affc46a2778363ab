"""Training throughput of every path in one process: the codelab's loop without and
with `jax.jit`, the library's per-step and fused paths, and PyTorch's loop if it is
installed, each reading its loss back every 25 steps; then `fit` at two logging
cadences, the main job, precision policies, and batch sizes against the step's bound
(its matmuls on a CPU, its roofline from the device's own peaks elsewhere).

    python benchmarks/throughput.py [--quick] [--repeats 5] [--out benchmarks/results]

`--quick` is a smoke run of seconds on any backend: tiny sizes, one repetition.
"""

import argparse
from pathlib import Path

import eqx_fmnist as ef

from baselines import all_trainers
from harness import run_benchmark


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
        print(f"wrote {' and '.join(map(str, report.save(args.out)))}")


if __name__ == "__main__":
    main()
