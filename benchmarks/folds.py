"""Members on different subsets, measured: K-fold cross-validation of the default recipe
as one program against K separate runs, the cost of the subsets (time per step and
compiled memory against K members on all the data), the label audit on planted flips,
and whether fold or bootstrap members make a stronger ensemble than seeds.

- **cv**: 5 folds of the 60,000 training images, one program: each fold's accuracy on
  its held-out fold, mean ± sd, wall time; then the same 5 folds as 5 separate `fit`
  runs, one after another (wall time, and that each equals its member);
- **cost**: the programs' train seconds per step (compile excluded) and XLA's memory
  analysis of one compiled chunk, 5 fold members against 5 seeds on all the data;
- **flips**: 1% of the training labels flipped (to the class the out-of-fold
  predictions confuse it with most, and to a random other class), 5-fold out-of-fold probabilities, cleanlab's
  ranking: precision and recall of the planted flips among the top k (k = the number
  planted), and among all the issues it reports;
- **ensembles**: 5 seeds (all the data), 5 bootstrap samples and the 5 fold members, on
  the test images as they are and mirrored.

    python benchmarks/folds.py [--epochs 80] [--out benchmarks/results/folds.md]
    python benchmarks/folds.py --best --out benchmarks/results/folds_best.md  # the ensembles of best()
"""

import argparse
import time
from pathlib import Path

import jax.numpy as jnp
import numpy as np

import eqx_fmnist as ef
from eqx_fmnist.dataset import ArrayDataset
from eqx_fmnist.step import compile_steps

from harness import machine_line


def most_confused_with(probs: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """For each class, the class the out-of-fold predictions confuse it with most."""
    cm = np.array(ef.confusion_matrix(labels, probs.argmax(1)))  # a copy to write in
    np.fill_diagonal(cm, -1)
    return cm.argmax(1)


def chunk_memory(result, splits, subsets) -> float:
    """MB of XLA's memory analysis (arguments + temporaries) of one epoch's chunk."""
    n = subsets.size if subsets is not None else len(splits.train)
    table = None if subsets is None else jnp.asarray(subsets.train)
    chunk = compile_steps(
        result.state,
        splits.train,
        batch_size=result.config.batch_size,
        num_steps=n // result.config.batch_size,
        subsets=table,
    )
    m = chunk.compiled.memory_analysis()
    return (m.argument_size_in_bytes + m.temp_size_in_bytes) / 2**20


def flipped(labels: np.ndarray, share: float, to: np.ndarray | None, seed: int = 0):
    """`(new labels, flipped indices)`: `share` of them changed, to `to[class]` (the
    confusable class) or, for `to=None`, to a random other class."""
    rng = np.random.default_rng(seed)
    idx = np.sort(rng.choice(len(labels), int(share * len(labels)), replace=False))
    new = labels.copy()
    if to is not None:
        new[idx] = to[labels[idx]]
    else:
        new[idx] = (labels[idx] + rng.integers(1, 10, len(idx))) % 10
    return new, idx


def accuracy_lines(name, model, test) -> str:
    mirrored = ArrayDataset(ef.move_images(test.images, mirror=True), test.labels)
    clean, mirror = (ef.evaluate(model, d).accuracy for d in (test, mirrored))
    return f"| {name} | {clean:.4f} | {mirror:.4f} |"


def best_ensembles(args, config, splits) -> None:
    """5 seeds, 5 bootstrap samples and 5 fold members of `config`, one program each."""
    k = args.folds
    seeds, samples = ef.ensemble.Seeds(k), ef.ensemble.Bootstrap(k)
    models = {
        f"{k} seeds, all the data": ef.fit(config, splits, members=seeds).model,
        f"{k} bootstrap samples": ef.fit(config, splits, members=samples).model,
        f"{k} fold members": ef.cross_validate(config, splits, k).result.model,
    }
    first = ef.select_members(models[f"{k} seeds, all the data"], 0)
    lines = [
        f"{machine_line()} Members of `best()` ({config.epochs} epochs).",
        "",
        "| members | test | test mirrored |",
        "|---|---|---|",
        accuracy_lines("one model (seed 0, all data)", first, splits.test),
        *(accuracy_lines(name, m, splits.test) for name, m in models.items()),
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=80)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/folds.md"))
    parser.add_argument(
        "--best",
        action="store_true",
        help="only the ensembles, of `best()` members (400 epochs, or --epochs)",
    )
    args = parser.parse_args()
    k, data = args.folds, ef.load_fashion_mnist()
    config = ef.TrainConfig(epochs=args.epochs)
    splits = ef.split_data(data)
    if args.best:
        return best_ensembles(
            args,
            ef.TrainConfig.best(**({"epochs": args.epochs} if args.epochs != 80 else {})),
            splits,
        )
    t = time.perf_counter()
    cv = ef.cross_validate(config, splits, k)
    cv_wall = time.perf_counter() - t
    print(f"cv: {cv.accuracy_mean:.4f} ± {cv.accuracy_std:.4f} in {cv_wall:.0f} s", flush=True)
    t, gaps = time.perf_counter(), []
    for i in range(k):
        alone = ef.fit(
            config.with_changes(seed=config.seed + i),
            ef.Splits(splits.train.take(cv.subsets.train[i]), splits.test),
        )
        member = ef.select_members(cv.result.state.model, i)
        gaps.append(
            max(
                float(jnp.abs(a - b).max())
                for a, b in zip(
                    (layer.weight for layer in member.layers),
                    (layer.weight for layer in alone.state.model.layers),
                    strict=True,
                )
            )
        )
    separate_wall = time.perf_counter() - t
    seeds = ef.fit_ensemble(config, splits, k)
    boot = ef.fit(config, splits, members=ef.ensemble.Bootstrap(k))
    per_step = {
        name: r.train_seconds / sum(h["steps"] for h in r.history)
        for name, r in (("folds", cv.result), ("seeds", seeds))
    }
    memory = {
        "folds": chunk_memory(cv.result, splits, cv.subsets),
        "seeds": chunk_memory(seeds, splits, None),
    }
    lines = [
        f"{machine_line()} The default recipe ({args.epochs} epochs), "
        f"{k} folds of the 60,000 training images.",
        "",
        "## Cross-validation",
        "",
        "| fold | accuracy on its held-out fold | loss |",
        "|---|---|---|",
    ]
    lines += [
        f"| {i} | {a:.4f} | {loss:.4f} |"
        for i, (a, loss) in enumerate(zip(cv.fold_accuracy, cv.fold_loss, strict=True))
    ]
    lines += [
        "",
        f"Mean {cv.accuracy_mean:.4f} ± {cv.accuracy_std:.4f} (sd of {k} folds); "
        f"out-of-fold accuracy over all 60,000: {(cv.probabilities.argmax(1) == cv.labels).mean():.4f}. "
        f"Wall time: one program {cv_wall:.0f} s, {k} separate runs {separate_wall:.0f} s "
        f"(ratio {separate_wall / cv_wall:.2f}); the largest weight difference between a "
        f"member and its separate run: {max(gaps):.1e}.",
        "",
        "## The cost of subsets (5 members each)",
        "",
        "| members | train s per step | compiled chunk memory, MB |",
        "|---|---|---|",
        *(
            f"| {name} | {per_step[name] * 1000:.1f} ms | {memory[name]:.1f} |"
            for name in ("folds", "seeds")
        ),
        "",
    ]
    lines += [
        "## Ensembles",
        "",
        "| members | test | test mirrored |",
        "|---|---|---|",
        accuracy_lines(
            "one model (seed 0, all data)", ef.select_members(seeds.model, 0), splits.test
        ),
        accuracy_lines(f"{k} seeds, all the data", seeds.model, splits.test),
        accuracy_lines(f"{k} bootstrap samples", boot.model, splits.test),
        accuracy_lines(f"{k} fold members", cv.result.model, splits.test),
        "",
    ]
    lines += [
        "## Planted label flips (1% of the training labels)",
        "",
        "| flips to | planted | issues reported | precision at k | recall at k | "
        "recall among all issues |",
        "|---|---|---|---|---|---|",
    ]
    labels = np.asarray(splits.train.labels)
    confusable = most_confused_with(cv.probabilities, labels)
    for kind in ("confusable", "random"):
        new, planted = flipped(labels, 0.01, confusable if kind == "confusable" else None)
        noisy = ef.Splits(ArrayDataset(splits.train.images, jnp.asarray(new)), splits.test)
        found = ef.audit_labels(ef.cross_validate(config, noisy, k).probabilities, new)
        top = set(found.indices[: len(planted)].tolist())
        hits = len(top & set(planted.tolist()))
        everywhere = len(set(found.indices.tolist()) & set(planted.tolist()))
        lines.append(
            f"| {kind} | {len(planted)} | {len(found.indices):,} | "
            f"{hits / len(planted):.3f} | {hits / len(planted):.3f} | "
            f"{everywhere / len(planted):.3f} |"
        )
        print(lines[-1], flush=True)
    lines.append("")
    lines.append("At k = the number planted, precision and recall are the same number.")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
