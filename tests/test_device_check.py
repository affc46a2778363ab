"""`benchmarks/device_check.sh`, the prepared GPU checks, in its dry run: every step on
the CPU at tiny sizes, so that the script a GPU session runs once is known to work."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.docs  # a dry run: tiny sizes

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_device_check_runs_dry_on_the_cpu(tmp_path, real_data):
    env = {
        **os.environ,
        "DRY_RUN": "1",
        "OUT": str(tmp_path),
        "PYTHON": sys.executable,
        "EQX_FMNIST_DATA": str(real_data.source),
    }
    done = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "device_check.sh")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "tests collected" in done.stdout and "device check done" in done.stdout
    table = (tmp_path / "device_check.md").read_text()
    for part in (
        "| p=f32,c=f32,o=f32 |",
        "| p=f32,c=bf16,o=f32 |",
        "members in one program",
        "test accuracy after",
        "run on cpu",
        "0 of 10,000 predictions differ",
    ):
        assert part in table, part
    assert (tmp_path / "model.stablehlo").is_file()
