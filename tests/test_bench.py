"""The benchmark cannot rot: a smoke run with tiny sizes. Speed is never asserted."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_flops_per_example_is_the_exact_matmul_count():
    from eqx_fmnist.bench import matmul_flops_per_example

    # forward 2*(784*256 + 256*128 + 128*10); weight grads the same; input grads of
    # layers 2 and 3 only.
    forward = 2 * (784 * 256 + 256 * 128 + 128 * 10)
    assert forward == 469_504
    assert matmul_flops_per_example() == 2 * forward + 2 * (256 * 128 + 128 * 10) == 1_007_104


def test_measure_uses_medians_and_reports_compile_separately():
    from eqx_fmnist.bench import measure

    calls = []

    def run():
        calls.append(1)
        return 0

    t = measure("x", run, examples=10, batch_size=2, repeats=3, warmup=2)
    assert len(calls) == 5 and len(t.runs) == 3
    assert sorted(t.runs)[1] == t.examples_per_sec


def test_benchmark_script_smoke_run(tmp_path, real_data):
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "throughput.py"),
            "--quick",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    table = (tmp_path / "throughput.md").read_text()
    for row in (
        "python_dispatch",
        "codelab_jit",
        "library_step",
        "library_fused",
        "% of bound",
        "bfloat16 compute",
        "| 128 |",
        "(1024, 512)",
        "projection",
    ):
        assert row in table, row
    assert (tmp_path / "throughput.png").read_bytes().startswith(b"\x89PNG")
