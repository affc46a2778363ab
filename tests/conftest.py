import os

# On a GPU, JAX takes 75% of its memory per process by default, and this suite starts
# JAX subprocesses (the CLI, workers) while it holds device arrays: allocate on demand
# instead, unless the user chose otherwise. Set before JAX starts a backend.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax  # noqa: E402
import pytest  # noqa: E402

from helpers import DEBIAN_DIR  # noqa: E402

# As Equinox's own suite runs: no silent float/int or rank promotion anywhere.
jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.fixture(scope="session")
def shared_compile_cache(tmp_path_factory):
    """One folder of compiled programs for every `eqx-fmnist` process this session (each
    xdist worker has its own): a command that compiles what an earlier one did loads it."""
    return tmp_path_factory.mktemp("jax-compile")


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path_factory, monkeypatch, shared_compile_cache):
    """Every test gets its own empty user cache and no $EQX_FMNIST_DATA; the CLI's
    compiled programs are shared (a test of the compile cache sets its own)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
    monkeypatch.setenv("EQX_FMNIST_COMPILE_CACHE", str(shared_compile_cache))
    monkeypatch.delenv("EQX_FMNIST_DATA", raising=False)


def _require_real_data():
    if not all((DEBIAN_DIR / f).is_file() for f in _REAL_FILES):
        message = f"the Debian package dataset-fashion-mnist is not installed ({DEBIAN_DIR})"
        if os.environ.get("CI"):
            pytest.fail(message + "; .ci/run must install it")
        pytest.skip(message)


_REAL_FILES = (
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
)


@pytest.fixture(scope="session")
def real_data():
    """The real Fashion-MNIST as numpy (Debian package), loaded once per session."""
    _require_real_data()
    import eqx_fmnist as ef  # imported here so that the jaxtyping hook runs first

    return ef.load_fashion_mnist(DEBIAN_DIR, download=False, verify=False)


@pytest.fixture(scope="session")
def real_datasets(real_data):
    """`(train, test)` ArrayDatasets of the real data."""
    import eqx_fmnist as ef

    return ef.to_datasets(real_data)


@pytest.fixture
def small():
    """A small synthetic training set: 256 examples, 8 steps of 32 per epoch."""
    from eqx_fmnist.dataset import ArrayDataset

    from helpers import synthetic_arrays

    a = synthetic_arrays(n_train=256)
    return ArrayDataset(a["train_images"], a["train_labels"])
