"""Test accuracy (all 10,000 images) of the codelab run and the recommended recipe, per
precision policy.

Trained on all 60,000 training images; one line per seed, then the mean.

    python benchmarks/accuracy.py [--seeds 0 1 2] [--precision p=f32,c=f32,o=f32 p=f32,c=bf16,o=f32]
"""

import argparse
import statistics

import eqx_fmnist as ef
from eqx_fmnist.bench import machine_facts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument(
        "--precision", nargs="+", default=["p=f32,c=f32,o=f32", "p=f32,c=bf16,o=f32"]
    )
    parser.add_argument("--no-codelab", action="store_true")
    args = parser.parse_args()
    facts = machine_facts()
    print(
        f"Machine: {facts['cpu']}, {facts['cores']} cores ({', '.join(facts['flags'])}); jax {facts['jax']}.\n"
    )
    data = ef.to_datasets(ef.load_fashion_mnist())
    runs = [] if args.no_codelab else [("codelab", ef.TrainConfig.codelab, "p=f32,c=f32,o=f32")]
    runs += [("recommended", ef.TrainConfig, spec) for spec in args.precision]
    print("| run | precision | seed | test accuracy | test loss | examples/sec | compile s |")
    print("|---|---|---|---|---|---|---|")
    for name, make, spec in runs:
        accs = []
        for seed in args.seeds:
            r = ef.fit(make(seed=seed, precision=spec), data)
            accs.append(r.test.accuracy)
            print(
                f"| {name} | {spec} | {seed} | {r.test.accuracy:.4f} | {r.test.loss:.4f} "
                f"| {r.examples_per_sec:,.0f} | {r.compile_seconds:.1f} |",
                flush=True,
            )
        spread = f" ± {statistics.stdev(accs):.4f}" if len(accs) > 1 else ""
        print(f"| {name} | {spec} | mean | {statistics.mean(accs):.4f}{spread} | | | |", flush=True)


if __name__ == "__main__":
    main()
