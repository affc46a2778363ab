"""Test accuracy (all 10,000 images) of the codelab run and the recommended recipe.

Trained on all 60,000 training images; one line per seed, then the mean.

    python benchmarks/accuracy.py [--seeds 0 1 2]
"""

import argparse
import statistics

import eqx_fmnist as ef


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    data = ef.to_datasets(ef.load_fashion_mnist())
    print("| run | seed | test accuracy | test loss | train s | compile s |")
    print("|---|---|---|---|---|---|")
    for name, make in [("codelab", ef.TrainConfig.codelab), ("recommended", ef.TrainConfig)]:
        accs = []
        for seed in args.seeds:
            r = ef.fit(make(seed=seed), data)
            accs.append(r.test.accuracy)
            print(
                f"| {name} | {seed} | {r.test.accuracy:.4f} | {r.test.loss:.4f} "
                f"| {r.train_seconds:.1f} | {r.compile_seconds:.1f} |",
                flush=True,
            )
        print(f"| {name} | mean | {statistics.mean(accs):.4f} | | | |", flush=True)


if __name__ == "__main__":
    main()
