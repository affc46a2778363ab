"""The benchmark cannot rot: its pieces checked against hand counts (the README's
`eqx-fmnist bench --quick` runs in `test_commands.py`). Speed is never asserted."""

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_flops_per_example_is_the_exact_matmul_count():
    from eqx_fmnist.bench import matmul_flops_per_example, matmul_shapes

    # forward 2*(784*256 + 256*128 + 128*10); weight grads the same; input grads of
    # layers 2 and 3 only.
    forward = 2 * (784 * 256 + 256 * 128 + 128 * 10)
    assert forward == 469_504
    assert matmul_flops_per_example() == 2 * forward + 2 * (256 * 128 + 128 * 10) == 1_007_104
    shapes = matmul_shapes(512)
    assert len(shapes) == 8 and (512, 784, 256) in shapes and (256, 512, 784) in shapes
    assert sum(2 * m * k * n for m, k, n in shapes) == 512 * 1_007_104


@pytest.mark.slow  # cold: compiles several programs or trains on the real data
def test_xla_counts_at_least_the_matmul_flops(real_datasets):
    """XLA's cost analysis of one compiled step counts every matmul FLOP and a little
    elementwise work on top (AdamW, GELU, softmax)."""
    from eqx_fmnist.bench.suite import xla_flops_per_example
    from eqx_fmnist.config import TrainConfig

    train, _ = real_datasets
    flops = xla_flops_per_example(train, TrainConfig(batch_size=512))
    assert 1_007_104 <= flops < 1.2 * 1_007_104


def test_measure_uses_medians_and_reports_compile_separately():
    from eqx_fmnist.bench import measure

    calls = []

    def run():
        calls.append(1)
        return 0

    t = measure("x", run, examples=10, batch_size=2, repeats=3, warmup=2)
    assert len(calls) == 5 and len(t.runs) == 3
    assert sorted(t.runs)[1] == t.examples_per_sec


def test_measure_interleaved_alternates_the_variants():
    from eqx_fmnist.bench import measure_interleaved

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
    from eqx_fmnist.bench import matmul_bound

    bound = matmul_bound(64, backends=("numpy",))
    assert len(bound.seconds) == 8 and set(bound.backends) == {"numpy"}
    assert bound.examples_per_sec == pytest.approx(64 / sum(bound.seconds))
    with pytest.raises(ValueError, match="backend"):
        matmul_bound(64, backends=("fortran",))


def test_machine_facts_name_the_cpu_and_versions():
    import jax

    from eqx_fmnist.bench import machine_facts

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
@pytest.mark.quick_compile  # its figures are not measurements
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
    assert (tmp_path / "throughput.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
