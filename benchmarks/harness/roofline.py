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
`step_traffic` bytes, so it takes at least
`max(flops / peak FLOP/s, bytes / peak bytes/s)`: the step's roofline.
"""

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal

import jax
import jax.numpy as jnp

from eqx_fmnist.data import IMAGE_SIZE

from .timing import matmul_flops_per_example


@dataclasses.dataclass(frozen=True)
class DevicePeaks:
    """What the default device did at its best: matmul FLOP/s by compute dtype
    (`"float32"` at `highest` precision, `"bfloat16"` accumulating in float32) and
    memory bytes/s, with the sizes that measured them (the side of each square matmul,
    the bytes of the pass) and the empty call's cost that was subtracted."""

    flops_per_sec: dict[str, float]
    bytes_per_sec: float
    matmul_sizes: dict[str, int]
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


def _grown(seconds_at: Callable[[int], float], size: int, limit: int, floor: float):
    """`(size, seconds)`: the first of `size`, `2 size`, `4 size`, ... (at most `limit`)
    whose call lasts `floor` seconds or more, and its seconds; `limit`'s if none does."""
    while True:
        seconds = seconds_at(size)
        if seconds >= floor or 2 * size > limit:
            return size, seconds
        size *= 2


FLOOR = {"quick": (4, 0.0), "full": (20, 0.01)}
"""How long a timed call lasts at least: so many empty calls' cost (which is subtracted:
a quarter of the time at most, or a twentieth) and so many seconds (a peak is read from
work of some size, not from a matmul that fits in a cache)."""
MAX_MATMUL, MAX_COPY_BYTES = 16_384, 2**31


def measure_peaks(*, quick: bool = False, repeats: int = 5) -> DevicePeaks:
    """Measure the default device's peak matmul FLOP/s and memory bytes/s.

    The sizes come from the device's own cost of a call: an empty call is timed first,
    and each measurement doubles its size (a square matmul from a side of 256, a pass
    from 1 MiB) until one call lasts as long as `FLOOR` says, so that the same code
    measures a 2-core CPU and a TPU, where a 512-square matmul is shorter than an empty
    call.

    **Arguments:**

    - `quick`: stop at 4 empty calls' cost (seconds in all, for a smoke run), rather
        than at 20 and 10 ms. Defaults to `False`.
    - `repeats`: single calls timed at each size; the fastest counts (a peak is the
        best the device showed). Defaults to `5`.

    **Returns:**

    A `DevicePeaks`.

    **Raises:**

    `ValueError` when even the largest size (a 16,384-square matmul, a 2 GiB pass)
    lasts under twice an empty call: no peak can be read beyond the call's own cost.
    """
    empty = jax.jit(lambda x: x + 1)
    call = _best(lambda: empty(jnp.zeros((1,), jnp.float32)), repeats)
    calls, least = FLOOR["quick" if quick else "full"]
    floor = max(calls * call, least)
    f32 = jax.jit(lambda x: jnp.matmul(x, x, precision=jax.lax.Precision.HIGHEST))
    bf16 = jax.jit(lambda x: jnp.matmul(x, x, preferred_element_type=jnp.float32))

    def matmul_at(fn, dtype):
        def seconds(n: int) -> float:
            a = jax.random.normal(jax.random.PRNGKey(0), (n, n), jnp.float32).astype(dtype)
            return _best(lambda: fn(a), repeats)

        return seconds

    def copy_at(elements: int) -> float:
        big = jnp.zeros((elements,), jnp.float32)
        return _best(lambda: empty(big), repeats)

    def beyond_the_call(seconds: float, what: str) -> float:
        if seconds < 2 * call:  # mostly the call's own cost: no peak can be read from it
            raise ValueError(
                f"{what} took {seconds * 1e6:,.0f} us, under twice an empty call's "
                f"{call * 1e6:,.0f} us, at the largest size measured: this device's calls "
                "cost more than a peak can be read beside."
            )
        return seconds - call

    flops, sizes = {}, {}
    for dtype, fn in (("float32", f32), ("bfloat16", bf16)):
        n, seconds = _grown(matmul_at(fn, jnp.dtype(dtype)), 256, MAX_MATMUL, floor)
        flops[dtype] = 2 * n**3 / beyond_the_call(seconds, f"a {n}-square {dtype} matmul")
        sizes[dtype] = n
    elements, seconds = _grown(copy_at, 2**18, MAX_COPY_BYTES // 4, floor)
    copy = 2 * 4 * elements / beyond_the_call(seconds, f"a pass over {4 * elements:,} bytes")
    device = jax.devices()[0]
    name = device.platform
    if device.device_kind.lower() != name:
        name += f" ({device.device_kind})"
    return DevicePeaks(flops, copy, sizes, 4 * elements, call, name)


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
    """The step's `Roofline` at `batch_size` on the
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
        f"The roofline on {peaks.device}: a {peaks.matmul_sizes['float32']:,}-square matmul "
        f"ran at {peaks.flops_per_sec['float32'] / 1e12:.2f} TFLOP/s in float32 (highest), a "
        f"{peaks.matmul_sizes['bfloat16']:,}-square one at "
        f"{peaks.flops_per_sec['bfloat16'] / 1e12:.2f} in bfloat16, a "
        f"{peaks.copy_bytes / 2**20:,.0f} MiB elementwise pass at "
        f"{peaks.bytes_per_sec / 1e9:,.0f} GB/s (an empty call's "
        f"{peaks.call_seconds * 1e6:,.0f} us subtracted). A batch-{bound.batch_size} step "
        f"does {bound.flops / 1e6:,.0f} MFLOP of matmuls and moves at least "
        f"{bound.bytes / 1e6:.1f} MB, so it takes at least "
        f"{bound.step_seconds * 1e6:,.1f} us ({bound.limit}-bound): "
        f"{bound.examples_per_sec:,.0f} examples/sec."
    )
