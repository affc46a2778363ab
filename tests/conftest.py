import os

# On a GPU, JAX takes 75% of its memory per process by default, and this suite starts
# JAX subprocesses (the CLI, workers) while it holds device arrays: allocate on demand
# instead, unless the user chose otherwise. Set before JAX starts a backend.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax  # noqa: E402
import pytest  # noqa: E402

# As Equinox's own suite runs: no silent float/int or rank promotion anywhere.
jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")


def _compile_cache() -> str:
    """The suite's folder of compiled programs: in the user cache, one per CPU kind (a
    program compiled for AVX-512 is not loaded on a machine without it), shared by the
    xdist workers and the CLI processes they start, so that a program one of them
    compiled the others load; `$EQX_FMNIST_TEST_CACHE` moves it, `off` turns it off.

    JAX writes an entry without a lock (the cache has no size limit, so nothing is
    evicted): two workers compiling the same program write the same bytes, and one that
    reads an entry still being written gets a failed read, which JAX reports with a
    warning and answers by compiling (that warning is allowed in `pyproject.toml`)."""
    import hashlib
    import platform

    setting = os.environ.get("EQX_FMNIST_TEST_CACHE", "")
    if setting.lower() == "off":
        return ""
    try:
        with open("/proc/cpuinfo") as f:
            lines = [ln for ln in f if ln.startswith(("model name", "flags"))][:2]
    except OSError:
        lines = [platform.processor()]
    kind = hashlib.sha256("".join(lines).encode()).hexdigest()[:12]
    root = setting or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "eqx_fmnist-tests"
    )
    return os.path.join(root, f"jax-compile-{kind}")


# In-process tests compile the same programs again and again (the same tiny fit in many
# tests): JAX's persistent cache turns the repeats into loads, in this run and the next.
_CACHE = _compile_cache()
if _CACHE:  # as eqx_fmnist.cache.enable_compile_cache does; the package is not imported
    os.makedirs(_CACHE, exist_ok=True)  # before the jaxtyping hook is in place
    jax.config.update("jax_compilation_cache_dir", _CACHE)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


@pytest.fixture(scope="session")
def shared_compile_cache(tmp_path_factory):
    """The folder of compiled programs every `eqx-fmnist` process the suite starts shares
    with the tests themselves: a command that compiles what an earlier one did loads it."""
    return _CACHE or tmp_path_factory.mktemp("jax-compile")


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path_factory, monkeypatch, shared_compile_cache):
    """Every test gets its own empty user cache and no $EQX_FMNIST_DATA; the CLI's
    compiled programs are shared (a test of the compile cache sets its own)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
    monkeypatch.setenv("EQX_FMNIST_COMPILE_CACHE", str(shared_compile_cache))
    monkeypatch.delenv("EQX_FMNIST_DATA", raising=False)


# The environment the suite was started in: `isolated_cache` gives each test an empty user
# cache, but the real data are looked for where the user has them.
_START_ENV = {name: os.environ.get(name) for name in ("EQX_FMNIST_DATA", "XDG_CACHE_HOME")}


def real_data_dir():
    """The folder the library's search order finds the four files in, in the user's own
    environment (`$EQX_FMNIST_DATA`, the user cache, Debian's folder), or `None`."""
    from eqx_fmnist.data.store import candidate_dirs, files_in

    with pytest.MonkeyPatch.context() as mp:
        for name, value in _START_ENV.items():
            if value is None:
                mp.delenv(name, raising=False)
            else:
                mp.setenv(name, value)
        searched = candidate_dirs()
    return next((folder for _, folder in searched if files_in(folder)), None), searched


@pytest.fixture(scope="session")
def real_data():
    """The real Fashion-MNIST as numpy, found as the library finds it, loaded once per
    session. Without it the test skips and says where it looked (in CI it fails)."""
    folder, searched = real_data_dir()
    if folder is None:
        where = "; ".join(f"{source} {path}" for source, path in searched)
        message = (
            f"no Fashion-MNIST found (looked in: {where}); run `eqx-fmnist data` to "
            "download it, or `apt-get install dataset-fashion-mnist`"
        )
        if os.environ.get("CI"):
            pytest.fail(message + "; .ci/run must install it")
        pytest.skip(message)
    import eqx_fmnist as ef  # imported here so that the jaxtyping hook runs first

    return ef.load_fashion_mnist(folder, download=False, verify=False)


@pytest.fixture(scope="session")
def real_datasets(real_data):
    """`(train, test)` ArrayDatasets of the real data."""
    import eqx_fmnist as ef

    return ef.to_datasets(real_data)


@pytest.fixture(scope="session")
def real_splits(real_datasets):
    """The real data as `fit` takes them: `Splits(train, test)`, nothing held out."""
    import eqx_fmnist as ef

    return ef.Splits(*real_datasets)


@pytest.fixture
def small():
    """A small synthetic training set: 256 examples, 8 steps of 32 per epoch."""
    from eqx_fmnist.dataset import ArrayDataset

    from helpers import synthetic_arrays

    a = synthetic_arrays(n_train=256)
    return ArrayDataset(a["train_images"], a["train_labels"])


def pytest_terminal_summary(terminalreporter):
    """Say how many tests skipped, and why, in one place at the end of every run."""
    skipped = terminalreporter.stats.get("skipped", [])
    if not skipped:
        return
    reasons: dict[str, int] = {}
    for report in skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reason = reason.removeprefix("Skipped: ")
        reasons[reason] = reasons.get(reason, 0) + 1
    terminalreporter.section(f"{len(skipped)} skipped, and why")
    for reason, count in sorted(reasons.items(), key=lambda kv: -kv[1]):
        terminalreporter.write_line(f"{count:4d}  {reason}")
