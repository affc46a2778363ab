"""What a distillation step costs: the default recipe's fused chunk with no teacher, with
live teachers run on every batch (five MLPs, or the CNN of `TrainConfig.teacher()`), and
with those teachers' answers read from a table computed once (`Teacher.table`), in
interleaved repetitions in one process.

    python benchmarks/distill_step.py [--teachers 5] [--steps 50] [--repeats 7]
        [--out benchmarks/results/distill_step.md]
    python benchmarks/distill_step.py --teacher cnn --out benchmarks/results/distill_step_cnn.md
"""

import argparse
import time
from pathlib import Path

import jax

import eqx_fmnist as ef
from eqx_fmnist.augment import augmentation_of
from eqx_fmnist.distill import Teacher

from harness import machine_line, measure_interleaved, write_results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teachers", type=int, default=5, help="MLP teachers (--teacher mlp)")
    parser.add_argument("--teacher", choices=("mlp", "cnn"), default="mlp")
    parser.add_argument("--steps", type=int, default=50, help="steps per timed call")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--train", type=int, help="a quick check: this many training images")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/distill_step.md"))
    args = parser.parse_args()
    data = ef.load_fashion_mnist()
    train = ef.to_datasets(data)[0]
    if args.train:
        train = ef.ArrayDataset(train.images[: args.train], train.labels[: args.train])
    config = ef.TrainConfig()
    # Teachers of the student's architecture, as `train --teacher` takes them; their
    # weights do not change what a step costs, so they are not trained here.
    seeds = [config.with_changes(seed=s) for s in range(1, args.teachers + 1)]
    if args.teacher == "cnn":
        teachers = ef.init_state(ef.TrainConfig.teacher(), len(train)).model
        who = f"the CNN of `TrainConfig.teacher()` ({ef.count_params(teachers):,} parameters)"
    else:
        teachers = ef.init_members(seeds, len(train)).model
        who = f"{args.teachers} teachers of the student's architecture"
    teacher = Teacher.for_student(teachers, config)
    t = time.perf_counter()
    table = jax.block_until_ready(teacher.table(train.images, augmentation_of(config)))
    table_seconds = time.perf_counter() - t

    def runner(soft):
        state = [ef.init_state(config, len(train))]

        def run():
            state[0], metrics = ef.train_steps(
                state[0],
                train,
                batch_size=config.batch_size,
                num_steps=args.steps,
                teacher=soft,
            )
            return metrics

        return run

    live = "live teacher" if args.teacher == "cnn" else "live teachers"
    runs = {"plain": runner(None), live: runner(teacher), "table": runner(table)}
    results = measure_interleaved(
        runs,
        examples=args.steps * config.batch_size,
        batch_size=config.batch_size,
        repeats=args.repeats,
    )
    plain = results[0].examples_per_sec
    lines = [
        machine_line(),
        "",
        f"The default recipe's step (batch {config.batch_size}, {len(train):,} training "
        f"images, shifts of up to {config.shift} pixels and mirrors: "
        f"{table.log_probs.shape[1]} views), {args.steps} steps per call, median of "
        f"{args.repeats} interleaved repetitions; {who}. The table ({table.log_probs.shape[0]:,} images x "
        f"{table.log_probs.shape[1]} views x 10, bfloat16, "
        f"{table.log_probs.nbytes / 2**20:.0f} MiB) took **{table_seconds:.1f} s** to "
        "compute, once.",
        "",
        "| step | examples/sec (median) | ms per step | time per step vs plain | compile s |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        ms = 1000 * config.batch_size / r.examples_per_sec
        lines.append(
            f"| {r.name} | {r.examples_per_sec:,.0f} | {ms:.2f} "
            f"| {plain / r.examples_per_sec:.2f}x | {r.compile_seconds:.2f} |"
        )
    text = "\n".join(lines) + "\n"
    write_results(args.out, text)


if __name__ == "__main__":
    main()
