"""Patient distillation, one arm at a time: one CNN teacher (`TrainConfig.teacher()`,
trained here, or loaded from `--teacher FILE` where an earlier run saved it), then
students of `TrainConfig.distilled()`, each `SEED:MIXUP:EPOCHS`: mixup 0 reads the
teacher's table (its answers on the 50 moved and mirrored views the student sees),
mixup above 0 asks the teacher live on the mixed views (function matching). Each student
on all 10,000 test images as they are, mirrored and shifted by 2 pixels, with its `fit`
time. The table is rewritten after every row, so a run cut short keeps what it measured.

    python benchmarks/distill_ablation.py 0:0:400 0:0:2000 0:1.0:2000
        [--teacher FILE] [--teacher-channels 64,128] [--teachers K]
        [--out benchmarks/results/distill_ablation.md]

`--teacher-channels` makes the teacher wider, `--teachers K` an ensemble of K CNNs.
Long schedules are an accelerator's: on a TPU v5e 5,000 epochs train in 46 s
(`results/tpu-v5-lite/distill_ablation.md`).
"""

import argparse
import time
from pathlib import Path

import equinox as eqx
import jax.random as jr
import numpy as np

import eqx_fmnist as ef

from harness import machine_line


def arm(text: str) -> tuple[int, float, int]:
    """`SEED:MIXUP:EPOCHS` as numbers, or argparse's one-line error."""
    try:
        seed, mixup, epochs = text.split(":")
        return int(seed), float(mixup), int(epochs)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not SEED:MIXUP:EPOCHS, e.g. 0:0:400"
        ) from None


def write(out: Path, head: list[str], rows: list[str]) -> None:
    """The table so far, written whole to a temporary name and moved into place."""
    out.parent.mkdir(parents=True, exist_ok=True)
    part = out.with_suffix(".part")
    part.write_text("\n".join(head + rows) + "\n")
    part.replace(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("arms", type=arm, nargs="+", metavar="SEED:MIXUP:EPOCHS")
    parser.add_argument(
        "--teacher", type=Path, help="load the teacher from this file, or train and save it there"
    )
    parser.add_argument("--teacher-epochs", type=int, help="default: TrainConfig.teacher()'s")
    parser.add_argument(
        "--teacher-channels", help="the CNN's channels, e.g. 64,128 (default: teacher()'s)"
    )
    parser.add_argument(
        "--teachers", type=int, default=1, help="an ensemble of this many CNNs (seeds 0..K-1)"
    )
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/distill_ablation.md"))
    args = parser.parse_args()
    splits = ef.split_data(ef.load_fashion_mnist())
    assert splits.test is not None
    config = ef.TrainConfig.teacher(seed=0)
    if args.teacher_epochs:
        config = config.with_changes(epochs=args.teacher_epochs)
    if args.teacher_channels:
        channels = tuple(int(c) for c in args.teacher_channels.split(","))
        config = config.with_changes(channels=channels)
    members = ef.ensemble.Seeds(args.teachers) if args.teachers > 1 else None
    if args.teacher and args.teacher.is_file():
        seeds = [config.with_changes(seed=s) for s in range(args.teachers)]
        like = (
            ef.init_members(seeds, len(splits.train)).model
            if members
            else ef.build_model(config, jr.key(0))
        )
        teacher = eqx.tree_deserialise_leaves(args.teacher, like)
        taught = f"loaded from `{args.teacher.name}`"
    else:
        start = time.perf_counter()
        result = ef.fit(config, splits, members=members)
        teacher, seconds = result.model, time.perf_counter() - start
        if args.teacher:
            eqx.tree_serialise_leaves(args.teacher, teacher)
        taught = f"trained here, {config.epochs} epochs, `fit` {seconds:.0f} s"
    accuracy = ef.evaluate(teacher, splits.test).accuracy
    head = [
        machine_line(),
        "",
        f"Teacher: {args.teachers} CNN(s) of `TrainConfig.teacher()` (channels "
        f"{list(config.channels)}; seeds from 0; {ef.count_params(teacher):,} parameters), "
        f"{taught}: test accuracy {accuracy:.4f}. Students: `TrainConfig.distilled()` "
        "(the 784-256-128-10 GELU MLP) with the seed, mixup and epochs of each row; mixup "
        "0 reads the teacher's "
        "table, above 0 asks the teacher live. All 10,000 test images; shifted: the mean "
        "over moves of 2 pixels left, right, up and down. `fit` s: the call's wall time "
        "(moving the data, compiling, the teacher's table, training, the test); train s: "
        "the training alone.",
        "",
        "| seed | mixup | epochs | clean | mirrored | shifted 2 px | fit s | train s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    rows: list[str] = []
    found: dict[tuple[float, int], list[tuple[float, float, float]]] = {}
    for seed, mixup, epochs in args.arms:
        student = ef.TrainConfig.distilled(seed=seed, mixup=mixup).with_changes(epochs=epochs)
        start = time.perf_counter()
        result = ef.fit(student, splits, teacher=teacher)
        seconds = time.perf_counter() - start
        rob = ef.evaluate_robustness(result.model, splits.test, shifts=(2,))
        rows.append(
            f"| {seed} | {mixup:g} | {epochs:,} | {rob.clean:.4f} | {rob.mirrored:.4f} "
            f"| {rob.shifted[2]:.4f} | {seconds:.0f} | {result.train_seconds:.0f} |"
        )
        print(rows[-1], flush=True)
        found.setdefault((mixup, epochs), []).append((rob.clean, rob.mirrored, rob.shifted[2]))
        write(args.out, head, rows + means(found))
    print(f"wrote {args.out}")


def means(found: dict[tuple[float, int], list[tuple[float, float, float]]]) -> list[str]:
    """A row of mean ± sd for each arm measured with more than one seed."""
    rows = []
    for (mixup, epochs), scores in found.items():
        if len(scores) > 1:
            each = np.array(scores)
            mean, sd = each.mean(0), each.std(0, ddof=1)
            cells = " | ".join(f"{m:.4f} ± {d:.4f}" for m, d in zip(mean, sd, strict=True))
            rows.append(f"| **mean ± sd of {len(each)}** | {mixup:g} | {epochs:,} | {cells} | | |")
    return rows


if __name__ == "__main__":
    main()
