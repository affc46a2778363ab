"""Examples/sec of the codelab's per-step jitted loop vs the library's paths, one process.

python benchmarks/step_vs_fused.py [--repeats 7] [--batch-size 512] [--eager]
"""

import argparse

import eqx_fmnist as ef
from eqx_fmnist.bench import compare_training


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--eager", action="store_true", help="also time un-jitted Python dispatch")
    args = parser.parse_args()
    train, _ = ef.to_datasets(ef.load_fashion_mnist())
    config = ef.TrainConfig(batch_size=args.batch_size)
    variants = ("codelab_jit", "library_step", "library_fused")
    if args.eager:
        variants = ("python_dispatch", *variants)
    results = compare_training(train, config, repeats=args.repeats, variants=variants)
    base = next(r for r in results if r.name == "codelab_jit").examples_per_sec
    print(f"batch {args.batch_size}, median of {args.repeats} epochs each, one process")
    print("| variant | examples/sec (median) | min..max | x codelab_jit | compile s |")
    print("|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r.name} | {r.examples_per_sec:,.0f} | {min(r.runs):,.0f}..{max(r.runs):,.0f} "
            f"| {r.examples_per_sec / base:.2f} | {r.compile_seconds:.2f} |"
        )


if __name__ == "__main__":
    main()
