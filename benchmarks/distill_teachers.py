"""Do teachers trained without label smoothing distil better? And at which temperature?

On a validation split (5,000 training images held out; never the test set): five
teachers of the default recipe with label smoothing 0.1 and five with none, trained as
ten members of one program; then students of the default recipe (seed 100) distilled
from each set of five at a few temperatures and weights, and the same student without a
teacher. Each student's validation accuracy, clean and mirrored, and its teachers'
ensemble's.

    python benchmarks/distill_teachers.py [--teachers 5] [--epochs 80]
        [--out benchmarks/results/distill_teachers.md]
"""

import argparse
from pathlib import Path

import eqx_fmnist as ef
from eqx_fmnist.bench import machine_facts

VALIDATION = 5000
STUDENTS = [(1.0, 1.0), (2.0, 0.7)]
"""(distill_temperature, distill_weight) of each student."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teachers", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=80)
    parser.add_argument("--steps", type=int, help="a quick check: every run this many steps")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/distill_teachers.md"))
    args = parser.parse_args()
    length = {"steps": args.steps} if args.steps else {"epochs": args.epochs}
    splits = ef.split_data(ef.load_fashion_mnist(), validation_size=VALIDATION)
    held = ef.Splits(splits.train, None, splits.validation, None)
    val = splits.validation
    mirrored = ef.ArrayDataset(ef.move_images(val.images, mirror=True), val.labels)
    base = ef.TrainConfig(validation_size=VALIDATION, **length)
    k = args.teachers
    configs = [base.with_changes(seed=s, label_smoothing=ls) for ls in (0.1, 0.0) for s in range(k)]
    teachers = ef.fit(configs, held)
    facts = machine_facts()
    lines = [
        f"Machine: {facts['cpu']}, {facts['cores']} cores; jax {facts['jax']}. Validation "
        f"accuracy ({VALIDATION:,} held-out training images); the default recipe, "
        f"{args.steps or args.epochs} {'steps' if args.steps else 'epochs'}.",
        "",
        "| teachers | T | weight | student clean | student mirrored | teachers' ensemble |",
        "|---|---|---|---|---|---|",
    ]
    student = base.with_changes(seed=100)
    alone = ef.fit(student, held)
    lines.append(f"| none | | | {alone.validation.accuracy:.4f} | "
                 f"{ef.evaluate(alone.model, mirrored).accuracy:.4f} | |")  # fmt: skip
    print(lines[-1], flush=True)
    for i, ls in enumerate((0.1, 0.0)):
        stack = ef.select_members(teachers.model, list(range(i * k, (i + 1) * k)))
        ensemble = ef.evaluate(stack, val).accuracy
        for t, w in STUDENTS:
            r = ef.fit(
                student.with_changes(distill_temperature=t, distill_weight=w), held, teacher=stack
            )
            lines.append(
                f"| {k} with label smoothing {ls:g} | {t:g} | {w:g} | {r.validation.accuracy:.4f} "
                f"| {ef.evaluate(r.model, mirrored).accuracy:.4f} | {ensemble:.4f} |"
            )
            print(lines[-1], flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
