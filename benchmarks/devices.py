"""Examples/sec of the fused path data-parallel over 1, 2, 4, 8 simulated CPU devices.

Every measurement runs in a fresh process with
`XLA_FLAGS=--xla_force_host_platform_device_count=8`, so only the mesh size differs.
The simulated devices share this machine's cores: this measures the overhead of
sharding (partitioned matmuls, the gradient all-reduce), not a speed-up.

    python benchmarks/devices.py [--devices 1 2 4 8] [--examples 60000] [--repeats 3]
"""

import argparse
import json
import os
import subprocess
import sys


def worker(devices: int, examples: int, repeats: int) -> None:
    import jax.numpy as jnp

    import eqx_fmnist as ef
    from eqx_fmnist.bench import measure
    from eqx_fmnist.parallel import make_mesh, replicate

    train, _ = ef.to_datasets(ef.load_fashion_mnist())
    train = train.take(jnp.arange(min(examples, len(train))))
    config = ef.TrainConfig(devices=devices)
    mesh = make_mesh(devices)
    holder = {"state": replicate(ef.init_state(config, len(train)), mesh)}
    train = replicate(train, mesh)

    def run():
        holder["state"], m = ef.train_epoch(holder["state"], train, batch_size=512, mesh=mesh)
        return m["loss"]

    steps = len(train) // 512
    t = measure(f"{devices} devices", run, examples=steps * 512, batch_size=512, repeats=repeats)
    print(
        json.dumps(
            {
                "devices": devices,
                "examples_per_sec": t.examples_per_sec,
                "compile_seconds": t.compile_seconds,
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--examples", type=int, default=60_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker, args.examples, args.repeats)
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    rows = []
    for n in args.devices:
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--worker",
                str(n),
                "--examples",
                str(args.examples),
                "--repeats",
                str(args.repeats),
            ],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=900,
        )
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    base = rows[0]["examples_per_sec"]
    from eqx_fmnist.bench import machine_facts

    facts = machine_facts()
    print(f"Machine: {facts['cpu']}, {facts['cores']} cores; jax {facts['jax']}.\n")
    print("| devices (simulated, 2 shared cores) | examples/sec | x first row | compile s |")
    print("|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['devices']} | {r['examples_per_sec']:,.0f} | {r['examples_per_sec'] / base:.2f} "
            f"| {r['compile_seconds']:.1f} |"
        )


if __name__ == "__main__":
    main()
