"""What this machine's CPU is and can do, read once from `/proc/cpuinfo`: its model and
flags, which every benchmark's first line names, and whether it multiplies bfloat16,
which decides whether a bfloat16 policy pays here
([`warn_if_slower`][eqx_fmnist.hardware.warn_if_slower]).
"""

import functools
import importlib.metadata
import importlib.util
import os
import sys
import types
import warnings
from pathlib import Path

import equinox as eqx
import jax

BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
"""The x86 CPU flags of instructions that multiply bfloat16: with neither, XLA computes
a bfloat16 matmul in float32, and the casts around it only add work."""


@functools.cache
def cpu_info(path: str | os.PathLike = "/proc/cpuinfo") -> tuple[str, frozenset[str]] | None:
    """`(model name, flags)` of the first CPU that `path` lists, or `None` where there is
    no such file (not Linux). ARM's `Features` count as flags."""
    model = ""
    flags = None
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and not model:
            model = value.strip()
        elif key in ("flags", "Features") and flags is None:
            flags = frozenset(value.split())
    return model, flags or frozenset()


def cpu_flags() -> frozenset[str] | None:
    """This machine's CPU flags, or `None` where it cannot say."""
    info = cpu_info()
    return None if info is None else info[1]


class SlowPrecisionWarning(UserWarning):
    """A bfloat16 or float16 policy on a CPU without matmuls in that dtype, where it
    trains slower than float32 (see [`warn_if_slower`][eqx_fmnist.hardware.warn_if_slower])."""


_warned: set[str] = set()


_LIBRARIES = ("eqx_fmnist", "jax", "jaxlib", "equinox", "jaxtyping", "beartype")


def callers_level(frame: types.FrameType | None) -> int:
    """The `stacklevel`, for a warning raised in `frame` (`sys._getframe(0)` of the
    function that warns), of the caller's own line: the first frame outside this library
    and the libraries it calls through (JAX, Equinox, the type checkers), so that the
    warning points at the line that asked for what it warns of."""
    level = 1
    while frame is not None and _inside_libraries(frame.f_code.co_filename):
        frame = frame.f_back
        level += 1
    return level


def _inside_libraries(filename: str) -> bool:
    """Whether code at `filename` is this library's or one it calls through (or code a
    decorator generated, as beartype's wrappers are)."""
    return filename.startswith("<@beartype") or filename.startswith(_library_dirs())


@functools.cache
def _library_dirs() -> tuple[str, ...]:
    found = []
    for name in _LIBRARIES:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            found += [os.path.join(d, "") for d in spec.submodule_search_locations]
    return tuple(found)


def warn_if_slower(policy) -> bool:
    """Warn, once per process and dtype, when a
    [`Policy`][eqx_fmnist.precision.Policy] multiplies in bfloat16 or float16 on a CPU
    that has no instructions for it (neither of `BF16_CPU_FLAGS` for bfloat16; float16
    on any CPU): XLA then computes each matmul in float32, and the casts make training
    slower than a float32 policy, not faster. Returns whether it warned.

    Nothing is said on a GPU or TPU, or where the CPU's flags cannot be read."""
    if not policy.lowers_matmuls or jax.default_backend() != "cpu":
        return False
    name = policy.compute_dtype.name
    flags = cpu_flags()
    if flags is None or name in _warned or (name == "bfloat16" and flags & set(BF16_CPU_FLAGS)):
        return False
    _warned.add(name)
    has = "none of " + ", ".join(BF16_CPU_FLAGS) if name == "bfloat16" else "no float16 matmuls"
    warnings.warn(
        f"the policy {policy} multiplies in {name}, but this CPU has {has}: XLA computes "
        "those matmuls in float32 here, so training runs slower than with "
        f"p=f32,c=f32,o=f32. Use float32 on this machine, or a CPU or GPU with {name} "
        "matmuls.",
        SlowPrecisionWarning,
        stacklevel=callers_level(sys._getframe(0)),
    )
    return True


def library_versions() -> dict[str, str]:
    """The library's, JAX's and Equinox's versions, as a checkpoint records them."""
    try:
        library = importlib.metadata.version("eqx_fmnist")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - source checkout
        library = "unknown"
    return {"eqx_fmnist": library, "jax": jax.__version__, "equinox": eqx.__version__}
