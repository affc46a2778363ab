"""JAX's persistent compilation cache in the user cache folder.

The command line turns it on (`eqx-fmnist --no-compile-cache` or
`EQX_FMNIST_COMPILE_CACHE=off` turn it off), so that a second run of the same programs
loads them instead of compiling; a script can do the same:

```python
import eqx_fmnist as ef

ef.enable_compile_cache(ef.compile_cache_dir())
```
"""

import os
import warnings
from pathlib import Path

import jax

from .data import cache_dir

COMPILE_CACHE_ENV = "EQX_FMNIST_COMPILE_CACHE"
"""Names the compilation cache's folder, or `off`."""


def compile_cache_dir() -> Path | None:
    """Where compiled programs are kept: `$EQX_FMNIST_COMPILE_CACHE` if set (`off`
    turns the cache off), else `$XDG_CACHE_HOME/eqx_fmnist/jax-compile`."""
    setting = os.environ.get(COMPILE_CACHE_ENV, "").strip()
    if setting.lower() in ("off", "0", "false", "no"):
        return None
    return Path(setting).expanduser() if setting else cache_dir().parent / "jax-compile"


def enable_compile_cache(folder: str | os.PathLike | None) -> None:
    """Keep every compiled XLA program in `folder` (nothing when `None`), so that the
    next process with the same programs loads them instead of compiling.

    Every program is kept, the small ones too (evaluation, initialisation): together
    they are most of a warm start's compile time. A folder that cannot be made (a file
    in its place, no permission) leaves the cache off, with one warning.
    """
    if folder is None:
        return
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # a cache is a convenience: without it, programs compile
        warnings.warn(
            f"the compilation cache {folder} cannot be used ({e.strerror or e}); compiling "
            f"without it (set ${COMPILE_CACHE_ENV} to another folder, or to off)",
            stacklevel=2,
        )
        return
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
