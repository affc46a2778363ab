"""What the default recipe's augmentation and a bfloat16 policy cost or save per
training step, and what the run a user starts gets of the fused path: in one process,
interleaved repetitions, medians.

    python benchmarks/step_costs.py [--steps 100] [--repeats 7] [--epochs 2]
        [--max-isa AVX2] [--out benchmarks/results/step_costs.md]

The first table is the fused chunk (`train_steps`, `--steps` steps per call) of the
default recipe with its augmentation's parts turned on one at a time (plain: none;
shifts of up to 2 pixels; mirrors; both, the recipe), under float32 and under
`p=f32,c=bf16,o=f32`. The second puts the moves' two forms side by side (the gather,
`eqx_fmnist.augment.gather_moves`, and the selects, `select_moves`), each with every
step gathering and moving its own batch and with a block of steps' batches prepared at
once (`eqx_fmnist.batches.block_steps`): the library picks the gather step by step on a
CPU and the selects in blocks elsewhere, and this table says what each choice is worth
on the machine at hand. The third is `harness.main_job_rows`: `fit` of the
default recipe, the same without augmentation, and the plain fused epoch.

`--max-isa AVX2` runs XLA's generated code as on a CPU without AVX-512 (the
`xla_cpu_max_isa` flag, set before JAX starts): a stand-in for the AVX2 machines of
this project when only an AVX-512 one is at hand. It caps the code XLA emits (the
gathers, the elementwise fusions), not what the matmul libraries pick at run time, so
it is a stand-in, not the machine.
"""

import argparse
import os
from pathlib import Path

FORMS = {  # name: (moves, block of prepared steps, augmented)
    "plain, step by step": ("gather", False, False),
    "plain, in blocks": ("gather", True, False),
    "gather, step by step": ("gather", False, True),
    "gather, in blocks": ("gather", True, True),
    "selects, step by step": ("selects", False, True),
    "selects, in blocks": ("selects", True, True),
}


def form_runner(train, moves: str, blocks: bool, augmented: bool, steps: int):
    """A run of `steps` default-recipe steps (float32) compiled with the moves' `moves`
    form, each step on its own or a block at a time (the accelerators' block)."""
    import jax

    import eqx_fmnist as ef
    from eqx_fmnist import (
        augment,
        chunk as chunks,  # it asks `block_steps` for its block
    )
    from eqx_fmnist.batches import block_steps
    from eqx_fmnist.step import compile_steps

    config = ef.TrainConfig() if augmented else ef.TrainConfig(shift=0, mirror=False)
    form = augment.gather_moves if moves == "gather" else augment.select_moves

    def move_batch(images, dx, dy, flip, erase_box=None, *, bound=augment.SIDE):
        if moves == "gather":
            return form(images, dx, dy, flip, erase_box)
        return form(images, dx, dy, flip, erase_box, bound=bound)

    block = block_steps(steps, config.batch_size, 1, "tpu") if blocks else 1
    state = [ef.init_state(config, len(train))]
    saved = augment.move_batch, chunks.block_steps
    augment.move_batch, chunks.block_steps = move_batch, lambda *_: block
    # JAX keeps traces by the chunk's arguments, which do not name the form: without
    # clearing, a second form would reuse the first one's trace.
    jax.clear_caches()
    try:  # traced and compiled now, with this form; called below without tracing
        chunk = compile_steps(state[0], train, batch_size=config.batch_size, num_steps=steps)
    finally:
        augment.move_batch, chunks.block_steps = saved
        jax.clear_caches()

    def run():
        state[0], metrics = chunk(state[0])
        return metrics

    return run


def form_rows(ms: dict[str, float], steps: int, batch: int) -> list[str]:
    """The forms table's rows: plain, the gather and the selects, each step by step and
    in blocks; the library's own choice here in bold."""
    import jax

    from eqx_fmnist.batches import block_steps

    cpu = block_steps(steps, batch, 1, jax.default_backend()) == 1
    chosen = "gather, step by step" if cpu else "selects, in blocks"
    rows = []
    for name in ("plain", "gather", "selects"):
        cells = []
        for how in ("step by step", "in blocks"):
            key = f"{name}, {how}"
            cell = f"{ms[key]:.3f}"
            cells.append(f"**{cell}** (the library's)" if key == chosen else cell)
        rows.append(f"| {name} | {' | '.join(cells)} |")
    return rows


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

    from harness import machine_line, main_job_rows, measure_interleaved, write_results

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
    forms = {name: form_runner(train, *form, args.steps) for name, form in FORMS.items()}
    results = measure_interleaved(
        named | forms, examples=args.steps * batch, batch_size=batch, repeats=args.repeats
    )
    form_ms = {r.name: 1e3 * batch / r.examples_per_sec for r in results[len(named) :]}
    results = results[: len(named)]
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
        f"The moves' two forms, float32, {args.steps} steps per call, milliseconds per "
        "step, interleaved with the table above; *plain* trains on the images as they "
        "are. The library's own choice on this machine is marked.",
        "",
        "| the recipe's moves | step by step | in blocks of prepared steps |",
        "|---|---|---|",
        *form_rows(form_ms, args.steps, batch),
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
    write_results(args.out, text)


if __name__ == "__main__":
    main()
