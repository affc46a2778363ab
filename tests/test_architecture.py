"""The package's imports point one way: a module imports only modules above it.

The order is `DESIGN.md`'s table (and `docs/architecture.md`'s), with two small modules
of this code's own: `cache` (JAX's compilation cache in the user cache folder) and
`flags` (command-line flags generated from `TrainConfig`); `plots`, which imports only
`data` and `fileio`, stands right below `data` so that `ensemble` may draw with it. A
subpackage (`data/`, `ensemble/`, `runs/`, `bench/`, `cli/`) is one layer.
"""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "eqx_fmnist"

# Top to bottom, as in DESIGN.md. A module may import any module above it, unless
# `ONLY` narrows it.
LAYERS = [
    "fileio",
    "data",
    "plots",
    "cache",
    "dataset",
    "parallel",
    "precision",
    "model",
    "losses",
    "evaluate",
    "calibration",
    "config",
    "flags",
    "state",
    "step",
    "train",
    "ensemble",
    "checkpoint",
    "export",
    "runs",
    "bench",
    "cli",
]
ONLY = {
    "fileio": set(),
    "data": {"fileio"},
    "cache": {"data"},
    "dataset": {"data"},
    "parallel": {"dataset"},
    "precision": set(),
    "model": {"precision"},
    "losses": {"model", "precision"},
    "config": {"precision", "dataset"},
    "flags": {"config"},
    "state": {"config", "model", "precision"},
    "step": {"state", "config", "dataset", "losses", "parallel", "precision"},
    "plots": {"data", "fileio"},
}
ENTRY_POINTS = {"__init__": set(LAYERS) - {"cli"}, "__main__": {"cli"}}


def package_imports(path: Path) -> set[str]:
    """Modules of the package imported by the module at `path` (for a module of a
    subpackage such as `bench/`, the top-level modules it reaches with `..`)."""
    depth = len(path.relative_to(PACKAGE).parts) if path.is_relative_to(PACKAGE) else 1
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level == depth and node.module:
                found.add(node.module.split(".")[0])
            elif node.level == depth:
                found.update(alias.name for alias in node.names)
            elif node.module and node.module.startswith("eqx_fmnist."):
                found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("eqx_fmnist."):
                    found.add(alias.name.split(".")[1])
    return found


def allowed(module: str) -> set[str]:
    if module in ENTRY_POINTS:
        return ENTRY_POINTS[module]
    above = set(LAYERS[: LAYERS.index(module)])
    return ONLY.get(module, above) & above


# A subpackage is one layer: its files may import each other (with `.`) and the layers
# above it (with `..`).
SOURCES = {p.stem: p for p in PACKAGE.glob("*.py")}
SOURCES |= {f"{p.parent.name}.{p.stem}": p for p in PACKAGE.glob("*/*.py")}
MODULES = sorted(SOURCES)


def layer_of(module: str) -> str:
    return module.split(".")[0]


def test_every_module_has_a_place_in_the_layers():
    missing = {layer_of(m) for m in MODULES} - set(LAYERS) - set(ENTRY_POINTS)
    assert not missing, f"add {sorted(missing)} to LAYERS in {__file__}"


@pytest.mark.parametrize("module", MODULES)
def test_imports_point_one_way(module):
    imports = package_imports(SOURCES[module])
    bad = imports - allowed(layer_of(module))
    assert not bad, f"eqx_fmnist.{module} imports {sorted(bad)}, which stand below it"


def test_the_checker_sees_relative_and_absolute_imports(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("from .train import fit\nfrom . import cli\nimport eqx_fmnist.plots\n")
    assert package_imports(probe) == {"train", "cli", "plots"}


def test_the_checker_sees_a_subpackage_reach_up():
    imports = package_imports(SOURCES["bench.suite"])
    assert "train" in imports and "measure" not in imports  # `..train` up, `.measure` inside
