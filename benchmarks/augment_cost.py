"""What each augmentation, the weight average and a distillation teacher cost per
training step, as a ratio to the plain step, measured in one process.

Every variant's chunk of steps is compiled ahead of time; then the variants run in
turn, round after round, so that drift in the machine's speed falls on all of them
alike, and the table gives each one's median time per step over the plain step's.

    python benchmarks/augment_cost.py [--steps 50] [--rounds 7] [--teachers 5]
        [--out benchmarks/results/augment_cost.md]
"""

import argparse
import statistics
import time
from pathlib import Path

import jax

import eqx_fmnist as ef
from eqx_fmnist.bench import machine_facts
from eqx_fmnist.distill import Teacher

VARIANTS = {
    "plain step (no augmentation)": {},
    "shift ±1": {"shift": 1},
    "shift ±2, uniform": {"shift": 2, "shift_distribution": "uniform"},
    "mirror": {"mirror": True},
    "erase (p = 0.5)": {"erase": 0.5},
    "the default: shift ±2 triangular + mirror": {"shift": 2, "mirror": True},
    "shift ±2 + mirror + erase": {"shift": 2, "mirror": True, "erase": 0.5},
    "weight average (EMA)": {"ema_decay": 0.999},
}
"""Changes to the plain step (`TrainConfig(shift=0, mirror=False)`)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--teachers", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/augment_cost.md"))
    args = parser.parse_args()
    train, _ = ef.to_datasets(ef.load_fashion_mnist())
    base = ef.TrainConfig(shift=0, mirror=False)
    teachers = ef.init_members(
        [base.with_changes(seed=s) for s in range(args.teachers)], len(train)
    ).model
    runs = {name: (base.with_changes(**kw), None) for name, kw in VARIANTS.items()}
    runs[f"distillation ({args.teachers} teachers)"] = (base, Teacher(teachers))
    compiled, states = {}, {}
    for name, (config, teacher) in runs.items():
        state = ef.init_state(config, len(train))
        compiled[name] = ef.compile_steps(
            state, train, batch_size=config.batch_size, num_steps=args.steps, teacher=teacher
        )
        states[name], _ = compiled[name](state)  # one warm-up call
    seconds = {name: [] for name in runs}
    for _ in range(args.rounds):
        for name in runs:
            t = time.perf_counter()
            states[name], metrics = compiled[name](states[name])
            jax.block_until_ready(metrics)
            seconds[name].append((time.perf_counter() - t) / args.steps)
    plain = statistics.median(seconds["plain step (no augmentation)"])
    facts = machine_facts()
    lines = [
        f"Machine: {facts['cpu']}, {facts['cores']} cores ({', '.join(facts['flags'])}); "
        f"jax {facts['jax']}. Batch {base.batch_size}, chunks of {args.steps} steps, "
        f"median of {args.rounds} rounds, variants interleaved.",
        "",
        "| step | ms per step | ratio to the plain step |",
        "|---|---|---|",
    ]
    for name, times in seconds.items():
        m = statistics.median(times)
        lines.append(f"| {name} | {m * 1e3:.2f} | {m / plain:.2f} |")
    print("\n".join(lines))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
