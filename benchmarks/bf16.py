"""bfloat16 end to end: how many of the training step's dots take bfloat16 operands, the
fused path's bfloat16/float32 speed (medians of interleaved epochs, one process), and
the test accuracy of the default recipe in each precision (3 seeds, trained as members
of one program).

    python benchmarks/bf16.py [--repeats 7] [--seeds 3] [--epochs 80]
        [--out benchmarks/results/bf16.md]
"""

import argparse
import re
import statistics
from pathlib import Path

import equinox as eqx
import jax.numpy as jnp

import eqx_fmnist as ef
from eqx_fmnist.bench import machine_facts
from eqx_fmnist.bench.suite import bf16_matmul_speedup, precision_rows

F32, BF16 = "p=f32,c=f32,o=f32", "p=f32,c=bf16,o=f32"


def dot_count(precision: str) -> tuple[int, int]:
    """`(dots, dots whose operands are both bfloat16)` in the lowered `train_step`."""
    state = ef.init_state(ef.TrainConfig(precision=precision), 60_000)
    x, y = jnp.zeros((512, 784), jnp.uint8), jnp.zeros((512,), jnp.int32)
    text = eqx.filter_jit(ef.train_step).lower(state, x, y).as_text()
    dots = [line for line in text.splitlines() if "stablehlo.dot_general" in line]
    both = [d for d in dots if re.search(r"\(tensor<[^>]*bf16>, tensor<[^>]*bf16>\)", d)]
    return len(dots), len(both)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=80)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/bf16.md"))
    args = parser.parse_args()
    facts = machine_facts()
    data = ef.load_fashion_mnist()
    train, _ = ef.to_datasets(data)
    flags = ", ".join(facts["flags"]) or "none of the listed"
    lines = [
        f"Machine: {facts['cpu']}, {facts['cores']} cores (flags: {flags}); "
        f"{facts['backend']} backend; jax {facts['jax']}.",
        "",
        "Produced by `python benchmarks/bf16.py`.",
        "",
        "| precision | dots in the lowered `train_step` | bfloat16 x bfloat16 |",
        "|---|---|---|",
    ]
    for spec in (F32, BF16):
        total, both = dot_count(spec)
        lines.append(f"| {spec} | {total} | {both} |")
    # The default recipe's work per step (augmentation included), batch 512.
    rows = precision_rows(train, ef.TrainConfig(), specs=(F32, BF16), repeats=args.repeats)
    f32, bf16 = rows
    ratios = [b / a for a, b in zip(f32.runs, bf16.runs, strict=True)] if f32.runs else []
    ceiling = bf16_matmul_speedup(1024)
    lines += [
        "",
        f"XLA's bfloat16 x bfloat16 -> float32 matmul (1024 cubed): {ceiling:.2f}x float32.",
        "",
        f"| fused path, one epoch per repetition ({args.repeats} interleaved) | examples/sec "
        "(median) | x float32 |",
        "|---|---|---|",
        f"| {F32} | {f32.examples_per_sec:,.0f} | 1.00 |",
        f"| {BF16} | {bf16.examples_per_sec:,.0f} | "
        f"{bf16.examples_per_sec / f32.examples_per_sec:.2f} |",
    ]
    if ratios:
        lines.append(f"\nPer-repetition ratios: {', '.join(f'{r:.2f}' for r in ratios)} "
                     f"(median {statistics.median(ratios):.2f}).")  # fmt: skip
    lines += ["", f"| precision | test accuracy of {args.seeds} seeds ({args.epochs} epochs) "
              "| mean |", "|---|---|---|"]  # fmt: skip
    means = {}
    for spec in (F32, BF16):
        result = ef.fit_ensemble(ef.TrainConfig(epochs=args.epochs, precision=spec),
                                 seeds=args.seeds, data=data)  # fmt: skip
        accs = [m.accuracy for m in result.test.members]
        means[spec] = statistics.mean(accs)
        lines.append(f"| {spec} | {', '.join(f'{a:.4f}' for a in accs)} | {means[spec]:.4f} |")
    lines.append(f"\nbfloat16 - float32: {100 * (means[BF16] - means[F32]):+.2f} points.")
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
