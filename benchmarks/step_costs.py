"""What the default recipe's augmentation and a bfloat16 policy cost or save per
training step, and what the run a user starts gets of the fused path: in one process,
interleaved repetitions, medians.

    python benchmarks/step_costs.py [--steps 100] [--repeats 7] [--epochs 2]
        [--max-isa AVX2] [--out benchmarks/results/step_costs.md]

The first table is the fused chunk (`train_steps`, `--steps` steps per call) of the
default recipe with its augmentation's parts turned on one at a time (plain: none;
shifts of up to 2 pixels; mirrors; both, the recipe), under float32 and under
`p=f32,c=bf16,o=f32`. The second is `eqx_fmnist.bench.main_job_rows`: `fit` of the
default recipe, the same without augmentation, and the plain fused epoch.

`--max-isa AVX2` runs XLA's generated code as on a CPU without AVX-512 (the
`xla_cpu_max_isa` flag, set before JAX starts): a stand-in for the AVX2 machines of
this project when only an AVX-512 one is at hand. It caps the code XLA emits (the
gathers, the elementwise fusions), not what the matmul libraries pick at run time, so
it is a stand-in, not the machine.
"""

import argparse
import os
import sys
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100, help="steps per timed call")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--epochs", type=int, default=2, help="epochs of each fit")
    parser.add_argument("--fit-repeats", type=int, default=5)
    parser.add_argument("--max-isa", help="XLA's xla_cpu_max_isa, e.g. AVX2")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/step_costs.md"))
    args = parser.parse_args()
    if args.max_isa:  # before JAX starts: XLA reads its flags once
        os.environ["XLA_FLAGS"] = (
            f"{os.environ.get('XLA_FLAGS', '')} --xla_cpu_max_isa={args.max_isa}"
        )

    import eqx_fmnist as ef
    from eqx_fmnist.bench import machine_line, main_job_rows, measure_interleaved

    splits = ef.split_data(ef.load_fashion_mnist())
    train = splits.train
    parts = {
        "plain": dict(shift=0, mirror=False),
        "shifts": dict(shift=2, mirror=False),
        "mirror": dict(shift=0, mirror=True),
        "both (the recipe)": dict(shift=2, mirror=True),
    }
    policies = {"float32": "p=f32,c=f32,o=f32", "bfloat16": "p=f32,c=bf16,o=f32"}
    runs = {}
    for pname, spec in policies.items():
        for aname, aug in parts.items():
            config = ef.TrainConfig(precision=spec, **aug)

            def runner(config=config):
                state = [ef.init_state(config, len(train))]

                def run():
                    state[0], metrics = ef.train_steps(
                        state[0], train, batch_size=config.batch_size, num_steps=args.steps
                    )
                    return metrics

                return run

            runs[(pname, aname)] = runner()
    batch = ef.TrainConfig().batch_size
    named = {f"{p} {a}": run for (p, a), run in runs.items()}
    results = measure_interleaved(
        named, examples=args.steps * batch, batch_size=batch, repeats=args.repeats
    )
    ms = {key: 1e3 * batch / r.examples_per_sec for key, r in zip(runs, results, strict=True)}
    rows = []
    for aname in parts:
        f32, bf16 = ms[("float32", aname)], ms[("bfloat16", aname)]
        plain32, plain16 = ms[("float32", "plain")], ms[("bfloat16", "plain")]
        rows.append(
            f"| {aname} | {f32:.2f} | {plain32 / f32:.2f}x | {bf16:.2f} | "
            f"{plain16 / bf16:.2f}x | {f32 / bf16:.2f}x |"
        )
    jobs = main_job_rows(splits, epochs=args.epochs, repeats=args.fit_repeats)
    fused = jobs[-1].examples_per_sec
    no_aug = jobs[1].examples_per_sec
    job_rows = [
        f"| {t.name} | {t.examples_per_sec:,.0f} | {t.examples_per_sec / no_aug:.2f}x | "
        f"{t.examples_per_sec / fused:.2f}x |"
        for t in jobs
    ]
    isa = f" XLA's code capped at {args.max_isa} (`--max-isa`)." if args.max_isa else ""
    lines = [
        machine_line(),
        "",
        f"The default recipe's fused chunk, batch {batch}, {len(train):,} training images, "
        f"{args.steps} steps per call; median of {args.repeats} interleaved repetitions, "
        f"milliseconds per step.{isa}",
        "",
        "| augmentation | float32 ms | plain / this | bfloat16 ms | plain / this | "
        "float32 / bfloat16 |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
        f"`fit` of the default recipe ({args.epochs} epochs), the same without "
        "augmentation, and the plain fused epoch (no augmentation, one host read per "
        f"epoch), interleaved in one process; median of {args.fit_repeats}, examples/sec "
        "of training (compiling and evaluation excluded).",
        "",
        "| run | examples/sec | x fit without augmentation | x plain fused epoch |",
        "|---|---|---|---|",
        *job_rows,
        "",
    ]
    text = "\n".join(lines)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
