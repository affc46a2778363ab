"""What the checks at the library's doors cost: a fused epoch (`ef.train_epoch`, its
arguments checked at each call) against the same call unchecked (`train_epoch.__wrapped__`),
and per-step `ef.train_step` (its arguments checked as the step is traced) against the
same compiled step without the check, each pair in interleaved repetitions in one
process on the codelab's model and batch; and the import's cost of the checks
(beartype, and wrapping the doors) in fresh processes.

    python benchmarks/doors.py [--repeats 7] [--steps 200] [--train 12000]
        [--out benchmarks/results/doors.md]
"""

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp

import eqx_fmnist as ef
from eqx_fmnist import step as step_module

from harness import machine_line, write_results

IMPORT_CHECKS = """
import time, jaxtyping, equinox, jax
from jaxtyping import Array, Float
t = time.perf_counter()
from beartype import beartype  # what checks.door adds to the import: beartype, and
for i in range(20):  # jaxtyping's wrapper of each door (20: more than the doors)
    def f(x: Float[Array, "n"]) -> Float[Array, "n"]:
        return x
    jaxtyping.jaxtyped(typechecker=beartype)(f)
print(time.perf_counter() - t)
"""


def unchecked_step():
    """`train_step`'s compiled step without the door: the same body, traced alone."""

    def body(batch, state, loss=None):
        x, y = batch
        return step_module._step(state, step_module._augmented(state, x), y, loss=loss)

    jitted = eqx.filter_jit(body, donate="all-except-first")
    return lambda state, x, y: jitted((x, y), state, None)


def per_step(call, state, batches):
    """Examples/sec of a Python loop of `call` over `batches` (the state's buffers
    donated, the last one waited for)."""
    t = time.perf_counter()
    for x, y in batches:
        state, metrics = call(state, x, y)
    jax.block_until_ready(metrics)
    return len(batches) * len(batches[0][1]) / (time.perf_counter() - t), state


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--steps", type=int, default=200, help="per-step calls timed")
    parser.add_argument("--train", type=int, default=12_000, help="training images used")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/doors.md"))
    args = parser.parse_args()
    data = ef.load_fashion_mnist()
    train = ef.ArrayDataset(data.train_images[: args.train], data.train_labels[: args.train])
    config = ef.TrainConfig.codelab()
    batch = config.batch_size
    x = jnp.asarray(train.images[:batch], jnp.float32) / 255.0
    y = jnp.asarray(train.labels[:batch], jnp.int32)
    batches = [(x, y)] * args.steps
    epochs = {"checked": ef.train_epoch, "unchecked": ef.train_epoch.__wrapped__}
    steps = {"checked": ef.train_step, "unchecked": unchecked_step()}
    states = {k: ef.init_state(config, len(train)) for k in ("epoch", "step")}
    rates: dict[str, list[float]] = {}
    for repeat in range(args.repeats + 1):  # the first: compiles, not counted
        for name in ("checked", "unchecked"):
            t = time.perf_counter()
            states["epoch"], metrics = epochs[name](states["epoch"], train, batch_size=batch)
            jax.block_until_ready(metrics)
            rate = len(train) // batch * batch / (time.perf_counter() - t)
            step_rate, states["step"] = per_step(steps[name], states["step"], batches)
            if repeat:
                rates.setdefault(f"epoch {name}", []).append(rate)
                rates.setdefault(f"step {name}", []).append(step_rate)
    median = {k: statistics.median(v) for k, v in rates.items()}
    imports = [
        float(
            subprocess.run(
                [sys.executable, "-c", IMPORT_CHECKS], capture_output=True, text=True, check=True
            ).stdout
        )
        for _ in range(5)
    ]
    lines = [
        machine_line(),
        "",
        f"The codelab's model and batch ({batch}), {len(train):,} training images; medians of "
        f"{args.repeats} interleaved repetitions after one that compiles.",
        "",
        "| call | checked (examples/sec) | unchecked | checked / unchecked |",
        "|---|---|---|---|",
    ]
    for kind, what in (
        ("epoch", "`ef.train_epoch` (one fused epoch)"),
        ("step", f"`ef.train_step`, {args.steps} calls"),
    ):
        c, u = median[f"{kind} checked"], median[f"{kind} unchecked"]
        lines.append(f"| {what} | {c:,.0f} | {u:,.0f} | {c / u:.3f}x |")
    lines += [
        "",
        f"Importing beartype and wrapping 20 doors: {statistics.median(imports) * 1000:.0f} ms "
        "(median of 5 fresh processes, after jaxtyping and Equinox).",
    ]
    write_results(args.out, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
