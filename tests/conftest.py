import os

# On a GPU, JAX takes 75% of its memory per process by default, and this suite starts
# JAX subprocesses (the CLI, workers) while it holds device arrays: allocate on demand
# instead, unless the user chose otherwise. Set before JAX starts a backend.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

# Tests compile with XLA's cheap settings (`jax_disable_most_optimizations`), as Flax's
# example tests do, and so do the CLI processes they start: compiling is most of what a
# test of a few steps costs, and the cheap settings take a third to a half off it (on the
# library's own modules, compile 144 s to 80 s, the tests 126 s to 98 s on 2 cores), while
# the programs run slower, which a few steps never notice. Tests marked `optimized` (the
# long runs, the runs repeated many times, the pages' commands, and the numbers stored
# from fully optimised runs) compile as users' programs do;
# `EQX_FMNIST_TEST_OPTIMIZE=all` compiles every test that way.
_CHEAP_ALLOWED = os.environ.get("EQX_FMNIST_TEST_OPTIMIZE", "") != "all"

_HUGEPAGES = "ignore:Transparent hugepages are not enabled:UserWarning"

import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import jax  # noqa: E402
import pytest  # noqa: E402
from jax._src import compiler as jax_compiler  # noqa: E402

# The benchmark harness (`benchmarks/harness/`) lives outside the package, as Flax keeps
# its training benchmark beside its example: the scripts import it from their folder,
# and so do the tests of its pieces. Appended, so that nothing installed is shadowed.
sys.path.append(str(Path(__file__).resolve().parents[1] / "benchmarks"))

import compile_report  # noqa: E402

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


# One process at a time can hold a TPU chip (libtpu's lock file), and the suite starts
# JAX processes of its own (the CLI, workers, exported programs): where this process
# runs on an accelerator, they run on the CPU, as they do in CI. Set once the backend is
# up, so that it does not move this process.
if "JAX_PLATFORMS" not in os.environ and jax.default_backend() != "cpu":
    os.environ["JAX_PLATFORMS"] = "cpu"
# The warning a TPU VM's JAX prints at import (see pyproject.toml) is not the child's
# own output either: a one-line error stays one line there.
os.environ["PYTHONWARNINGS"] = ",".join(
    filter(None, [os.environ.get("PYTHONWARNINGS"), _HUGEPAGES])
)


# How much memory a worker may hold before its compiled programs are let go.
_KEEP_PROGRAMS_BYTES = 3 * 2**30


@pytest.fixture(scope="module", autouse=True)
def _release_compiled_programs():
    """A module's compiled programs are kept for the next module (the small world's
    programs are the same in many: kept, they are neither traced nor loaded again) until
    the worker holds 3 GiB, when they are let go: a worker that kept every program of
    the suite grew past 5 GB. A later module that needs one again traces it and loads
    it from the persistent cache."""
    yield
    import gc

    with open("/proc/self/statm") as f:
        resident = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    if resident > _KEEP_PROGRAMS_BYTES:
        jax.clear_caches()
        gc.collect()


# One white pixel: what a figure's PNG holds where no test looks at the picture.
_UNDRAWN_PNG = (
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x00\x00\x00"
    b"\x00:~\x9bU\x00\x00\x00\nIDATx\x9cc\xf8\x0f\x00\x01\x01\x01\x00\xb18\xf6\x14\x00\x00"
    b"\x00\x00IEND\xaeB`\x82"
)


@pytest.fixture(autouse=True)
def _figures_drawn_where_looked_at(request, monkeypatch):
    """A figure is built everywhere (every `plot_*` runs, with its data) but drawn only in
    tests marked `figures`, which look at the picture; elsewhere `savefig` writes one
    white pixel. Laying out and drawing some 400 figures was a tenth of the suite."""
    if request.node.get_closest_marker("figures") is not None:
        return
    from matplotlib.figure import Figure

    def save_undrawn(self, fname, *args, **kwargs):
        if hasattr(fname, "write"):
            fname.write(_UNDRAWN_PNG)
        else:
            with open(fname, "wb") as f:
                f.write(_UNDRAWN_PNG)

    monkeypatch.setattr(Figure, "savefig", save_undrawn)


def pytest_collection_modifyitems(config, items):
    """The modules with the most slow tests start first, so that the two workers finish
    together instead of one waiting on a long test picked up last. A module's tests stay
    together (its module-scoped fixtures are built once)."""
    slow: dict[str, int] = {}
    for item in items:
        slow[item.module.__name__] = slow.get(item.module.__name__, 0) + bool(
            item.get_closest_marker("slow")
        )
    items.sort(key=lambda item: -slow[item.module.__name__])


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


@pytest.fixture(scope="session")
def codelab_run(real_splits):
    """The codelab's recipe for 100 steps on the real data (the reference MLP, 784-256-
    128-10): a model whose accuracy is far from chance and far from perfect, which the
    evaluation and robustness tests score against their own numpy forward pass."""
    from eqx_fmnist.config import TrainConfig
    from eqx_fmnist.train import fit

    return fit(TrainConfig.codelab(steps=100, log_every=100), real_splits)


@pytest.fixture(scope="session")
def small():
    """The small world's data: 256 synthetic examples, 8 steps of 32 per epoch (read-only:
    an `ArrayDataset` is immutable)."""
    from eqx_fmnist.dataset import ArrayDataset

    from helpers import synthetic_arrays

    a = synthetic_arrays(n_train=256)
    return ArrayDataset(a["train_images"], a["train_labels"])


@pytest.fixture(scope="session")
def small_run(small):
    """The small world's model, trained once for the session (read-only): the
    `TrainResult` of `fit(small_config(), Splits(small, small))`."""
    import eqx_fmnist as ef

    from helpers import small_config

    return ef.fit(small_config(), ef.Splits(small, small))


@pytest.fixture(scope="session")
def small_cv_run(small, tmp_path_factory):
    """The small world's cross-validation, finished once for the session (read-only):
    `small_config()` in two folds of `small`, trained and written by `Training`."""
    import eqx_fmnist as ef
    from eqx_fmnist.runs import Training

    from helpers import fashion_mnist_of, small_config

    out = tmp_path_factory.mktemp("small-cv") / "cv"
    folds = ef.ensemble.Folds(2)
    Training.new(out, small_config(), members=folds, data=fashion_mnist_of(small)).run()
    return out


_TALLY = compile_report.Tally()
_TALLY.install()


class _WorkerReports:
    """On the xdist controller: each worker's compile report, as it finishes."""

    def __init__(self):
        self.payloads: list[str] = []

    def pytest_testnodedown(self, node, error):
        payload = getattr(node, "workeroutput", {}).get("compile_report")
        if payload:
            self.payloads.append(payload)


def pytest_configure(config):
    if config.pluginmanager.hasplugin("xdist") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(_WorkerReports(), "eqx_fmnist_compile_reports")


# The cheap settings also turn off XLA:CPU's fusion emitters (its newer code generator,
# about twice as slow to compile a test's programs; the programs run about a sixth
# slower): the cold suite's compile went from 346 s to 177 s of CPU time on the Intel Xeon. A
# process has one XLA_FLAGS, read when its backend starts, so in this process the option
# goes with each cheap compile (through JAX's compile options, as `compiler_options=`
# passes it); the CLI processes a cheap test starts get it in XLA_FLAGS.
_LEGACY_EMITTERS = "--xla_cpu_use_fusion_emitters=false"
_get_compile_options = jax_compiler.get_compile_options


def _cheap_compile_options(*args, **kwargs):
    options = _get_compile_options(*args, **kwargs)
    if jax.config.read("jax_disable_most_optimizations"):
        overrides = [*options.env_option_overrides, ("xla_cpu_use_fusion_emitters", False)]
        options.env_option_overrides = overrides
    return options


jax_compiler.get_compile_options = _cheap_compile_options


def _compile_cheaply(cheap: bool) -> None:
    """Compile with XLA's cheap settings (`cheap`) or fully optimised from now on, in this
    process and the CLI processes it starts. JAX's in-process caches do not key on the
    setting, so they are emptied at each switch (the persistent cache keys on it: the
    programs of both kinds stay there)."""
    if jax.config.read("jax_disable_most_optimizations") != cheap:
        jax.config.update("jax_disable_most_optimizations", cheap)
        os.environ["JAX_DISABLE_MOST_OPTIMIZATIONS"] = "1" if cheap else "0"
        flags = os.environ.get("XLA_FLAGS", "").replace(_LEGACY_EMITTERS, "").split()
        os.environ["XLA_FLAGS"] = " ".join(flags + [_LEGACY_EMITTERS] * cheap)
        jax.clear_caches()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _compile_cheaply(_CHEAP_ALLOWED and item.get_closest_marker("optimized") is None)
    _TALLY.current = item.nodeid
    yield
    _TALLY.current = compile_report.OUTSIDE


def pytest_sessionfinish(session):
    if hasattr(session.config, "workerinput"):  # an xdist worker: send the controller its part
        session.config.workeroutput["compile_report"] = _TALLY.payload()


def pytest_terminal_summary(terminalreporter, config):
    """The compile report, then how many tests skipped and why, at the end of every run."""
    workers = config.pluginmanager.get_plugin("eqx_fmnist_compile_reports")
    payloads = workers.payloads if workers is not None and workers.payloads else None
    payloads = payloads or [_TALLY.payload()]
    if os.environ.get("EQX_FMNIST_COMPILE_DUMP"):
        with open(os.environ["EQX_FMNIST_COMPILE_DUMP"], "w") as f:
            f.write("\n".join(payloads))
    tests, programs, lines, memory = compile_report.merge(payloads)
    terminalreporter.section("compile report")
    compile_report.write_report(terminalreporter.write_line, tests, programs, lines, memory)
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


@pytest.fixture(scope="session")
def test_images(real_data):
    """The 10,000 real test images, flattened to `(n, 784)` uint8."""
    return real_data.test_images.reshape(len(real_data.test_images), -1)


@pytest.fixture(scope="session")
def trained(real_data):
    """A model trained for 40 steps (hidden 64, 32) on the real training set: what the
    export, ONNX and page tests carry out of the library."""
    import eqx_fmnist as ef

    return ef.fit(ef.TrainConfig(steps=40, hidden_sizes=(64, 32)), ef.split_data(real_data))


@pytest.fixture(scope="session")
def calibrated(trained, real_data):
    """`trained`'s calibration (`helpers.calibrate_on_training_images`)."""
    from helpers import calibrate_on_training_images

    return calibrate_on_training_images(trained.model, real_data)
