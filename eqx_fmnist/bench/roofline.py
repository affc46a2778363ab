"""The device's own peaks and the training step's roofline: the bound the measured paths
are a percentage of on an accelerator.

Timing the step's small matmuls one dispatch at a time measures the dispatch, not the
device: on a TPU the library's fused path ran at up to 100x such a "bound". A roofline
asks two things of the device instead, each in one call large enough that dispatch is
noise (and the cost of an empty call is subtracted):

- its peak **FLOP/s**: one large square matmul, in float32 at `highest` precision (what
  a float32 policy asks for) and in bfloat16 with float32 accumulation;
- its peak **bytes/s**: one large elementwise pass, reading and writing every byte once.

A training step must do its matmul FLOPs and move at least its
[`step_traffic`][eqx_fmnist.bench.roofline.step_traffic] bytes, so it takes at least
`max(flops / peak FLOP/s, bytes / peak bytes/s)`: the step's roofline.
"""

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal

import jax
import jax.numpy as jnp

from ..data import IMAGE_SIZE
from .timing import matmul_flops_per_example


@dataclasses.dataclass(frozen=True)
class DevicePeaks:
    """What the default device did at its best: matmul FLOP/s by compute dtype
    (`"float32"` at `highest` precision, `"bfloat16"` accumulating in float32) and
    memory bytes/s, with the sizes that measured them and the empty call's cost that was
    subtracted."""

    flops_per_sec: dict[str, float]
    bytes_per_sec: float
    matmul_size: int
    copy_bytes: int
    call_seconds: float
    device: str


def _best(fn: Callable[[], Any], repeats: int) -> float:
    """The fastest of `repeats` single calls of `fn` (after one warm-up call)."""
    jax.block_until_ready(fn())
    samples = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(fn())
        samples.append(time.perf_counter() - t)
    return min(samples)


def measure_peaks(
    *, matmul_size: int | None = None, copy_mib: int | None = None, repeats: int = 5
) -> DevicePeaks:
    """Measure the default device's peak matmul FLOP/s and memory bytes/s.

    **Arguments:**

    - `matmul_size`: the side of the square matmul. Defaults to 1,024 on a CPU and
        8,192 elsewhere (about 1.1 TFLOP: milliseconds on an accelerator).
    - `copy_mib`: the size of the array read and written by the copy, in MiB. Defaults
        to 64 on a CPU and 1,024 elsewhere.
    - `repeats`: single calls timed; the fastest counts (a peak is the best the device
        showed). Defaults to `5`.

    **Returns:**

    A [`DevicePeaks`][eqx_fmnist.bench.roofline.DevicePeaks].
    """
    cpu = jax.default_backend() == "cpu"
    n = matmul_size or (1024 if cpu else 8192)
    elements = (copy_mib or (64 if cpu else 1024)) * 2**20 // 4
    empty = jax.jit(lambda x: x + 1)
    one = jnp.zeros((1,), jnp.float32)
    call = _best(lambda: empty(one), repeats)
    a = jax.random.normal(jax.random.PRNGKey(0), (n, n), jnp.float32)
    f32 = jax.jit(lambda x: jnp.matmul(x, x, precision=jax.lax.Precision.HIGHEST))
    a16 = a.astype(jnp.bfloat16)
    bf16 = jax.jit(lambda x: jnp.matmul(x, x, preferred_element_type=jnp.float32))
    big = jnp.zeros((elements,), jnp.float32)
    flops = 2 * n**3

    def beyond_the_call(seconds: float, what: str) -> float:
        if seconds < 2 * call:  # mostly the call's own cost: no peak can be read from it
            raise ValueError(
                f"{what} took {seconds * 1e6:,.0f} us, under twice an empty call's "
                f"{call * 1e6:,.0f} us: give a larger size (`matmul_size`, `copy_mib`)."
            )
        return seconds - call

    peaks = {
        "float32": flops / beyond_the_call(_best(lambda: f32(a), repeats), f"a {n}-square matmul"),
        "bfloat16": flops
        / beyond_the_call(_best(lambda: bf16(a16), repeats), f"a {n}-square bf16 matmul"),
    }
    copy_time = _best(lambda: empty(big), repeats)
    copy = 2 * 4 * elements / beyond_the_call(copy_time, f"a pass over {4 * elements:,} bytes")
    device = jax.devices()[0]
    name = device.platform
    if device.device_kind.lower() != name:
        name += f" ({device.device_kind})"
    return DevicePeaks(peaks, copy, n, 4 * elements, call, name)


def step_traffic(
    batch_size: int,
    hidden: Sequence[int] = (256, 128),
    out_size: int = 10,
    *,
    activation_bytes: int = 4,
) -> int:
    """The fewest bytes one AdamW training step of the MLP moves to and from device
    memory, however well it is fused: the batch's uint8 pixels read once; the float32
    parameters read for the forward pass and the update and written by it; the two
    moments read and written; every layer's activations written on the forward pass
    and read on the backward pass. 8.6 MB for a batch of 512 of the 784-256-128-10
    MLP."""
    sizes = (IMAGE_SIZE, *hidden, out_size)
    params = sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:], strict=True))
    activations = batch_size * sum(sizes[1:])
    return batch_size * IMAGE_SIZE + 7 * 4 * params + 2 * activation_bytes * activations


@dataclasses.dataclass(frozen=True)
class Roofline:
    """A training step's roofline at `batch_size`: its matmul FLOPs and fewest bytes
    against the device's peaks for `dtype`."""

    batch_size: int
    flops: int
    bytes: int
    flops_per_sec: float
    bytes_per_sec: float
    dtype: str

    @property
    def step_seconds(self) -> float:
        return max(self.flops / self.flops_per_sec, self.bytes / self.bytes_per_sec)

    @property
    def examples_per_sec(self) -> float:
        return self.batch_size / self.step_seconds

    @property
    def limit(self) -> Literal["compute", "memory"]:
        """Which peak bounds the step."""
        compute = self.flops / self.flops_per_sec
        return "compute" if compute >= self.bytes / self.bytes_per_sec else "memory"

    @property
    def backends(self) -> tuple[str, ...]:
        """What the bound came from, as the report names it."""
        return (f"roofline ({self.limit}, {self.dtype})",)


def step_roofline(
    batch_size: int,
    peaks: DevicePeaks,
    hidden: Sequence[int] = (256, 128),
    dtype: str = "float32",
) -> Roofline:
    """The step's [`Roofline`][eqx_fmnist.bench.roofline.Roofline] at `batch_size` on the
    device that measured `peaks`, for compute dtype `dtype` (`"float32"` or
    `"bfloat16"`)."""
    if dtype not in peaks.flops_per_sec:
        raise ValueError(f"`dtype` must be one of {sorted(peaks.flops_per_sec)}, got {dtype!r}.")
    flops = batch_size * matmul_flops_per_example(hidden=tuple(hidden))
    return Roofline(
        batch_size,
        flops,
        step_traffic(batch_size, hidden),
        peaks.flops_per_sec[dtype],
        peaks.bytes_per_sec,
        dtype,
    )


def peaks_line(peaks: DevicePeaks, bound: Roofline) -> str:
    """One sentence: the peaks measured and the batch's roofline."""
    return (
        f"The roofline on {peaks.device}: a {peaks.matmul_size:,}-square matmul ran at "
        f"{peaks.flops_per_sec['float32'] / 1e12:.2f} TFLOP/s in float32 (highest) and "
        f"{peaks.flops_per_sec['bfloat16'] / 1e12:.2f} in bfloat16, a "
        f"{peaks.copy_bytes / 2**20:,.0f} MiB elementwise pass at "
        f"{peaks.bytes_per_sec / 1e9:,.0f} GB/s (an empty call's "
        f"{peaks.call_seconds * 1e6:,.0f} us subtracted). A batch-{bound.batch_size} step "
        f"does {bound.flops / 1e6:,.0f} MFLOP of matmuls and moves at least "
        f"{bound.bytes / 1e6:.1f} MB, so it takes at least "
        f"{bound.step_seconds * 1e6:,.1f} us ({bound.limit}-bound): "
        f"{bound.examples_per_sec:,.0f} examples/sec."
    )
