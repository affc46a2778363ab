"""The device checks of `benchmarks/device_check.sh`, after its test run: the throughput
table, K members of the default recipe in one program, the default recipe under each
precision policy, time to 0.90, and an exported StableHLO artifact run on the device.
Each table is written to `--out`'s `device_check.md` as soon as it is measured.
`--dry-run` does all of it on the CPU at tiny sizes.

    python benchmarks/device_check.py [--dry-run] [--out benchmarks/results/device]
        [--sections throughput members precision time artifact]
"""

import argparse
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import eqx_fmnist as ef
from eqx_fmnist.ensemble import Seeds
from eqx_fmnist.export import export_model, load_artifact
from eqx_fmnist.state import init_members

from baselines import all_trainers
from harness import machine_facts, measure_interleaved, run_benchmark
from harness.suite import precision_rows
from time_to_accuracy import time_to_accuracy

SECTIONS = ("throughput", "members", "precision", "time", "artifact")


def members_table(train: ef.ArrayDataset, ks: list[int], steps: int, repeats: int) -> list[str]:
    """Model-examples/sec of K members of the default recipe (augmentation included) in
    one compiled program, against one model."""
    config = ef.TrainConfig()
    runs, examples = {}, {}
    for k in ks:
        configs = [config.with_changes(seed=s) for s in range(k)]
        holder = {"state": init_members(configs, len(train))}

        def run(holder=holder):
            holder["state"], m = ef.train_steps(
                holder["state"], train, batch_size=config.batch_size, num_steps=steps
            )
            return m["loss"]

        runs[f"K={k}"], examples[f"K={k}"] = run, k * steps * config.batch_size
    rows = measure_interleaved(
        runs, examples=examples, batch_size=config.batch_size, repeats=repeats
    )
    base = rows[0].examples_per_sec / ks[0]
    lines = ["| members in one program | model-examples/sec | x one model |", "|---|---|---|"]
    for k, row in zip(ks, rows, strict=True):
        lines.append(f"| {k} | {row.examples_per_sec:,.0f} | {row.examples_per_sec / base:.1f} |")
    return lines


def many_members_run(splits: ef.Splits, k: int, config: ef.TrainConfig) -> str:
    """One `fit` of `k` members of `config`: its wall time, split, and the ensemble's
    test accuracy."""
    t = time.perf_counter()
    result = ef.fit(config, splits, members=Seeds(k))
    wall = time.perf_counter() - t
    s = result.seconds
    return (
        f"`fit` of {k} members x {config.epochs} epochs (the default recipe, "
        f"{config.total_steps(len(splits.train)):,} steps each): {wall:.1f} s wall "
        f"(compile {s['compile']:.1f} s, training {result.train_seconds:.1f} s at "
        f"{result.examples_per_sec:,.0f} model-examples/sec, test {s['test']:.1f} s); "
        f"the ensemble's test accuracy {result.test.accuracy:.4f}."
    )


def precision_table(splits: ef.Splits, config: ef.TrainConfig) -> list[str]:
    """The default recipe under float32 and bfloat16 policies: each `fit`'s speed, the
    products its matmuls took, and its test accuracy."""
    lines = [
        "| policy | products | examples/sec | test accuracy |",
        "|---|---|---|---|",
    ]
    for spec in ("p=f32,c=f32,o=f32", "p=f32,c=bf16,o=f32"):
        c = config.with_changes(precision=spec)
        ef.fit(c.with_changes(epochs=1), splits)  # compiled once, not timed
        r = ef.fit(c, splits)
        lines.append(
            f"| {spec} | {c.policy.products} | {r.examples_per_sec:,.0f} | {r.test.accuracy:.4f} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="the CPU, tiny sizes")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/device"))
    parser.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    table = args.out / "device_check.md"
    dry = args.dry_run
    facts = machine_facts()
    data = ef.load_fashion_mnist()
    splits = ef.split_data(data)
    train, test = splits.train, splits.test
    assert test is not None
    if dry:
        train, test = train.take(jnp.arange(4096)), test.take(jnp.arange(1024))
        splits = ef.Splits(train, test)
    t0 = time.perf_counter()

    def write(title: str, lines: list[str]) -> None:  # each table as soon as it is measured
        with table.open("a") as f:
            f.write("\n".join([f"## {title}", "", *lines, ""]) + "\n")
        print("\n".join([f"## {title}", "", *lines]), flush=True)
        print(f"({time.perf_counter() - t0:.0f} s so far)", flush=True)

    table.write_text(
        f"Machine: {facts['cpu']}, {facts['cores']} cores; {facts['backend']} backend, "
        f"{facts['devices']}; jax {facts['jax']}.\n\n"
    )
    if "throughput" in args.sections:
        if dry:  # the whole table at smoke size is `benchmarks/throughput.py --quick`
            config = ef.TrainConfig(batch_size=512, shift=0, mirror=False)
            rows = precision_rows(train, config, repeats=1)
            write(
                "Throughput (dry run: the precision rows only)",
                [
                    "| fused path, precision | examples/sec |",
                    "|---|---|",
                    *(f"| {t.name} | {t.examples_per_sec:,.0f} |" for t in rows),
                ],
            )
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
            write("Throughput", [report.to_markdown()])
    if "members" in args.sections:
        ks = [1, 2] if dry else [1, 8, 32, 128]
        lines = members_table(train, ks, steps=4 if dry else 117, repeats=1 if dry else 3)
        if not dry:
            lines += ["", many_members_run(splits, 128, ef.TrainConfig())]
        write("Many models in one program (the default recipe)", lines)
    if "precision" in args.sections:
        config = ef.TrainConfig(steps=40, hidden_sizes=(32,)) if dry else ef.TrainConfig()
        write("The default recipe under each policy", precision_table(splits, config))
    if "time" in args.sections:
        config = ef.TrainConfig(precision="p=f32,c=bf16,o=f32")
        if dry:
            config = config.with_changes(steps=40, hidden_sizes=(32,))
        target = 0.5 if dry else 0.90
        reached, final = time_to_accuracy(data, config, targets=(target,))
        seconds = reached[target]
        after = f"{seconds:.1f} s" if seconds is not None else "never"
        write(
            "Time to accuracy (bfloat16)",
            [
                f"{target:.2f} test accuracy after {after} (compiling and every "
                f"evaluation included); final {final:.4f}."
            ],
        )
    if "artifact" in args.sections:
        small = ef.fit(ef.TrainConfig(steps=40, hidden_sizes=(64,)), ef.Splits(train, test))
        images = np.asarray(data.test_images).reshape(len(data.test_images), -1)
        path = args.out / "model.stablehlo"
        manifest = export_model(
            small.model, small.state.policy, small.config, path, check_images=images
        )
        logits, _ = load_artifact(path)(images)
        device = jax.devices()[0]
        correct = int((logits.argmax(-1) == np.asarray(data.test_labels)).sum())
        write(
            "An exported StableHLO artifact",
            [
                f"Lowered for {', '.join(manifest['platforms'])}; run on {device.platform} "
                f"({device.device_kind}): {manifest['parity']['mismatches']} of "
                f"{manifest['parity']['images']:,} predictions differ from the library; "
                f"{correct:,} correct."
            ],
        )
    print(f"wrote {table} in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
