"""The best plain MLP, measured: `TrainConfig.teacher()` (a CNN) trained on all 60,000
training images, then `TrainConfig.distilled()` students of the 784-256-128-10 GELU MLP
that learn from it, one per seed; every model on all 10,000 test images as they are,
mirrored and shifted by 2 pixels, without and with test-time augmentation (the image and
its mirror); the recipe's wall time (the teacher, then one student); and every export
format of the first student, each checked against the library on all 10,000 images.

    python benchmarks/distill_recipe.py [--seeds 0 1 2] [--out benchmarks/results/distill_recipe.md]

`--mixup A` trains the students on images mixed in pairs, which the teacher answers on
(function matching, `TrainConfig(mixup=A)`); `--epochs` makes their runs longer;
`--teacher-channels 64,128` makes the teacher wider.
"""

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

import eqx_fmnist as ef
from eqx_fmnist.export import FORMATS, ExportError, export_model
from eqx_fmnist.views import TTA_MIRROR

from harness import machine_line, write_results


def scores(model, test, views) -> tuple[float, float, float]:
    """Test accuracy clean, mirrored, and the mean over 2-pixel moves (left, right, up,
    down), each averaged over `views` (`None`: the image alone)."""
    rob = ef.evaluate_robustness(model, test, shifts=(2,), tta=views)
    return rob.clean, rob.mirrored, rob.shifted[2]


def exports(model, config, images) -> list[str]:
    """Each export format's check on `images`: the largest logit difference, or why it
    was not made."""
    rows, folder = [], Path(tempfile.mkdtemp())
    for name in FORMATS:
        try:
            m = export_model(
                model, ef.FLOAT32, config, folder / f"m.{name}", check_images=images, format=name
            )
        except ExportError as e:
            rows.append(f"| {name} | not made: {e} |")
            continue
        p = m["parity"]
        rows.append(
            f"| {name} | {p['images']:,} images, {p['mismatches']} other classes, largest "
            f"logit difference {p['max_logit_difference']:.1e} |"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--teacher-epochs", type=int, help="default: TrainConfig.teacher()'s")
    parser.add_argument("--epochs", type=int, help="default: TrainConfig.distilled()'s")
    parser.add_argument(
        "--teacher-channels", help="the CNN's channels, e.g. 64,128 (default: teacher()'s)"
    )
    parser.add_argument("--mixup", type=float, default=0.0, help="the students' mixup (0: none)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/distill_recipe.md"))
    args = parser.parse_args()
    data = ef.load_fashion_mnist()
    splits = ef.split_data(data)
    test = splits.test
    assert test is not None

    teacher_config = ef.TrainConfig.teacher(seed=args.seeds[0])
    if args.teacher_epochs:
        teacher_config = teacher_config.with_changes(epochs=args.teacher_epochs)
    if args.teacher_channels:
        channels = tuple(int(c) for c in args.teacher_channels.split(","))
        teacher_config = teacher_config.with_changes(channels=channels)
    start = time.perf_counter()
    taught = ef.fit(teacher_config, splits)
    teacher_seconds = time.perf_counter() - start
    print(f"teacher: {taught.test.accuracy:.4f} in {teacher_seconds:.0f} s", flush=True)

    students, seconds = [], []
    for seed in args.seeds:
        config = ef.TrainConfig.distilled(seed=seed)
        config = config.with_changes(epochs=args.epochs) if args.epochs else config
        config = config.with_changes(mixup=args.mixup)
        start = time.perf_counter()
        students.append(ef.fit(config, splits, teacher=taught.model))
        seconds.append(time.perf_counter() - start)
        print(f"student seed {seed}: {students[-1].test.accuracy:.4f}", flush=True)
    plain = ef.TrainConfig.best(seed=args.seeds[0])
    plain = plain.with_changes(epochs=args.epochs) if args.epochs else plain
    start = time.perf_counter()
    alone = ef.fit(plain, splits)
    alone_seconds = time.perf_counter() - start

    rows = [(f"teacher: CNN, seed {args.seeds[0]}", taught.model, teacher_seconds)]
    rows += [
        (f"student, seed {c.seed}", r.model, s)
        for c, r, s in zip((r.config for r in students), students, seconds, strict=True)
    ]
    rows.append(
        (
            f"the same MLP without a teacher (best()), seed {args.seeds[0]}",
            alone.model,
            alone_seconds,
        )
    )
    found = {name: (scores(m, test, None), scores(m, test, TTA_MIRROR), s) for name, m, s in rows}
    cnn = ef.count_params(taught.model)
    mlp = ef.count_params(students[0].model)
    lines = [
        machine_line(),
        "",
        f"Teacher: `TrainConfig.teacher()`, a CNN of {cnn:,} parameters (3 x 3 convolutions "
        f"of stride 2 with channels {list(teacher_config.channels)}, then a "
        f"{'-'.join(map(str, teacher_config.hidden_sizes))} head), "
        f"{teacher_config.epochs} epochs. Students: `TrainConfig.distilled()`, the "
        f"784-256-128-10 GELU MLP ({mlp:,} parameters), "
        f"{students[0].config.epochs} epochs, soft-target weight "
        f"{students[0].config.distill_weight}, temperature "
        f"{students[0].config.distill_temperature}, mixup {students[0].config.mixup}. All "
        "10,000 test images; shifted: the "
        "mean over moves of 2 pixels left, right, up and down. TTA: each model's mean "
        "probability over the image and its mirror.",
        "",
        "| model | clean | mirrored | shifted 2 px | clean, TTA | mirrored, TTA "
        "| shifted 2 px, TTA | fit s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, (bare, tta, s) in found.items():
        cells = " | ".join(f"{v:.4f}" for v in (*bare, *tta))
        lines.append(f"| {name} | {cells} | {s:.0f} |")
    each = np.array(
        [
            found[f"student, seed {c.seed}"][0] + found[f"student, seed {c.seed}"][1]
            for c in (r.config for r in students)
        ]
    )
    mean, sd = each.mean(0), each.std(0, ddof=1) if len(each) > 1 else np.zeros(6)
    cells = " | ".join(f"{m:.4f} ± {d:.4f}" for m, d in zip(mean, sd, strict=True))
    lines.append(f"| **students, mean ± sd of {len(each)}** | {cells} | |")
    lines += [
        "",
        f"The whole recipe (the teacher, then one student): **{teacher_seconds + seconds[0]:.0f} s** "
        f"({teacher_seconds:.0f} s + {seconds[0]:.0f} s, each the `fit` call's wall time: "
        "moving the data, compiling, the teacher's table, training and the test).",
        "",
        f"Every export of the student of seed {args.seeds[0]}, checked against the library:",
        "",
        "| format | check |",
        "|---|---|",
        *exports(students[0].model, students[0].config, data.test_images.reshape(-1, 784)),
    ]
    text = "\n".join(lines) + "\n"
    write_results(args.out, text)


if __name__ == "__main__":
    main()
