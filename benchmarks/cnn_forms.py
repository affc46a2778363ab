"""What the CNN teacher's convolutions cost in each form of `conv_stride2`: the matmul
of 3 x 3 patches (a CPU's), XLA's convolution both ways, and XLA's convolution forward
with the patches' gradient (an accelerator's), each the two layers
of `TrainConfig.teacher()`'s CNN (28 x 28 x 1 -> 14 x 14 x 32 -> 7 x 7 x 64) forward,
and forward and backward, on a batch of images, many times in one compiled `lax.scan`,
in interleaved repetitions in one process, float32 at the policy's precision.

    python benchmarks/cnn_forms.py [--batch 512] [--steps 50] [--repeats 7]
        [--forms patches native native_forward] [--out benchmarks/results/cnn_forms.md]

On a TPU v5e, `native`'s forward-and-backward program compiled for longer than the
100 s it was given: `--forms patches native_forward` leaves it out.
"""

import argparse
from pathlib import Path
from typing import get_args

import jax
import jax.numpy as jnp
import jax.random as jr

import eqx_fmnist as ef
from eqx_fmnist.model import ConvForm, conv_stride2

from harness import machine_line, measure_interleaved, write_results


def maps(kernels, x, form):
    """The CNN's two convolutions with GELU between, in one form; their sum (a scalar to
    differentiate)."""
    y = x
    for k in kernels:
        y = jax.nn.gelu(conv_stride2(y, k, form=form))
    return jnp.sum(y)


def runner(kernels, x, form, steps: int, backward: bool):
    """`steps` forward (or forward and backward) passes in one compiled scan; each pass
    reads the last one's result, so none is skipped."""
    one = jax.grad(maps) if backward else maps

    @jax.jit
    def many(kernels, x):
        def body(carry, _):
            out = one(kernels, x + carry * 1e-30, form)
            total = sum(jnp.sum(g) for g in out) if backward else out
            return total.astype(jnp.float32), None

        return jax.lax.scan(body, jnp.float32(0), length=steps)[0]

    return lambda: jax.block_until_ready(many(kernels, x))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--steps", type=int, default=50, help="passes per timed call")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument(
        "--forms", nargs="+", default=["native", "native_forward"], choices=get_args(ConvForm)
    )
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/cnn_forms.md"))
    args = parser.parse_args()
    cnn = ef.init_state(ef.TrainConfig.teacher(), 1000).model
    kernels = list(cnn.kernels)
    x = jr.uniform(jr.key(0), (args.batch, 28, 28, 1))
    runs = {
        f"{form}, {'forward and backward' if backward else 'forward'}": runner(
            kernels, x, form, args.steps, backward
        )
        for backward in (False, True)
        for form in ("patches", *(f for f in args.forms if f != "patches"))
    }
    results = measure_interleaved(
        runs, examples=args.steps * args.batch, batch_size=args.batch, repeats=args.repeats
    )
    speed = {r.name: r.examples_per_sec for r in results}
    lines = [
        machine_line(),
        "",
        f"The two convolutions of the CNN of `TrainConfig.teacher()` (channels "
        f"{list(cnn.channels)}), batch {args.batch}, {args.steps} passes per call, median of "
        f"{args.repeats} interleaved repetitions, float32 at `HIGHEST`. `conv_stride2` "
        "chooses patches on a CPU and `native_forward` elsewhere.",
        "",
        "| form, pass | images/sec (median) | µs per batch | vs patches | compile s |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        us = 1e6 * args.batch / r.examples_per_sec
        base = speed["patches, " + r.name.split(", ", 1)[1]]
        lines.append(
            f"| {r.name} | {r.examples_per_sec:,.0f} | {us:,.0f} "
            f"| {r.examples_per_sec / base:.2f}x | {r.compile_seconds:.2f} |"
        )
    text = "\n".join(lines) + "\n"
    write_results(args.out, text)


if __name__ == "__main__":
    main()
