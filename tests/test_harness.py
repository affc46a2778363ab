"""The benchmark harness (`benchmarks/harness/`, outside the package) cannot rot: its
pieces checked against hand counts, and `python benchmarks/throughput.py --quick` run in
its smoke form. Speed is never asserted."""

import re
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_flops_per_example_is_the_exact_matmul_count():
    from harness import matmul_flops_per_example, matmul_shapes

    # forward 2*(784*256 + 256*128 + 128*10); weight grads the same; input grads of
    # layers 2 and 3 only.
    forward = 2 * (784 * 256 + 256 * 128 + 128 * 10)
    assert forward == 469_504
    assert matmul_flops_per_example() == 2 * forward + 2 * (256 * 128 + 128 * 10) == 1_007_104
    shapes = matmul_shapes(512)
    assert len(shapes) == 8 and (512, 784, 256) in shapes and (256, 512, 784) in shapes
    assert sum(2 * m * k * n for m, k, n in shapes) == 512 * 1_007_104


def test_step_traffic_counts_the_model_the_moments_and_the_activations():
    """The roofline's bytes from the library's own model and AdamW state, counted
    here leaf by leaf."""
    import jax
    import optax

    import eqx_fmnist as ef

    from harness import step_traffic

    model = ef.init_state(ef.TrainConfig(), 60_000).model
    params = sum(leaf.size for leaf in jax.tree.leaves(model))
    moments = optax.adamw(1e-3).init(model)
    moment_bytes = sum(4 * leaf.size for leaf in jax.tree.leaves(moments) if leaf.size > 1)
    assert moment_bytes == 2 * 4 * params  # mu and nu, float32
    # pixels read; params read twice and written once; moments read and written;
    # 256 + 128 + 10 activations a row, written and read, float32
    expected = 512 * 784 + 3 * 4 * params + 2 * moment_bytes + 2 * 4 * 512 * (256 + 128 + 10)
    assert step_traffic(512) == expected == 8_599_320


def test_the_roofline_is_the_slower_of_compute_and_memory():
    from harness import DevicePeaks, matmul_flops_per_example, step_roofline, step_traffic

    sizes = {"float32": 8, "bfloat16": 8}
    peaks = DevicePeaks({"float32": 1e12, "bfloat16": 1e14}, 1e11, sizes, 4, 0.0, "test")
    f32, bf16 = step_roofline(512, peaks), step_roofline(512, peaks, dtype="bfloat16")
    assert f32.flops == 512 * matmul_flops_per_example()
    # float32: 515.6 MFLOP at 1 TFLOP/s (516 us) outlasts 8.6 MB at 100 GB/s (86 us)
    assert f32.limit == "compute" and f32.step_seconds == pytest.approx(f32.flops / 1e12)
    assert bf16.limit == "memory" and bf16.step_seconds == pytest.approx(step_traffic(512) / 1e11)
    assert bf16.examples_per_sec == pytest.approx(512 / bf16.step_seconds)
    with pytest.raises(ValueError, match="dtype"):
        step_roofline(512, peaks, dtype="float16")


def test_sizes_grow_until_a_call_outlasts_the_floor():
    """What picks a measurement's size: doubling from the start until one call lasts the
    floor, stopping at the limit (a device whose calls cost more than the largest size's
    work, as a TPU's 0.7 ms against a 512-square matmul, gets the limit's size)."""
    from harness.roofline import _grown

    asked = []

    def seconds_at(n):
        asked.append(n)
        return n**3 * 1e-12  # a matmul at 1 TFLOP/s, about

    assert _grown(seconds_at, 256, 16_384, floor=1e-3) == (1024, 1024**3 * 1e-12)
    assert asked == [256, 512, 1024]
    assert _grown(seconds_at, 256, 2048, floor=1.0)[0] == 2048  # the limit
    assert _grown(seconds_at, 256, 16_384, floor=0.0)[0] == 256


def test_measure_peaks_times_one_matmul_per_dtype_and_one_pass():
    """The quick peaks on this device: each call outlasts four empty calls (the sizes
    chose themselves), and the peaks are of a plausible order: over 1 GFLOP/s and 100
    MB/s (a 2-core CPU), under 10 PFLOP/s and 100 TB/s (any one device)."""
    import jax

    from harness import measure_peaks

    peaks = measure_peaks(quick=True, repeats=2)
    assert set(peaks.flops_per_sec) == set(peaks.matmul_sizes) == {"float32", "bfloat16"}
    assert all(1e9 < f < 1e16 for f in peaks.flops_per_sec.values())
    assert 1e8 < peaks.bytes_per_sec < 1e14
    for dtype, n in peaks.matmul_sizes.items():
        assert n >= 256 and n & (n - 1) == 0, (dtype, n)  # 256 doubled
        # seconds of the call, the empty call's cost added back: at least 4 such costs
        assert 2 * n**3 / peaks.flops_per_sec[dtype] + peaks.call_seconds >= (
            4 * peaks.call_seconds
        )
    assert peaks.copy_bytes >= 2**20
    assert peaks.device.startswith(jax.default_backend())


@pytest.mark.slow  # cold: compiles several programs or trains on the real data
def test_xla_counts_at_least_the_matmul_flops(real_datasets):
    """XLA's cost analysis of one compiled step counts every matmul FLOP and a little
    elementwise work on top (AdamW, GELU, softmax)."""
    from eqx_fmnist.config import TrainConfig

    from harness.suite import xla_flops_per_example

    train, _ = real_datasets
    flops = xla_flops_per_example(train, TrainConfig(batch_size=512))
    assert 1_007_104 <= flops < 1.2 * 1_007_104


def test_measure_uses_medians_and_reports_compile_separately():
    from harness import measure

    calls = []

    def run():
        calls.append(1)
        return 0

    t = measure("x", run, examples=10, batch_size=2, repeats=3, warmup=2)
    assert len(calls) == 5 and len(t.runs) == 3
    assert sorted(t.runs)[1] == t.examples_per_sec


def test_measure_interleaved_alternates_the_variants():
    from harness import measure_interleaved

    order = []
    results = measure_interleaved(
        {"a": lambda: order.append("a"), "b": lambda: order.append("b")},
        examples={"a": 10, "b": 20},
        batch_size=1,
        repeats=3,
    )
    assert order == ["a", "b"] + ["a", "b"] * 3  # warm-ups, then turns
    assert [r.name for r in results] == ["a", "b"] and all(len(r.runs) == 3 for r in results)


@pytest.mark.slow  # cold: compiles several programs or trains on the real data
def test_matmul_bound_adds_up_the_step_shapes():
    from harness import matmul_bound

    bound = matmul_bound(64, backends=("numpy",))
    assert len(bound.seconds) == 8 and set(bound.backends) == {"numpy"}
    assert bound.examples_per_sec == pytest.approx(64 / sum(bound.seconds))
    with pytest.raises(ValueError, match="backend"):
        matmul_bound(64, backends=("fortran",))


def test_machine_facts_name_the_cpu_and_versions():
    import jax

    from harness import machine_facts

    facts = machine_facts()
    assert facts["jax"] == jax.__version__ and facts["backend"] == jax.default_backend()
    assert facts["cpu"] and facts["cores"] >= 1
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        flags = set(
            next(ln for ln in cpuinfo.read_text().splitlines() if ln.startswith("flags")).split()
        )
        assert ("avx512_bf16" in facts["flags"]) == ("avx512_bf16" in flags)


@pytest.mark.slow
def test_trainers_train_the_same_mlp(real_datasets):
    """Every path starts from a loss near ln(10) and brings it down within 50 steps: the
    library's and the baselines of `benchmarks/baselines.py` (PyTorch's if installed)."""
    from eqx_fmnist.config import TrainConfig

    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from baselines import all_trainers
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    trainers, _ = all_trainers()
    train, _ = real_datasets
    config = TrainConfig.codelab(batch_size=256)
    for name, factory in trainers.items():
        if name == "python_dispatch":
            continue  # the same loop as codelab_jit, without jax.jit: slow
        run = factory(train, config, 10)
        first, later = run(10), run(40)
        assert 0.3 < later < first < 2.5, (name, first, later)
        assert np.isfinite(later)


@pytest.mark.slow
@pytest.mark.docs  # a script's smoke form: the documentation tier, as the others
def test_the_throughput_script_compares_every_path(tmp_path, real_data, monkeypatch):
    """`python benchmarks/throughput.py --quick --out DIR`: the stored table's script, in
    its smoke form, measures the codelab's loops beside the library's paths and writes
    the table and the figure."""
    import runpy

    monkeypatch.setenv("EQX_FMNIST_DATA", str(real_data.source))
    # In this process, as `python` runs it: the suite's compiled programs are shared.
    monkeypatch.setattr(sys, "argv", ["throughput.py", "--quick", "--out", str(tmp_path)])
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    runpy.run_path(str(ROOT / "benchmarks" / "throughput.py"), run_name="__main__")
    table = (tmp_path / "throughput.md").read_text()
    rows = [ln.split(" | ")[0].lstrip("| ") for ln in table.splitlines() if ln.startswith("| ")]
    assert rows[:5] == ["path", "python_dispatch", "codelab_jit", "library_step", "library_fused"]
    assert "x codelab_jit" in table
    for row in (
        "Machine:",
        "jax ",
        "| fit, default recipe |",
        "| fused epoch, no augmentation |",
        "x plain fused epoch",
        "% of bound",
        "The roofline on cpu",
        "| 25 steps |",
        "p=f32,c=bf16,o=f32",
        "| 128 |",
        "cost_analysis",
        "projection",
    ):
        assert row in table, row
    first = table.splitlines()[0]  # the machine, the command (as run here), commit, day
    made = r"Made by `python \S*benchmarks/throughput\.py --quick --out \S+` at commit \w{7,} "
    assert re.search(made + r"\((clean|with uncommitted changes)\) on [\d-]{10}\.$", first), first
    assert (tmp_path / "throughput.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_precision_rows_leave_out_float16_products_on_a_tpu():
    """A TPU has no float16 multiplier (a run there refuses `c=f16`): the throughput
    table's precision rows leave that policy out there, and keep all three elsewhere."""
    from harness.suite import PRECISION_ROWS, precision_specs

    assert precision_specs("cpu") == PRECISION_ROWS == precision_specs("gpu")
    assert precision_specs("tpu") == ("p=f32,c=f32,o=f32", "p=f32,c=bf16,o=f32")


def test_a_results_files_first_line_names_the_commit_and_the_day(tmp_path, monkeypatch):
    """The machine line ends with the commit the code was at, whether the tracked files
    matched it, and the day; outside a git checkout it says the commit is unknown."""
    import datetime
    import re
    import subprocess

    from harness.timing import machine_line, provenance

    day = datetime.date.today().isoformat()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    line = machine_line("python x.py")
    assert re.search(
        rf"Made by `python x.py` at commit {head.stdout.strip()} \((clean|with uncommitted changes)\) on {day}\.$",
        line,
    ), line
    monkeypatch.chdir(tmp_path)  # not a checkout
    assert provenance() == f"at an unknown commit on {day}"


def test_a_machine_handed_a_copy_of_the_tree_is_told_its_commit(monkeypatch):
    """Where the checkout's git cannot say (a copy of the working tree on another
    machine), `$EQX_FMNIST_CODE_COMMIT` names the commit and its state; a value in
    another form is refused in one line naming the variable and the form."""
    import datetime

    from harness.timing import provenance

    day = datetime.date.today().isoformat()
    monkeypatch.setenv("EQX_FMNIST_CODE_COMMIT", "1619ba0 (clean)")
    assert provenance() == f"at commit 1619ba0 (clean) on {day}"
    monkeypatch.setenv("EQX_FMNIST_CODE_COMMIT", "1619ba0")
    with pytest.raises(ValueError, match=r"EQX_FMNIST_CODE_COMMIT.*1a2b3c4 \(clean\)"):
        provenance()


def test_a_results_file_written_before_does_not_make_the_code_unclean(tmp_path, monkeypatch):
    """In a checkout whose only change is a results file (one a script wrote just
    before), the code is clean; a change to any other tracked file is not."""
    import subprocess

    from harness.timing import provenance

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "benchmarks" / "results" / "a.md").write_text("one\n")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first")
    monkeypatch.chdir(tmp_path / "benchmarks")  # where a script runs from
    (tmp_path / "benchmarks" / "results" / "a.md").write_text("two\n")
    assert "(clean)" in provenance()
    (tmp_path / "code.py").write_text("x = 2\n")
    assert "(with uncommitted changes)" in provenance()


PROVENANCE = re.compile(
    r"^Machine: .+\. Made by `python benchmarks/[\w/]+\.py[^`]*` at commit [0-9a-f]{7,} "
    r"\((clean|with uncommitted changes)\) on \d{4}-\d{2}-\d{2}\."
)


def test_every_results_file_names_the_machine_command_commit_and_day_that_made_it():
    """A results file's first line names the machine, the command, the commit (and
    whether the code differed from it) and the day."""
    results = ROOT / "benchmarks" / "results"
    files = sorted(results.rglob("*.md"))
    assert len(files) > 20, "the results files are not where this test looks"
    for path in files:
        first = path.read_text().splitlines()[0]
        assert PROVENANCE.match(first), f"{path.relative_to(results)}: {first}"
