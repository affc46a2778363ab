"""Examples/sec of `fit` at two logging cadences and of `eqx-fmnist train` at the
faster cadence, all timed the same way in one process: wall-clock from the end of the
first logging interval to the end of the last, so every per-interval cost (history
lines, checkpoints, the progress bar) counts and compiling does not.

    python benchmarks/cli_overhead.py [--repeats 3] [--steps 1170]
"""

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import eqx_fmnist as ef
import eqx_fmnist.cli as cli
from eqx_fmnist.bench import machine_facts


class Clock:
    """A callback that notes when each interval ends, and the rate between the first and
    the last."""

    def __init__(self):
        self.ends: list[tuple[float, int]] = []

    def __call__(self, record, state):
        self.ends.append((time.perf_counter(), record["step"]))

    def examples_per_sec(self, batch_size: int) -> float:
        (t0, s0), (t1, s1) = self.ends[0], self.ends[-1]
        return (s1 - s0) * batch_size / (t1 - t0)


def run_fit(config, data) -> float:
    clock = Clock()
    ef.fit(config, data, callback=clock)
    return clock.examples_per_sec(config.batch_size)


def run_cli(args: list[str], folder: Path, batch_size: int) -> float:
    clock, real_fit = Clock(), cli.fit

    def timed_fit(*a, callback=(), **kw):  # the CLI's own callbacks, then the clock
        return real_fit(*a, callback=[*callback, clock], **kw)

    cli.fit = timed_fit
    try:
        assert cli.main(["train", *args, "--out", str(folder)]) == 0
    finally:
        cli.fit = real_fit
    return clock.examples_per_sec(batch_size)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=1170)
    args = parser.parse_args()
    facts = machine_facts()
    print(
        f"Machine: {facts['cpu']}, {facts['cores']} cores ({', '.join(facts['flags'])}); jax {facts['jax']}.\n"
    )
    fm = ef.load_fashion_mnist()
    data = ef.to_datasets(fm)
    every25 = ef.TrainConfig.codelab(steps=args.steps, log_every=25)
    per_epoch = every25.with_changes(log_every=None)
    flags = ["--codelab", "--steps", str(args.steps), "--log-every", "25"]
    rates: dict[str, list[float]] = {
        "fit, log every 25": [],
        "fit, log every epoch": [],
        "eqx-fmnist train --log-every 25": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            rates["fit, log every 25"].append(run_fit(every25, data))
            rates["fit, log every epoch"].append(run_fit(per_epoch, data))
            rates["eqx-fmnist train --log-every 25"].append(
                run_cli(flags, Path(tmp) / f"run{r}", 512)
            )
    base = statistics.median(rates["fit, log every 25"])
    print(
        f"codelab settings, {args.steps} steps of batch 512; median of {args.repeats}, interleaved\n"
    )
    print("| run | examples/sec | x fit at 25 |")
    print("|---|---|---|")
    for name, values in rates.items():
        print(
            f"| {name} | {statistics.median(values):,.0f} | {statistics.median(values) / base:.2f} |"
        )


if __name__ == "__main__":
    main()
