"""The measuring harness: warm-up, `block_until_ready`, interleaved repetitions, medians,
the machine a figure came from, and the matmul bound it is compared with.

Throughput is in **examples/sec**: training images per second through forward,
backward and the AdamW update. It is also shown as **projected tokens/sec**,
examples/sec x [`TOKENS_PER_EXAMPLE`][eqx_fmnist.runs.TOKENS_PER_EXAMPLE],
reading a 28 x 28 image as 16 patches of 7 x 7 pixels the way a vision transformer
would: a projection, not a measurement.
"""

import dataclasses
import importlib.metadata
import os
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from eqx_fmnist.hardware import cpu_info
from eqx_fmnist.runs import TOKENS_PER_EXAMPLE

CPU_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
"""The CPU flags that decide how fast float32 and bfloat16 matmuls can run."""


@dataclasses.dataclass(frozen=True)
class Throughput:
    """One measured variant: median examples/sec over `runs`, and its compile time."""

    name: str
    examples_per_sec: float
    runs: tuple[float, ...]
    compile_seconds: float
    batch_size: int

    @property
    def tokens_per_sec(self) -> float:
        """A projection: examples/sec x `TOKENS_PER_EXAMPLE`."""
        return self.examples_per_sec * TOKENS_PER_EXAMPLE


def measure(
    name: str,
    run: Callable[[], Any],
    *,
    examples: int,
    batch_size: int,
    repeats: int = 5,
    warmup: int = 1,
) -> Throughput:
    """Time `run()` (which must return what it computed) `repeats` times after `warmup`.

    The first warm-up call's time is reported as compile time; the clock stops only
    after `jax.block_until_ready` on the result.
    """
    return measure_interleaved(
        {name: run}, examples=examples, batch_size=batch_size, repeats=repeats, warmup=warmup
    )[0]


def measure_interleaved(
    runs: Mapping[str, Callable[[], Any]],
    *,
    examples: int | Mapping[str, int],
    batch_size: int | Mapping[str, int],
    repeats: int = 5,
    warmup: int = 1,
) -> list[Throughput]:
    """Time several variants in turns: repetition `r` of every variant runs before
    repetition `r + 1` of any, so a machine that slows down mid-way slows all of them.

    **Arguments:**

    - `runs`: name -> a function that does one repetition and returns its result.
    - `examples`: training examples one repetition processes (one number, or one per
        name).
    - `batch_size`: the batch size to report (one number, or one per name).
    - `repeats`: timed repetitions of each variant. Defaults to `5`.
    - `warmup`: untimed calls first; the first one's time is the compile time.

    **Returns:**

    One `Throughput` per variant, in order, each
    the median of its repetitions.
    """

    def per(value, name):
        return value[name] if isinstance(value, Mapping) else value

    compile_seconds = dict.fromkeys(runs, 0.0)
    for name, run in runs.items():
        for i in range(warmup):
            t = time.perf_counter()
            jax.block_until_ready(run())
            if i == 0:
                compile_seconds[name] = time.perf_counter() - t
    rates: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            t = time.perf_counter()
            jax.block_until_ready(run())
            rates[name].append(per(examples, name) / (time.perf_counter() - t))
    return [
        Throughput(
            name,
            statistics.median(rates[name]),
            tuple(rates[name]),
            compile_seconds[name],
            per(batch_size, name),
        )
        for name in runs
    ]


# --------------------------------------------------------------------------- the machine


def machine_facts() -> dict[str, Any]:
    """What a figure was measured on: CPU model, cores, the flags that matter, versions.

    **Returns:**

    A dict with `cpu`, `cores` (usable by this process), `flags` (those of
    `CPU_FLAGS` the CPU has), `backend`,
    `devices` (count and kind, e.g. `1 x NVIDIA H200`), `matmul_precision` (JAX's
    `jax_default_matmul_precision`: on a GPU, `"default"` lets float32 matmuls run in
    TF32), `torch_device` (where the PyTorch row runs, or `None` without torch), `jax`,
    `jaxlib`, `runtime` (the accelerator's runtime package, e.g. `libtpu 0.0.42.1`, or
    `""`), `python` and `XLA_FLAGS`.
    """
    cpu, flags = cpu_info() or ("", frozenset())  # not Linux: the name only
    cpu = cpu or platform.processor() or platform.machine()
    device = jax.devices()[0]
    return {
        "cpu": cpu,
        "cores": len(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else os.cpu_count(),
        "flags": [f for f in CPU_FLAGS if f in flags],
        "backend": jax.default_backend(),
        "devices": f"{jax.device_count()} x {device.device_kind}",
        # pyright does not know the config's flags as attributes; they are.
        "matmul_precision": str(
            jax.config.jax_default_matmul_precision  # pyright: ignore[reportAttributeAccessIssue]
            or "default"
        ),
        "torch_device": _torch_device(),
        "jax": jax.__version__,
        "jaxlib": importlib.metadata.version("jaxlib"),
        "runtime": _runtime(),
        "python": platform.python_version(),
        "XLA_FLAGS": os.environ.get("XLA_FLAGS", ""),
    }


def _runtime() -> str:
    """The accelerator's runtime package and version (`libtpu 0.0.42.1`, the CUDA
    plugin's), or `""` where JAX runs on the CPU."""
    for name in ("libtpu", "libtpu-nightly", "jax-cuda13-plugin", "jax-cuda12-plugin"):
        try:
            return f"{name} {importlib.metadata.version(name)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return ""


def machine_line(command: str | None = None) -> str:
    """The first line of a results file: the accelerator JAX runs on (its devices and
    runtime), if any, and the host (CPU model, cores, the flags of
    `CPU_FLAGS` it has, or that it has none of
    them), the jax version, the command that made the file (by default this
    process's: `python` and its arguments), and the commit and day it was made on
    (`provenance`).

    !!! example

        `Machine: Intel(R) Xeon(R) Processor, 2 cores (flags: avx2, fma, avx512f); jax
        0.10.2. Made by `python benchmarks/accuracy.py` at commit 1a2b3c4 (clean) on
        2026-12-07.`
    """
    facts = machine_facts()
    flags = ", ".join(facts["flags"]) or f"none of {', '.join(CPU_FLAGS)}"
    host = f"{facts['cpu'] or 'CPU model unknown'}, {facts['cores']} cores (flags: {flags})"
    if facts["backend"] != "cpu":
        runtime = f", {facts['runtime']}" if facts["runtime"] else ""
        host = f"{facts['devices']} ({facts['backend']}{runtime}) on a host of {host}"
    return f"Machine: {host}; jax {facts['jax']}. {made_by(command)}."


def made_by(command: str | None = None) -> str:
    """`Made by `command` at commit 1a2b3c4 (clean) on 2026-12-07`: the command (by
    default this process's: `python` and its arguments) and its code
    (`provenance`)."""
    command = command or shlex.join(["python", *sys.argv])
    return f"Made by `{command}` {provenance()}"


EXCLUDED = ":(top,exclude)benchmarks/results"
"""What `provenance` does not count as a change to the code: the results files."""


CODE_ENV = "EQX_FMNIST_CODE_COMMIT"
"""Names the code where the checkout cannot: `1a2b3c4 (clean)`, as `provenance` would
say it. A machine that is handed a copy of the working tree (whose git folder may lag
behind) is told it by the checkout the copy came from."""


def provenance() -> str:
    """Which code made a results file and when: `at commit 1a2b3c4 (clean) on
    2026-12-07`, `(with uncommitted changes)` where the tracked files differ from it
    (other results files, written by a script run just before, do not count), or `at an
    unknown commit` outside a git checkout. `$EQX_FMNIST_CODE_COMMIT` (`CODE_ENV`), when
    set, says the commit and its state instead of git."""
    import datetime
    import re
    import subprocess

    day = datetime.date.today().isoformat()
    told = os.environ.get(CODE_ENV)
    if told:
        if not re.fullmatch(r"[0-9a-f]{7,40} \((clean|with uncommitted changes)\)", told):
            raise ValueError(
                f"${CODE_ENV}={told!r}: write it as `1a2b3c4 (clean)` or "
                "`1a2b3c4 (with uncommitted changes)`, or unset it to ask git."
            )
        return f"at commit {told} on {day}"

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], capture_output=True, text=True, timeout=30)
        except OSError:
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "--short", "HEAD")
    if commit is None:
        return f"at an unknown commit on {day}"
    changed = git("status", "--porcelain", "--untracked-files=no", "--", ":/", EXCLUDED)
    state = "clean" if not changed else "with uncommitted changes"
    return f"at commit {commit} ({state}) on {day}"


def _torch_device() -> str | None:
    try:
        import torch  # pyright: ignore[reportMissingImports]
    except ImportError:
        return None
    return f"cuda ({torch.cuda.get_device_name()})" if torch.cuda.is_available() else "cpu"


# --------------------------------------------------------------------------- the bound


def matmul_shapes(
    batch_size: int, in_size: int = 784, hidden: Sequence[int] = (256, 128), out_size: int = 10
) -> list[tuple[int, int, int]]:
    """The `(m, k, n)` of every matmul in one training step of the MLP.

    Forward: `(batch, in) @ (in, out)` for every layer. Backward: the weight gradient
    `(out, batch) @ (batch, in)` of every layer, and the input gradient
    `(batch, out) @ (out, in)` of every layer but the first (nobody needs the gradient
    of the pixels).
    """
    sizes = (in_size, *hidden, out_size)
    pairs = list(zip(sizes[:-1], sizes[1:], strict=True))
    forward = [(batch_size, a, b) for a, b in pairs]
    weight_grads = [(b, batch_size, a) for a, b in pairs]
    input_grads = [(batch_size, b, a) for a, b in pairs[1:]]
    return forward + weight_grads + input_grads


def matmul_flops_per_example(in_size: int = 784, hidden=(256, 128), out_size: int = 10) -> int:
    """Exact matmul FLOPs of one training example (multiply-add = 2 FLOPs): the FLOPs of
    `matmul_shapes` per example.

    1,007,104 for the reference 784-256-128-10 MLP.
    """
    shapes = matmul_shapes(1, in_size, hidden, out_size)
    return sum(2 * m * k * n for m, k, n in shapes)


def _best_seconds(fn: Callable[[], Any], *, min_seconds: float = 0.2, repeats: int = 9):
    """The fastest of `repeats` timings of `fn` (each averaged over enough calls): for a
    bound, the best the machine showed, so that a slow moment does not lower it."""
    fn()  # warm-up
    number, t = 1, 0.0
    while True:  # calls per sample, so that one sample lasts about min_seconds / repeats
        t = time.perf_counter()
        for _ in range(number):
            fn()
        t = time.perf_counter() - t
        if t * repeats >= min_seconds or number >= 1 << 16:
            break
        number *= 2
    samples = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - t) / number)
    return min(samples)


def time_matmul(m: int, k: int, n: int, backend: str, *, min_seconds: float = 0.2) -> float:
    """Best seconds of one float32 `(m, k) @ (k, n)` with `backend` (`"numpy"`,
    `"torch"` or `"jax"`: `jnp.matmul` compiled for JAX's default device, at the matmul
    precision in use), sampled for about `min_seconds`; raises `ImportError` when torch
    is missing."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    out = np.empty((m, n), np.float32)
    if backend == "jax":
        ja, jb = jax.device_put(a), jax.device_put(b)
        mm = jax.jit(jnp.matmul)
        return _best_seconds(lambda: mm(ja, jb).block_until_ready(), min_seconds=min_seconds)
    if backend == "numpy":
        return _best_seconds(lambda: np.matmul(a, b, out=out), min_seconds=min_seconds)
    if backend == "torch":
        import torch  # pyright: ignore[reportMissingImports]

        ta, tb, tout = torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(out)
        return _best_seconds(lambda: torch.mm(ta, tb, out=tout), min_seconds=min_seconds)
    raise ValueError(f"`backend` must be 'numpy', 'torch' or 'jax', but got {backend!r}.")


@dataclasses.dataclass(frozen=True)
class MatmulBound:
    """The step's matmuls, each timed on its own at the faster of the backends.

    `examples_per_sec` is what a training step made of nothing but these matmuls,
    back to back, would reach: the bound that the measured paths are a percentage of.
    """

    batch_size: int
    shapes: tuple[tuple[int, int, int], ...]
    seconds: tuple[float, ...]
    backends: tuple[str, ...]

    @property
    def step_seconds(self) -> float:
        return sum(self.seconds)

    @property
    def examples_per_sec(self) -> float:
        return self.batch_size / self.step_seconds


def matmul_bound(
    batch_size: int,
    hidden: Sequence[int] = (256, 128),
    backends: Sequence[str] | None = None,
    *,
    min_seconds: float = 0.2,
) -> MatmulBound:
    """Time every matmul of a training step with each backend and keep the faster.

    **Arguments:**

    - `batch_size`: the step's batch.
    - `hidden`: the MLP's hidden sizes. Defaults to `(256, 128)`.
    - `backends`: `"numpy"`, `"torch"` and/or `"jax"`; a backend that is not installed
        is left out. Defaults to numpy and torch on a CPU, and to `"jax"` on any other
        backend: the bound is then the device's own matmuls at the precision in use, not
        the host's.
    - `min_seconds`: how long each matmul is sampled. Defaults to `0.2`.

    **Returns:**

    A `MatmulBound`.
    """
    if backends is None:
        backends = ("numpy", "torch") if jax.default_backend() == "cpu" else ("jax",)
    shapes = matmul_shapes(batch_size, hidden=tuple(hidden))
    seconds, winners = [], []
    for shape in shapes:
        timed = {}
        for backend in backends:
            try:
                timed[backend] = time_matmul(*shape, backend, min_seconds=min_seconds)
            except ImportError:
                continue
        if not timed:
            raise ValueError(f"none of the backends {list(backends)} is installed.")
        best = min(timed, key=timed.__getitem__)
        seconds.append(timed[best])
        winners.append(best)
    return MatmulBound(batch_size, tuple(shapes), tuple(seconds), tuple(winners))
