"""What one compiled call costs besides its steps, and what a run that logs pays for it:
in one process, interleaved repetitions, medians.

    python benchmarks/call_costs.py [--repeats 7] [--queued 20]
        [--out benchmarks/results/call_costs.md]

1. The library's compiled chunk (`compile_steps`, the codelab's recipe in float32,
   batch 512) at one step and at one epoch's steps per call, each call waited for on
   its own, and `--queued` calls queued one after another before waiting: a straight
   line through the two lengths gives the cost of a step and the fixed cost of a call.
2. One epoch: the library's fused epoch (`train_epoch`, its metrics read) against
   tutorial 4's hand-written `jax.jit` epoch (`benchmarks/baselines.py`,
   `scan_epoch_trainer`), under the float32 policy and `p=f32,c=bf16,o=f32` (the
   hand-written epoch's model under the same policy: the same products).
3. `fit` of the codelab's recipe with a host read every 25 steps and one per epoch.
"""

import argparse
import statistics
import time
from pathlib import Path

import jax


def call_rows(train, config, lengths, repeats: int, queued: int) -> list[tuple[int, float, float]]:
    """`(steps per call, ms a call waited for, ms a call when queued)` per length."""
    import eqx_fmnist as ef
    from eqx_fmnist.step import compile_steps

    rows = []
    for n in lengths:
        state = [ef.init_state(config, len(train))]
        run = compile_steps(state[0], train, batch_size=config.batch_size, num_steps=n)

        def one(run=run, state=state):
            state[0], metrics = run(state[0])
            return metrics

        def many(one=one):
            return [one() for _ in range(queued)]

        waited, together = [], []
        jax.block_until_ready(many())  # warm
        for _ in range(repeats):
            t = time.perf_counter()
            for _ in range(queued):
                jax.block_until_ready(one())
            waited.append((time.perf_counter() - t) / queued)
            t = time.perf_counter()
            jax.block_until_ready(many())
            together.append((time.perf_counter() - t) / queued)
        rows.append((n, 1e3 * statistics.median(waited), 1e3 * statistics.median(together)))
    return rows


def line_through(rows, column: int) -> tuple[float, float]:
    """`(fixed ms per call, ms per step)` of the line through the first and last rows."""
    (n1, *a), (n2, *b) = rows[0], rows[-1]
    per_step = (b[column] - a[column]) / (n2 - n1)
    return a[column] - per_step * n1, per_step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--queued", type=int, default=20, help="calls queued before waiting")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/call_costs.md"))
    args = parser.parse_args()

    import eqx_fmnist as ef

    from baselines import scan_epoch_trainer
    from harness import fit_cadence, machine_line, measure_interleaved, write_results
    from harness.suite import library_fused_trainer

    splits = ef.split_data(ef.load_fashion_mnist())
    train = splits.train
    config = ef.TrainConfig.codelab()
    spe = len(train) // config.batch_size
    rows = call_rows(train, config, (1, spe), args.repeats, args.queued)
    lines = [
        machine_line(),
        "",
        f"The library's compiled chunk, the codelab's recipe (float32, batch "
        f"{config.batch_size}), {len(train):,} training images; median of {args.repeats}, "
        f"each of {args.queued} calls.",
        "",
        "| steps per call | ms per call, each waited for | ms per call, queued |",
        "|---|---|---|",
        *(f"| {n} | {w:.3f} | {q:.3f} |" for n, w, q in rows),
    ]
    for column, how in ((0, "each waited for"), (1, "queued")):
        fixed, per_step = line_through(rows, column)
        lines.append(
            f"| *line through them, {how}* | fixed {fixed:.3f} ms a call | "
            f"{1e3 * per_step:.1f} µs a step |"
        )
    runs, policies = (
        {},
        {"float32": "p=f32,c=f32,o=f32", "bfloat16": "p=f32,c=bf16,o=f32"},
    )
    for name, spec in policies.items():
        c = config.with_changes(precision=spec)
        fused = library_fused_trainer(train, c, read_every=spe)
        scan = scan_epoch_trainer(train, c)
        runs[f"library's fused epoch, {name}"] = lambda fused=fused: fused(spe)
        runs[f"hand-written scan epoch, {name}"] = lambda scan=scan: scan(spe)
    epochs = measure_interleaved(
        runs, examples=spe * config.batch_size, batch_size=config.batch_size, repeats=args.repeats
    )
    lines += [
        "",
        f"One epoch ({spe} steps) in one call, its loss read; median of {args.repeats} "
        "interleaved repetitions. The hand-written epoch is tutorial 4's "
        "(`benchmarks/baselines.py`), its model multiplying as the same policy says "
        "(float32 products at `highest`, or bfloat16).",
        "",
        "| epoch | ms | examples/sec | library / hand-written |",
        "|---|---|---|---|",
    ]
    by_name = {t.name: t for t in epochs}
    for t in epochs:
        base = by_name[t.name.replace("library's fused", "hand-written scan")]
        lines.append(
            f"| {t.name} | {1e3 * spe * config.batch_size / t.examples_per_sec:.2f} | "
            f"{t.examples_per_sec:,.0f} | {t.examples_per_sec / base.examples_per_sec:.2f}x |"
        )
    cadence = fit_cadence(splits, config.with_changes(steps=4 * spe), repeats=args.repeats)
    lines += [
        "",
        f"`fit` of the codelab's recipe ({4 * spe} steps), a host read every 25 steps and "
        f"one per epoch; median of {args.repeats}, `fit`'s own examples/sec.",
        "",
        "| host read every | examples/sec | x one read per epoch |",
        "|---|---|---|",
        *(
            f"| {c.log_every} steps | {c.examples_per_sec:,.0f} | "
            f"{c.examples_per_sec / cadence[-1].examples_per_sec:.2f}x |"
            for c in cadence
        ),
        "",
    ]
    text = "\n".join(lines)
    write_results(args.out, text)


if __name__ == "__main__":
    main()
