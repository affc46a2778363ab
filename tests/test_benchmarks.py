"""Every script in `benchmarks/` runs here in a smoke form: the script itself, in this
process as `python` runs it, on a slice of the real data (8,000 training and 1,000 test
images) with a few steps per run, writing its table to a temporary folder. That each
table is made is asserted; speed and accuracy never are (they are what the full runs
measure). `throughput.py` and `device_check.py` have their own tests
(`test_bench.py`, `test_device_check.py`)."""

import runpy
import sys
from pathlib import Path

import pytest

# The documentation tier (what the pages and scripts show); compiles much, runs little.
pytestmark = pytest.mark.docs

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p.name for p in (ROOT / "benchmarks").glob("*.py"))
TESTED_ELSEWHERE = {"throughput.py", "device_check.py"}
LIBRARIES = {"baselines.py", "time_to_accuracy.py"}  # imported by the scripts above
# A script's smoke arguments, and a line its table must hold.
SMOKE = {
    "answers.py": (["--steps", "6", "--seeds", "0", "1"], "## Attributions"),
    "accuracy.py": (
        ["--seeds", "0", "1", "--steps", "6", "--precision", "p=f32,c=bf16,o=f32"],
        "**ensemble of 2**",
    ),
    "calibration.py": (
        ["--seeds", "0", "--steps", "6", "--calibrate", "1000"],
        "### The trust flag",
    ),
    "ensemble.py": (
        ["--members", "1", "2", "--repeats", "1", "--seeds", "2", "--epochs", "1"],
        "| 2 |",
    ),
    # Chromium opening the page is test_web_page.py's.
    "export.py": (
        ["--epochs", "1", "--seeds", "2", "--no-browser", "--photos", "7", "--views-images", "300"],
        "| shifts (6) | html |",
    ),
    "folds.py": (["--epochs", "1", "--folds", "2"], "| random |"),
    "members.py": (
        ["--members", "2", "--precisions", "float32", "--repeats", "1", "--fit", "2"]
        + ["--epochs", "1"],
        "| float32 | shared |",
    ),
    "confused_pairs.py": (["--steps", "30", "--pairs", "2"], "| completeness error"),
    "robust_accuracy.py": (
        ["--seeds", "0", "--ensemble", "2", "--steps", "6"],
        "distilled from the ensemble of 2",
    ),
    "trust_probes.py": (["--steps", "6"], "| 6 moves |"),
    "load_data.py": (["--repeats", "1"], "| verify=False |"),
    "levers.py": (["--seeds", "0", "--epochs", "1"], "| no weight decay on biases |"),
    "distill_recipe.py": (
        ["--seeds", "0", "1", "--teacher-epochs", "1", "--epochs", "1", "--mixup", "0.5"]
        + ["--teacher-channels", "4,8"],
        "channels [4, 8], then",
    ),
    "distill_ablation.py": (
        ["0:0:1", "1:0:1", "0:0.5:1", "--teacher-epochs", "1", "--teachers", "2"]
        + ["--teacher-channels", "4,8"],
        "| **mean ± sd of 2** | 0 | 1 |",
    ),
    "doors.py": (
        ["--repeats", "1", "--steps", "4", "--train", "2000"],
        "| `ef.train_step`, 4 calls |",
    ),
    "import_time.py": (["--repeats", "1"], "| `import eqx_fmnist` |"),
    "own_model.py": (
        ["--epochs", "1", "--repeats", "1", "--train", "2000", "--batch", "64"],
        "| plain per-step `eqx.filter_jit` loop |",
    ),
    "cnn_forms.py": (
        ["--batch", "8", "--steps", "2", "--repeats", "1"],
        "| native_forward, forward and backward |",
    ),
    "distill_step.py": (
        ["--teachers", "2", "--steps", "2", "--repeats", "1", "--train", "2000"],
        "| table |",
    ),
    "step_costs.py": (
        ["--steps", "2", "--repeats", "1", "--epochs", "1", "--fit-repeats", "1"],
        "| selects |",
    ),
    "call_costs.py": (["--repeats", "1", "--queued", "2"], "| hand-written scan epoch, float32 |"),
    "main_job.py": (
        ["--runs", "1", "--train", "--steps 8 --log-every 4 --hidden 16"],
        "| cold (empty compilation cache) |",
    ),
}


def test_every_script_is_smoke_tested_somewhere():
    assert set(SCRIPTS) == set(SMOKE) | TESTED_ELSEWHERE | LIBRARIES, set(SCRIPTS) ^ (
        set(SMOKE) | TESTED_ELSEWHERE | LIBRARIES
    )


@pytest.fixture
def slice_of_the_data(real_data, monkeypatch):
    """`ef.load_fashion_mnist()` gives the first 8,000 training and 1,000 test images."""
    import eqx_fmnist  # noqa: F401  (the package's modules, loaded before they are patched)

    from helpers import use_a_slice

    return use_a_slice(real_data, monkeypatch, 8000, 1000)


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(SMOKE))
def test_the_script_runs_in_its_smoke_form(script, slice_of_the_data, tmp_path, monkeypatch):
    args, promised = SMOKE[script]
    out = tmp_path / "results" / script.replace(".py", ".md")
    monkeypatch.setattr(sys, "argv", [script, *args, "--out", str(out)])
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    monkeypatch.chdir(tmp_path)  # anything written beside the table stays in tmp_path
    runpy.run_path(str(ROOT / "benchmarks" / script), run_name="__main__")
    table = out.read_text()
    assert table.startswith("Machine:") and promised in table, table[-2000:]
