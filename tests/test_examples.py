"""`examples/`: files a reader runs on their own. Each runs here as a reader runs it, in
a fresh process, and does what its docstring says."""

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

# The documentation tier: what the pages and scripts show. Compiled as a user's script
# is: the examples train long enough for the running time to count.
pytestmark = [pytest.mark.docs, pytest.mark.optimized]

ROOT = Path(__file__).resolve().parents[1]
LOOP = ROOT / "examples" / "codelab_loop.py"


def test_the_loop_uses_jax_equinox_and_optax_and_the_library_only_for_the_data():
    tree = ast.parse(LOOP.read_text())
    imported = {
        a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    }
    from_library = [
        n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "eqx_fmnist"
    ]
    assert {"jax", "equinox", "optax"} <= imported and "eqx_fmnist" not in imported
    assert [a.name for n in from_library for a in n.names] == ["load_fashion_mnist"]
    assert len(LOOP.read_text().splitlines()) <= 100


@pytest.mark.slow
def test_the_codelab_loop_reaches_its_stated_accuracy(real_data):
    stated = float(re.search(r"about (0\.\d+) test accuracy", LOOP.read_text())[1])
    done = subprocess.run(
        [sys.executable, str(LOOP)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "EQX_FMNIST_DATA": str(real_data.source)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    losses = [float(x) for x in re.findall(r"mean loss (\d\.\d+)", done.stdout)]
    assert len(losses) == 5 and losses == sorted(losses, reverse=True)  # it learns
    accuracy = float(re.search(r"test accuracy (0\.\d+)", done.stdout)[1])
    assert accuracy >= stated - 0.01, done.stdout
