"""The device checks of `benchmarks/device_check.sh`, after its test run: the throughput
table (float32 at the default and at `highest` matmul precision, bfloat16), K members in
one program, time to 0.90, and an exported StableHLO artifact run on the device.
`--dry-run` does all of it on the CPU at tiny sizes.

    python benchmarks/device_check.py [--dry-run] [--out benchmarks/results/device]
"""

import argparse
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from baselines import all_trainers
from time_to_accuracy import time_to_accuracy

import eqx_fmnist as ef
from eqx_fmnist.bench import machine_facts, matmul_bound, measure_interleaved, run_benchmark
from eqx_fmnist.bench.suite import precision_rows
from eqx_fmnist.export import export_model, load_artifact
from eqx_fmnist.state import init_members


def members_table(train: ef.ArrayDataset, ks: list[int], steps: int, repeats: int) -> list[str]:
    """Model-examples/sec of K members in one compiled program against one model."""
    config = ef.TrainConfig(precision="p=f32,c=bf16,o=f32")
    runs, examples = {}, {}
    for k in ks:
        configs = [config.with_changes(seed=s) for s in range(k)]
        holder = {"state": init_members(configs, len(train))}

        def run(holder=holder):
            holder["state"], m = ef.train_steps(
                holder["state"], train, batch_size=config.batch_size, num_steps=steps
            )
            return m["loss"].block_until_ready()

        runs[f"K={k}"], examples[f"K={k}"] = run, k * steps * config.batch_size
    rows = measure_interleaved(
        runs, examples=examples, batch_size=config.batch_size, repeats=repeats
    )
    base = rows[0].examples_per_sec / ks[0]
    lines = ["| members in one program | model-examples/sec | x one model |", "|---|---|---|"]
    for k, row in zip(ks, rows, strict=True):
        lines.append(f"| {k} | {row.examples_per_sec:,.0f} | {row.examples_per_sec / base:.1f} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="the CPU, tiny sizes")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/device"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    dry = args.dry_run
    facts = machine_facts()
    data = ef.load_fashion_mnist()
    train, test = ef.to_datasets(data)
    if dry:
        train, test = train.take(jnp.arange(4096)), test.take(jnp.arange(1024))
    lines = [
        f"Machine: {facts['cpu']}; {facts['backend']} backend, {facts['devices']}, "
        f"matmul precision {facts['matmul_precision']}; jax {facts['jax']}.",
        "",
    ]
    t0 = time.perf_counter()
    print("== throughput table", flush=True)
    if (
        dry
    ):  # the whole table at smoke size is `benchmarks/throughput.py --quick`, tested on its own
        rows = precision_rows(
            train, ef.TrainConfig(batch_size=512, shift=0, mirror=False), repeats=1
        )
        bound = matmul_bound(512, min_seconds=0.01)
        lines += [
            "## Throughput (dry run: the precision rows only)",
            "",
            "| fused path, precision | examples/sec |",
            "|---|---|",
            *(f"| {t.name} | {t.examples_per_sec:,.0f} |" for t in rows),
            "",
            f"Matmul bound at batch 512: {bound.examples_per_sec:,.0f} examples/sec "
            f"({', '.join(sorted(set(bound.backends)))}).",
            "",
        ]
    else:
        trainers, skipped = all_trainers()
        report = run_benchmark(
            (train, test),
            repeats=5,
            trainers=trainers,
            skipped=skipped,
            steps={"python_dispatch": 25},
            progress=lambda s: print("  " + s, flush=True),
        )
        lines += ["## Throughput", "", report.to_markdown(), ""]
    print(f"== K members in one program ({time.perf_counter() - t0:.0f} s so far)", flush=True)
    ks = [1, 2] if dry else [1, 8, 64]
    lines += [
        "## Many models in one program (bfloat16)",
        "",
        *members_table(train, ks, steps=4 if dry else 117, repeats=1 if dry else 3),
        "",
    ]
    print(f"== time to 0.90 ({time.perf_counter() - t0:.0f} s so far)", flush=True)
    config = ef.TrainConfig(precision="p=f32,c=bf16,o=f32")
    if dry:
        config = config.with_changes(steps=40, hidden_sizes=(32,))
    target = 0.5 if dry else 0.90
    reached, final = time_to_accuracy(data, config, targets=(target,))
    seconds = reached[target]
    lines += [
        "## Time to accuracy (bfloat16)",
        "",
        f"{target:.2f} test accuracy after "
        + (f"{seconds:.1f} s" if seconds is not None else "never")
        + f" (compiling and every evaluation included); final {final:.4f}.",
        "",
    ]
    print(
        f"== a StableHLO artifact on the device ({time.perf_counter() - t0:.0f} s so far)",
        flush=True,
    )
    small = ef.fit(ef.TrainConfig(steps=40, hidden_sizes=(64,)), ef.Splits(train, test))
    images = np.asarray(data.test_images).reshape(len(data.test_images), -1)
    path = args.out / "model.stablehlo"
    manifest = export_model(
        small.model, small.state.policy, small.config, path, check_images=images
    )
    logits, _ = load_artifact(path)(images)
    device = jax.devices()[0]
    lines += [
        "## An exported StableHLO artifact",
        "",
        f"Lowered for {', '.join(manifest['platforms'])}; run on {device.platform} "
        f"({device.device_kind}): {manifest['parity']['mismatches']} of "
        f"{manifest['parity']['images']:,} predictions differ from the library; "
        f"{int((logits.argmax(-1) == np.asarray(data.test_labels)).sum()):,} correct.",
        "",
    ]
    (args.out / "device_check.md").write_text("\n".join(lines))
    print("\n".join(lines))
    print(f"wrote {args.out / 'device_check.md'} in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
