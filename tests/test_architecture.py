"""The package's layout: imports point one way (a module imports only modules above it),
every relative import resolves, and package faces only re-export.

The order is `DESIGN.md`'s table (and `docs/architecture.md`'s), with modules of this
code's own: `checks` (the one wording of a refused number), `hardware` (the CPU's flags,
and the warning where a low precision is slower), `cache` (JAX's compilation cache in the
user cache folder) and `batches` (what each step trains on). A subpackage (`data/`,
`plots/`, `ensemble/`, `export/`, `runs/`, `cli/`) is one layer. The benchmark harness is
not in the package (`benchmarks/harness/`), and no module imports it.
"""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "eqx_fmnist"

# Top to bottom, as in DESIGN.md. A module may import any module above it, unless
# `ONLY` narrows it.
LAYERS = [
    "fashion",
    "fileio",
    "checks",
    "hardware",
    "precision",
    "data",
    "cache",
    "plots",
    "dataset",
    "subsets",
    "augment",
    "views",
    "parallel",
    "model",
    "losses",
    "conformal",
    "evaluation",
    "robustness",
    "trust",
    "calibration",
    "attributions",
    "answers",
    "config",
    "optim",
    "build",
    "state",
    "distill",
    "batches",
    "chunk",
    "step",
    "intervals",
    "hooks",
    "train",
    "ensemble",
    "audit",
    "checkpoint",
    "export",
    "runs",
    "cli",
]
ONLY = {
    "fashion": set(),
    "fileio": set(),
    "checks": set(),
    "hardware": set(),
    "precision": set(),
    "data": {"fileio", "fashion"},
    "cache": {"data"},
    "plots": {"data", "fileio"},
    "dataset": {"fashion"},
    "subsets": set(),
    "augment": {"fashion"},
    "views": {"augment", "fashion"},
    "parallel": set(),
    "model": {"checks", "precision", "fashion"},
    "losses": {"checks", "model", "precision"},
    "conformal": {"checks"},
    "attributions": {"data", "dataset", "model", "precision"},
    "config": {"checks", "precision", "dataset", "augment", "views"},
    "optim": {"config", "precision"},
    "build": {"augment", "config", "dataset", "fashion", "model", "precision"},
    "state": {"build", "config", "optim", "model", "precision", "augment", "hardware", "parallel"},
    "distill": {"config", "fashion", "model", "precision", "augment", "views", "dataset"},
    "batches": {"state", "dataset", "augment", "distill", "fashion"},
    "chunk": {"state", "dataset", "batches", "distill", "losses", "model", "parallel"},
    "step": {
        "checks",
        "state",
        "dataset",
        "augment",
        "batches",
        "chunk",
        "distill",
        "losses",
        "optim",
        "parallel",
        "precision",
    },
    "intervals": {"config", "dataset", "state"},
    "hooks": {"config", "dataset", "evaluation", "model", "parallel", "precision", "subsets"},
    "audit": {"data", "fileio"},
}
ENTRY_POINTS = {"__init__": set(LAYERS) - {"cli"}, "__main__": {"cli"}}


def package_imports(path: Path, depth: int | None = None) -> set[str]:
    """Modules of the package imported by the module at `path` (for a module of a
    subpackage such as `runs/`, the top-level modules it reaches with `..`); `depth`:
    how deep the file sits in the package (1: top level), from its path by default."""
    if depth is None:
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


def imported_names(path: Path) -> set[str]:
    """Every top-level name a module imports (`harness` in `from harness.suite import x`)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
    return found


@pytest.mark.parametrize("module", MODULES)
def test_no_module_imports_the_benchmark_harness(module):
    """The harness and the scripts beside it measure the library; the library never
    reaches them (an installed package could not: `benchmarks/` is not installed)."""
    outside = imported_names(SOURCES[module]) & {"harness", "baselines", "benchmarks"}
    assert not outside, f"eqx_fmnist.{module} imports {sorted(outside)}"


def test_the_checker_sees_relative_and_absolute_imports(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("from .train import fit\nfrom . import cli\nimport eqx_fmnist.plots\n")
    assert package_imports(probe) == {"train", "cli", "plots"}


def test_the_checker_sees_a_subpackage_reach_up(tmp_path):
    """In a subpackage, `..x` is the package's module `x` and `.y` a sibling (not a
    layer); `from .. import z` names `z`."""
    probe = tmp_path / "probe.py"
    probe.write_text("from ..train import fit\nfrom .timing import measure\nfrom .. import plots\n")
    assert package_imports(probe, depth=2) == {"train", "plots"}
    assert package_imports(SOURCES["runs.report"]) >= {"answers", "evaluation"}


def test_no_permission_in_only_is_stale():
    """Each module `ONLY` lets a layer import is imported by that layer: a permission
    the code no longer uses is a hole for the next import to slip through."""
    for layer, permitted in ONLY.items():
        used = set().union(*(package_imports(SOURCES[m]) for m in MODULES if layer_of(m) == layer))
        assert not permitted - used, f"{layer}: ONLY permits {sorted(permitted - used)}, unused"


def _relative_imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            yield node


@pytest.mark.parametrize("module", MODULES)
def test_every_relative_import_resolves(module):
    """`from .x import y` inside a subpackage means its sibling `x`: a module moved into a
    package keeps imports that no longer point where they did."""
    path = SOURCES[module]
    for node in _relative_imports(path):
        base = path.parent
        for _ in range(node.level - 1):
            base = base.parent
        if node.module:
            target = base.joinpath(*node.module.split("."))
            assert target.with_suffix(".py").is_file() or (target / "__init__.py").is_file(), (
                f"{path.relative_to(PACKAGE)}:{node.lineno}: from {'.' * node.level}"
                f"{node.module} names no module"
            )
        else:  # `from . import x`: each x is a module of the package
            for alias in node.names:
                target = base / alias.name
                assert target.with_suffix(".py").is_file() or (target / "__init__.py").is_file(), (
                    f"{path.relative_to(PACKAGE)}:{node.lineno}: from . import {alias.name}"
                )


def test_the_resolver_catches_a_moved_import(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("from .bench import run\n")
    node = next(_relative_imports(tmp_path / "pkg" / "__init__.py"))
    target = (tmp_path / "pkg").joinpath(node.module)
    assert not target.with_suffix(".py").is_file() and not (target / "__init__.py").is_file()


FACES = sorted(PACKAGE.rglob("__init__.py"))


def face_problems(source: str) -> list[str]:
    """What in a package face is more than a docstring, imports and `__version__` (and a
    lazy face's `_LAZY`, `__getattr__`, `__dir__` and the re-exports it gives a type
    checker), or a re-export not in the `from .x import y as y` form, or a private name."""
    problems = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                if alias.name.startswith("_"):
                    problems.append(f"line {node.lineno} imports the private {alias.name}")
                elif isinstance(node, ast.ImportFrom) and alias.asname != alias.name:
                    problems.append(f"line {node.lineno}: write `{alias.name} as {alias.name}`")
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the docstring
        elif isinstance(node, ast.Assign) and [getattr(t, "id", "") for t in node.targets] in (
            ["__version__"],
            ["_LAZY"],
        ):
            continue
        elif isinstance(node, ast.FunctionDef) and node.name in ("__getattr__", "__dir__"):
            continue  # a lazy face (PEP 562): `_LAZY`'s names imported where first used
        elif isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
            problems += face_problems(ast.unparse(ast.Module(node.body, [])))
        else:
            problems.append(f"line {node.lineno} holds code ({type(node).__name__})")
    return problems


@pytest.mark.parametrize("face", FACES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_package_faces_only_re_export(face):
    """Code lives in modules named for their job; an `__init__.py` only re-exports."""
    assert not face_problems(face.read_text()), face_problems(face.read_text())


def test_the_face_checker_sees_code_and_private_names():
    assert face_problems('"""doc"""\nfrom .a import b as b\n__version__ = "1"\n') == []
    found = face_problems("from .a import b\nfrom .a import _c as _c\nX = 1\ndef f():\n    pass\n")
    assert len(found) == 4, found


@pytest.mark.parametrize("face", FACES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_public_name_shadows_a_module(face):
    """`eqx_fmnist.cli.command` must stay the module: a face re-exports no function or
    class under the name of one of its own modules."""
    modules = {p.stem for p in face.parent.glob("*.py")} | {
        p.parent.name for p in face.parent.glob("*/__init__.py")
    }
    for node in ast.parse(face.read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            for alias in node.names:
                assert (alias.asname or alias.name) not in modules, (
                    f"{face.relative_to(PACKAGE)}: `{alias.name}` from .{node.module} hides "
                    f"the module {alias.name}"
                )


PACKAGE_FILES = sorted(PACKAGE.rglob("*.py"))
MAX_MODULE_LINES = 400
MAX_FUNCTION_CODE_LINES = 60
MAX_WHOLE_MODULE_LINES = 500
"""A module holds one concept in about 400 lines; where one concept needs more, up to
500, its docstring says so with the words "kept whole" (DESIGN.md): the cap serves the
concept, and a module is split where its idea splits, never squeezed to fit."""


def code_lines(lines: list[str], node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines of `node` that hold code: not blank, not a comment, not its docstring."""
    body, skip = node.body, set()
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        if isinstance(body[0].value.value, str):
            skip = set(range(body[0].lineno, (body[0].end_lineno or body[0].lineno) + 1))
    span = range(node.lineno, (node.end_lineno or node.lineno) + 1)
    return sum(
        1
        for i in span
        if i not in skip and lines[i - 1].strip() and not lines[i - 1].strip().startswith("#")
    )


def size_problems(source: str) -> list[str]:
    """A module over `MAX_MODULE_LINES` lines (or over `MAX_WHOLE_MODULE_LINES`, or over
    400 without saying it is kept whole), a function over `MAX_FUNCTION_CODE_LINES`
    lines of code (DESIGN.md: split where the idea splits)."""
    lines, tree = source.splitlines(), ast.parse(source)
    whole = "kept whole" in " ".join((ast.get_docstring(tree) or "").split())
    cap = MAX_WHOLE_MODULE_LINES if whole else MAX_MODULE_LINES
    problems = [f"{len(lines)} lines"] if len(lines) > cap else []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if (n := code_lines(lines, node)) > MAX_FUNCTION_CODE_LINES:
                problems.append(f"{node.name} (line {node.lineno}): {n} lines of code")
    return problems


@pytest.mark.parametrize("module", PACKAGE_FILES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_over_400_lines_and_no_function_over_60_lines_of_code(module):
    assert not size_problems(module.read_text()), size_problems(module.read_text())


def golf_problems(source: str) -> list[str]:
    """Line golf (DESIGN.md): a string (or list) multiplied by a boolean
    (`", held" * bool(n)`), or constants that share a line (`A, B = 1, 2`); two statements on one line are
    ruff's (E701, E702)."""
    problems, tree = [], ast.parse(source)

    def boolean(node: ast.expr) -> bool:
        return (
            isinstance(node, ast.Compare)
            or (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not))
            or (isinstance(node, ast.Call) and getattr(node.func, "id", "") == "bool")
        )

    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            if boolean(node.left) or boolean(node.right):
                problems.append(f"line {node.lineno}: a value multiplied by a boolean")
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Tuple):
            names = [getattr(e, "id", "") for e in node.targets[0].elts]
            if any(n.isupper() for n in names):
                problems.append(f"line {node.lineno}: constants {', '.join(names)} share a line")
    return problems


@pytest.mark.parametrize("module", PACKAGE_FILES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_line_golf(module):
    assert not golf_problems(module.read_text()), golf_problems(module.read_text())


def test_the_golf_checker_sees_a_boolean_string_and_shared_constants():
    assert golf_problems('x = f", {n} held" * bool(n)\n') == [
        "line 1: a value multiplied by a boolean"
    ]
    assert golf_problems("x = held * (n != 1)\n") == ["line 1: a value multiplied by a boolean"]
    assert golf_problems('x = ["--seeds"] * (not s)\n') == [
        "line 1: a value multiplied by a boolean"
    ]
    assert golf_problems("A, B = 1, 2\n") == ["line 1: constants A, B share a line"]
    assert golf_problems('x = "---|" * len(h)\na, b = f()\ny = (k or 1) * n\n') == []


# The package's and the command line's line totals, with headroom for the next feature
# (a cap at today's count breeds line golf). The benchmark harness left (1,182 lines),
# then refusing every hostile input in one line added about 600 (13,748, held at 14,500).
# Then features plugged in rather than threaded through (the chunk a named Module, the
# test program a hook of fit's, a run's kind a record in a module of its own, the data
# set's facts and the fixed views in modules of their own: about +250), 87 packed
# assignments written one a line (+90), and every byte read back checked (checksums of
# the checkpoint's header and the calibration, one lock for every writer, exact names for
# --overwrite, files that land together, the doors, a result that saves itself: about
# +330): 14,928 lines, held at 15,000. DESIGN.md's aim, 13,800, is not reached. Raise it
# only with a reason in the commit. Bringing your own model, optimiser, loss and data
# through `fit` (a module of what a run is built from, the optimiser's one update for any
# Optax transformation, the recipe's loss as one function of the model, a dataset of any
# shape and classes with its labels checked, a conv model's steps written out on a CPU)
# added about 600, of which the test program's thread gave back 45 (15,524 lines); the
# first refusals of a run folder that writes only its own files (links, devices, a run
# inside its teacher's folder, more steps than the step counter holds, a checkpoint's
# header length bounded, a backend JAX_PLATFORMS names but cannot start, the memory a
# process may use, a ceiling on the suspects an audit draws, a folder moved mid-run, a
# float image's scale, a calibrated run's missing calibration) about 175 more: 15,701.
# A run folder's record of what its commands wrote (runs/record.py: claim, seal, what
# --overwrite removes and refuses, the one rule of what an output may replace), which
# replaced the lists of run files by name and clear_run, and each kind declaring its
# files (the sweep's and cv's writers moved into their kinds) added about 300: 16,008,
# 16,025. The doors' checks by default (checks.door: jaxtyping with beartype on the
# public calls, their refusal in one line; Splits and ArrayDataset checked too) about 150
# more: 16,161. A lazy package face (matplotlib, answers, exports and run folders imported
# at first use) 30 more: 16,191. A run's chunks compiled in threads beside its test
# program (step.lower_steps, train.compile_chunks) and beartype imported at a door's first
# call 22 more: 16,222, held at 16,225.
# DESIGN.md's 15,500 is missed.
MAX_PACKAGE_LINES = 16_225
MAX_CLI_LINES = 1_000


def test_the_package_and_its_command_line_hold_their_size():
    def total(files) -> int:
        return sum(len(p.read_text().splitlines()) for p in files)

    package, cli = total(PACKAGE_FILES), total((PACKAGE / "cli").glob("*.py"))
    assert package <= MAX_PACKAGE_LINES, f"the package has {package:,} lines"
    assert cli <= MAX_CLI_LINES, f"cli/ has {cli:,} lines"


def test_the_size_checker_counts_code_not_docstrings_or_comments():
    """The signature counts; the docstring, comments and blank lines do not; a module
    kept whole may run to 500 lines."""
    body = "\n".join(f"    x{i} = {i}" for i in range(60))
    assert size_problems(f"def f():\n{body}\n") == ["f (line 1): 61 lines of code"]
    padded = '    """doc\n\n    more doc"""\n    # a comment\n\n' + "\n".join(
        body.splitlines()[:59]
    )
    assert size_problems(f"def g():\n{padded}\n") == []
    assert size_problems("x = 1\n" * 401) == ["401 lines"]
    whole = '"""One concept,\nkept whole."""\n'
    assert size_problems(whole + "x = 1\n" * 450) == []
    assert size_problems(whole + "x = 1\n" * 499) == ["501 lines"]


def sibling_imports(path: Path) -> set[str]:
    """The modules of its own subpackage a module imports (`from .x import ...`)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            found.update([node.module] if node.module else [a.name for a in node.names])
    return {name.split(".")[0] for name in found}


CLI_SHARED = {"common", "flags"}
CLI_COMMANDS = sorted(
    p.stem for p in (PACKAGE / "cli").glob("*.py") if p.stem not in {"__init__", "command"}
)


@pytest.mark.parametrize("module", sorted(set(CLI_COMMANDS) - CLI_SHARED))
def test_no_command_module_imports_another(module):
    """A command module parses, calls the library and prints; what two commands share
    is the library's (`runs.Run.open`, `answer`), or the consoles and flags."""
    imports = sibling_imports(PACKAGE / "cli" / f"{module}.py")
    assert imports <= CLI_SHARED, f"cli/{module}.py imports cli/{sorted(imports - CLI_SHARED)}"


def test_the_shared_cli_modules_import_no_command_module():
    for module in CLI_SHARED:
        assert sibling_imports(PACKAGE / "cli" / f"{module}.py") <= CLI_SHARED


def test_the_sibling_checker_sees_both_forms(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("from .evaluate import x\nfrom . import export\nfrom ..runs import Run\n")
    assert sibling_imports(probe) == {"evaluate", "export"}


# A run started, trained and finished (`training`), by its kind (one module each, and
# the record they share), and its files (`writing`).
RUNS_WRITE_SIDE = ("training", "one_run", "sweep_run", "cv_run", "kind", "writing")


@pytest.mark.parametrize(
    "module", sorted(p.stem for p in (PACKAGE / "runs").glob("*.py") if p.stem != "__init__")
)
def test_the_read_side_of_runs_never_imports_the_write_side(module):
    """`runs/training.py` starts, resumes, trains and finishes a run by its kind (the
    kinds' modules, over `runs/kind.py`) over `runs/writing.py` (the folder's files), and
    reads a run back through `runs/reading.py`; nothing else in `runs/` imports the write
    side, so reading a run never drags in the code that writes one."""
    imports = sibling_imports(PACKAGE / "runs" / f"{module}.py")
    allowed = (
        set(RUNS_WRITE_SIDE[RUNS_WRITE_SIDE.index(module) + 1 :])
        if module in (RUNS_WRITE_SIDE)
        else set()
    )
    wrong = (imports & set(RUNS_WRITE_SIDE)) - allowed
    assert not wrong, f"runs/{module}.py imports the write side: {sorted(wrong)}"


def test_every_module_has_a_test_file_of_its_own():
    """`eqx_fmnist/x.py` (or the subpackage `x/`) is tested in `tests/test_x.py`, and each
    module `m` of `runs/` in `tests/test_runs_m.py`, as Optax pairs `transform.py` with
    `transform_test.py`: where to look is never a guess."""
    tests, by_module = Path(__file__).parent, ["runs"]
    wanted = [f"test_{m}.py" for m in LAYERS if m not in by_module]
    wanted += [f"test_{d}_{p.stem}.py" for d in by_module for p in (PACKAGE / d).glob("[!_]*.py")]
    missing = [name for name in wanted if not (tests / name).is_file()]
    assert not missing, f"missing: {missing}"


THIRD_PARTY_AT_IMPORT = {
    *("jax", "jaxlib", "equinox", "optax", "jaxtyping", "numpy"),
    *("ml_dtypes", "opt_einsum", "typing_extensions", "wadler_lindig", "absl", "cloudpickle"),
    *("flatbuffers", "pygments", "scipy"),
}
"""What `import eqx_fmnist` may import besides the standard library: JAX, Equinox, Optax,
jaxtyping, numpy and what they import themselves (beartype waits for a door's first
call)."""
NOT_AT_IMPORT = {"answers", "attributions", "audit", "export", "plots", "runs", "cli"}
"""The library's parts that wait for their first use (matplotlib, PIL, rich, ONNX,
safetensors and cleanlab come with them)."""


def test_import_eqx_fmnist_costs_nothing_it_does_not_use():
    """`import eqx_fmnist` imports the allow-list's packages and none of the library's
    figures, answers, exports, run folders or command line; `ef.runs` then imports it."""
    import json
    import subprocess
    import sys

    code = (
        "import json, sys; before = set(sys.modules); import eqx_fmnist as ef; "
        "after = sorted(set(sys.modules) - before); ef.runs; ef.answer; "
        "print(json.dumps([after, 'eqx_fmnist.runs' in sys.modules]))"
    )
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    imported, runs_later = json.loads(ran.stdout)
    top = {m.split(".")[0] for m in imported} - set(sys.stdlib_module_names)
    third_party = {m for m in top if not m.startswith(("_", "cython")) and m != "eqx_fmnist"}
    assert third_party <= THIRD_PARTY_AT_IMPORT, third_party - THIRD_PARTY_AT_IMPORT
    ours = {m.split(".")[1] for m in imported if m.startswith("eqx_fmnist.")}
    assert not ours & NOT_AT_IMPORT, ours & NOT_AT_IMPORT
    assert runs_later
