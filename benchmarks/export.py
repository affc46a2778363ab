"""Export the recipe's model and a 5-seed ensemble in every format; report the parity on
all 10,000 test images, the file sizes and the time to export (check included).

    python benchmarks/export.py [--epochs 30] [--seeds 5] [--out benchmarks/results/export.md]
"""

import argparse
import tempfile
import time
from pathlib import Path

import eqx_fmnist as ef
from eqx_fmnist.bench import machine_facts
from eqx_fmnist.export import SUFFIXES, export_model, load_artifact


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/export.md"))
    args = parser.parse_args()
    facts = machine_facts()
    data = ef.load_fashion_mnist()
    images = data.test_images.reshape(len(data.test_images), -1)
    config = ef.TrainConfig(epochs=args.epochs)
    single = ef.fit(config, data)
    ensemble = ef.fit_ensemble(config, args.seeds, data)
    models = [
        ("one model", single.model, single.state.policy, single.test.accuracy),
        (f"ensemble of {args.seeds}", ensemble.state.model, ensemble.state.policy,
         ensemble.test.accuracy),
    ]  # fmt: skip
    lines = [
        f"Machine: {facts['cpu']}, {facts['cores']} cores ({', '.join(facts['flags'])}); "
        f"jax {facts['jax']}.",
        "",
        f"Produced by `python benchmarks/export.py`: the recipe ({args.epochs} epochs), "
        "checked on all 10,000 test images before writing.",
        "",
        "| model | format | bytes | export s (check included) | mismatched predictions "
        "| largest logit difference | artifact load + run on 10,000 s |",
        "|---|---|---|---|---|---|---|",
    ]
    folder = Path(tempfile.mkdtemp())
    for name, model, policy, accuracy in models:
        for fmt in SUFFIXES:
            path = folder / f"{name.replace(' ', '_')}{SUFFIXES[fmt]}"
            m = export_model(model, policy, config, path, check_images=images, format=fmt,
                             extra={"test_accuracy": accuracy})  # fmt: skip
            run = ""
            if fmt == "stablehlo":
                t = time.perf_counter()
                load_artifact(path)(images)
                run = f"{time.perf_counter() - t:.2f}"
            p = m["parity"]
            lines.append(
                f"| {name} (test accuracy {accuracy:.4f}) | {fmt} | {m['bytes']:,} "
                f"| {m['export_seconds']:.2f} | {p['mismatches']} of {p['images']:,} "
                f"| {p['max_logit_difference']:.1e} | {run} |"
            )
            print(lines[-1], flush=True)
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
