"""Each tutorial as a notebook (`hooks/notebooks.py`): its code cells are its page's
executed blocks, its links point where a notebook can follow them, the copies committed
under `docs/notebooks/` are the pages', and the site build runs each one in a fresh
kernel and builds the page from that run."""

import base64
import html
import importlib.util
import os
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.docs  # the documentation tier: what the pages and scripts show

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = sorted((ROOT / "docs" / "tutorials").glob("*.md"))
COMMITTED = ROOT / "docs" / "notebooks"
FENCE = re.compile(r"^```python ([^\n]*exec=\"on\"[^\n]*)\n(.*?)^```$", re.M | re.S)


def hook():
    spec = importlib.util.spec_from_file_location("notebooks", ROOT / "hooks" / "notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("page", TUTORIALS, ids=lambda p: p.stem)
def test_a_notebooks_code_is_its_pages_code(page):
    """Code cells are the page's blocks, in order; a figure printed for the page is
    displayed instead, and nothing else changes."""
    text = page.read_text()
    notebook = hook().page_to_notebook(text)
    code = [c.source for c in notebook.cells if c.cell_type == "code"]
    blocks = FENCE.findall(text)
    assert len(code) == len(blocks)
    for cell, (options, block) in zip(code, blocks, strict=True):
        if 'html="true"' in options:
            assert "print(" in block and "display(" not in block
            assert "display(" in cell and "figure_to_html(" in cell
            cell = re.sub(r"\bdisplay(\(\s*figure_to_html\()", r"print\1", cell)
        assert cell == block.rstrip("\n")
    prose = " ".join(c.source for c in notebook.cells if c.cell_type == "markdown")
    assert text.splitlines()[0] in prose  # the title and the prose come along
    assert 'exec="on"' not in prose  # no executed block left behind as text


@pytest.mark.parametrize("page", TUTORIALS, ids=lambda p: p.stem)
def test_a_notebooks_links_and_includes_are_ones_it_can_follow(page):
    """No cross-reference, include or `.md` link arrives raw: cross-references point at
    the site's API page of the module that documents them, tutorials at their notebooks,
    images at files that exist beside the committed notebook."""
    notebook = hook().page_to_notebook(page.read_text())
    prose = "\n".join(c.source for c in notebook.cells if c.cell_type == "markdown")
    assert "][eqx_fmnist" not in prose and "--8<--" not in prose
    assert not re.findall(r"\]\((?!https?:)[^)\s]*\.md[)#]", prose)
    for api, name in re.findall(r"\]\(\.\./api/([\w-]+)/#([\w.]+)\)", prose):
        documented = (ROOT / "docs" / "api" / f"{api}.md").read_text()
        module = re.findall(r"^::: ([\w.]+)", documented, re.M)
        assert any(name == m or name.startswith(m + ".") for m in module), name
    for target in re.findall(r"\]\(([\w-]+)\.ipynb", prose):
        assert (COMMITTED / f"{target}.ipynb").is_file(), target
    for image in re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", prose):
        assert (COMMITTED / image).resolve().is_file(), image
    if page.stem == "18-distillation":  # its two results tables, inlined
        assert (ROOT / "benchmarks/results/distill_recipe.md").read_text().strip() in prose


def test_a_notebook_names_the_extras_its_code_needs():
    notebooks = {p.stem: hook().page_to_notebook(p.read_text()) for p in TUTORIALS}
    first = {stem: nb.cells[0].source for stem, nb in notebooks.items()}
    assert "pip install -e '.[onnx]'" in first["15-taking-the-model-out"]
    assert "audit" in first["17-many-folds"]
    assert "pip install -e ." in first["01-data"] and "[" not in first["01-data"]


def test_the_committed_notebooks_are_the_pages(tmp_path):
    """`docs/notebooks/` holds each tutorial's notebook as the hook makes it from the page
    today, with the outputs of one run stored in it (no error among them) and the
    machine it ran on named in its first cell: after a page changes, build the site and
    run `python hooks/notebooks.py --outputs site`."""
    import nbformat

    notebooks = hook()
    assert sorted(p.name for p in COMMITTED.glob("*.ipynb")) == [
        f"{p.stem}.ipynb" for p in TUTORIALS
    ]
    for page in TUTORIALS:
        stored = nbformat.read(COMMITTED / f"{page.stem}.ipynb", as_version=4)
        machine = stored.metadata["eqx_fmnist"]["machine"]
        expected = notebooks.page_to_notebook(page.read_text(), made_on=machine)
        cells = [(c.cell_type, c.source) for c in stored.cells]
        stale = cells != [(c.cell_type, c.source) for c in expected.cells]
        assert not stale, (
            f"{page.stem} is stale: mkdocs build, then python hooks/notebooks.py --outputs "
            "site (or --keep-outputs, when only its prose changed)"
        )
        assert machine in stored.cells[0].source
        _check_executed(stored, page.stem)
        assert any(c.outputs for c in stored.cells if c.cell_type == "code"), page.stem


NUMBER = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?(?:e-?\d+)?(?![\w])")


def _numbers(text: str) -> list[tuple[float, float]]:
    """Each decimal number printed in `text`, and half a unit of its last printed digit
    (an address such as 0x7f.. is not a number)."""
    found = []
    for token in NUMBER.findall(re.sub(r"0x[0-9a-f]+", "", text)):
        decimals = len(token.split(".")[1].split("e")[0]) if "." in token else 0
        found.append((float(token.replace(",", "")), 0.5 * 10.0**-decimals))
    return found


@pytest.mark.slow  # a fresh kernel, the tutorial's code compiled as a reader's is
@pytest.mark.optimized
def test_a_stored_notebooks_printed_numbers_are_what_its_code_prints_now(real_data, monkeypatch):
    """Tutorial 2's stored outputs, run again in a fresh kernel: every printed number
    agrees with the stored one to within two units of its last printed digit (the
    rounding of another CPU's float sums), and the printed words are the same."""
    import nbformat

    monkeypatch.setenv("EQX_FMNIST_DATA", str(real_data.source))
    stored = nbformat.read(COMMITTED / "02-model-and-gradients.ipynb", as_version=4)
    again = nbformat.read(COMMITTED / "02-model-and-gradients.ipynb", as_version=4)
    hook().run_notebook(again, timeout=600)

    def printed(notebook) -> list[str]:
        return [
            "".join(o.get("text", "") for o in c.outputs if o.output_type == "stream")
            for c in notebook.cells
            if c.cell_type == "code"
        ]

    for was, now in zip(printed(stored), printed(again), strict=True):
        assert NUMBER.sub("#", re.sub(r"0x[0-9a-f]+", "", was)) == NUMBER.sub(
            "#", re.sub(r"0x[0-9a-f]+", "", now)
        ), (was, now)
        for (a, unit), (b, _) in zip(_numbers(was), _numbers(now), strict=True):
            assert abs(a - b) <= 4 * unit + 1e-6 * abs(a), (a, b, was)


def test_a_page_is_built_from_its_notebooks_outputs():
    """Text output in a `text` block under the code, a displayed figure as an inline
    `<img>` (the PNG the figure object gave), a hidden block's output alone, and the
    page's code as written (`print`), not the notebook's `display`."""
    import nbformat
    from IPython.core.formatters import DisplayFormatter

    from eqx_fmnist.plots import figure_to_html, plot_throughput

    notebooks = hook()
    page = (
        "# T\n\n"
        '```python exec="on" source="above" session="s" result="text"\nprint("hi")\n```\n\n'
        "between\n\n"
        '```python exec="on" session="s" html="true"\nprint(figure_to_html(fig, alt="a b"))\n```\n'
    )
    notebook = notebooks.page_to_notebook(page)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert code[1].source == 'display(figure_to_html(fig, alt="a b"))'
    figure = figure_to_html(plot_throughput(["x"], [1.0]), alt="a b")
    data, _ = DisplayFormatter().format(figure)  # what IPython's display() sends
    assert data["text/plain"] == "a b"
    png = (
        base64.b64decode(data["image/png"])
        if isinstance(data["image/png"], str)
        else data["image/png"]
    )
    assert png.startswith(b"\x89PNG") and png in base64.b64decode(str(figure).split(",")[1][:-2])
    code[0].outputs = [nbformat.v4.new_output("stream", name="stdout", text="hi\n")]
    image = {"image/png": base64.b64encode(png).decode(), "text/plain": "a b"}
    code[1].outputs = [nbformat.v4.new_output("display_data", data=image)]
    notebooks._executed["t"] = notebook

    class File:
        src_path = "tutorials/t.md"

    class Page:
        file = File()

    built = notebooks.on_page_markdown(page, Page(), {}, None)
    assert built.startswith("# T\n") and "../../notebooks/t.ipynb" in built
    assert '```python\nprint("hi")\n```\n\n```text\nhi\n```' in built
    assert f'<img alt="a b" src="data:image/png;base64,{image["image/png"]}">' in built
    assert "figure_to_html" not in built  # the hidden block shows its output only
    assert "between" in built and 'exec="on"' not in built


def _check_executed(notebook, stem):
    """Every code cell ran, in order, without an error; a figure cell shows a PNG."""
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1)), stem
    outputs = [o for c in code for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"], stem
    for cell in code:
        if cell.metadata["page_block"].get("html") == "true":
            kinds = [o.output_type for o in cell.outputs if "image/png" in o.get("data", {})]
            assert kinds and set(kinds) == {"display_data"}, stem


@pytest.mark.skipif(not os.environ.get("EQX_FMNIST_SITE"), reason="needs a built site")
@pytest.mark.parametrize("page", TUTORIALS, ids=lambda p: p.stem)
def test_the_site_serves_each_notebook_as_run_in_a_fresh_kernel(page):
    """The site build ran each tutorial's notebook end to end in a fresh kernel
    (`EQX_FMNIST_SITE`, as `.ci/run` sets it): what it serves is that run."""
    import nbformat

    served = Path(os.environ["EQX_FMNIST_SITE"]) / "notebooks" / f"{page.stem}.ipynb"
    notebook = nbformat.read(served, as_version=4)
    _check_executed(notebook, page.stem)
    assert notebook.metadata["eqx_fmnist"]["seconds"] > 0
    # The page shows that run's output: each cell's first printed line.
    built = (served.parents[1] / "tutorials" / page.stem / "index.html").read_text()
    for cell in notebook.cells:
        printed = [o.text for o in cell.get("outputs", []) if o.output_type == "stream"]
        if "".join(printed).strip():
            first = "".join(printed).strip().splitlines()[0]
            assert html.escape(first[:40], quote=False) in built, (page.stem, first)


@pytest.mark.slow
def test_the_first_tutorial_runs_end_to_end_in_a_kernel(real_data, monkeypatch):
    """Tutorial 1 as a reader opens it: a fresh Jupyter kernel, every cell in order, its
    figure a PNG."""
    import nbformat

    monkeypatch.setenv("EQX_FMNIST_DATA", str(real_data.source))
    notebook = nbformat.read(COMMITTED / "01-data.ipynb", as_version=4)
    hook().run_notebook(notebook, timeout=600)
    _check_executed(notebook, "01-data")
    text = "".join(o.get("text", "") for c in notebook.cells for o in c.get("outputs", []))
    assert "train images (60000, 28, 28) uint8" in text and "traced for" in text
    assert f"found in {real_data.source}" in text  # the kernel found the data as told


def test_notebooks_made_again_keeping_their_outputs_are_the_committed_ones(tmp_path):
    """`python hooks/notebooks.py --keep-outputs` (the pages' prose changed, not their
    code) takes each stored notebook's outputs into the notebook made from its page:
    made so from today's pages, every notebook is the committed file, output for
    output; and a page whose code no longer matches its stored notebook is refused."""
    import json
    import shutil

    notebooks = hook()
    written = notebooks.write_committed(folder=tmp_path / "made", outputs=COMMITTED)
    assert len(written) == len(TUTORIALS)
    for path in written:
        assert json.loads(path.read_text()) == json.loads((COMMITTED / path.name).read_text())
    other = tmp_path / "other"
    shutil.copytree(COMMITTED, other)
    first = json.loads((other / "02-model-and-gradients.ipynb").read_text())
    code = next(c for c in first["cells"] if c["cell_type"] == "code")
    code["source"] = "print('other code')"
    (other / "02-model-and-gradients.ipynb").write_text(json.dumps(first))
    with pytest.raises(SystemExit, match="ran other code than"):
        notebooks.write_committed(folder=tmp_path / "again", outputs=other)


def test_the_keep_outputs_command_leaves_current_notebooks_as_they_are(tmp_path):
    """`python hooks/notebooks.py --keep-outputs`, as contributing.md shows it, run in a
    copy of the pages, the notebooks and the results they include: with every page
    current, it writes each notebook back byte for byte."""
    import shutil
    import subprocess
    import sys

    for part in ("hooks", "docs", "benchmarks/results"):
        shutil.copytree(ROOT / part, tmp_path / part)
    done = subprocess.run(
        [sys.executable, "hooks/notebooks.py", "--keep-outputs"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.split()) == len(TUTORIALS)
    for stored in COMMITTED.glob("*.ipynb"):
        made = tmp_path / "docs" / "notebooks" / stored.name
        assert made.read_bytes() == stored.read_bytes(), stored.name


def test_the_build_runs_the_longest_notebooks_first(tmp_path, monkeypatch):
    """`on_pre_build` starts the pages' kernels in the order of the seconds their stored
    notebooks record (read here from the files' JSON), longest first; a page without a
    stored notebook counts 0."""
    import json

    import nbformat

    notebooks = hook()
    started = []

    def execute(page):
        started.append(page.stem)
        return nbformat.v4.new_notebook(), 0.0

    monkeypatch.setattr(notebooks, "_executed_notebook", execute)
    monkeypatch.setenv("EQX_FMNIST_NOTEBOOK_JOBS", "1")
    notebooks.on_pre_build({"docs_dir": str(ROOT / "docs")})
    recorded = {
        page.stem: json.loads((COMMITTED / f"{page.stem}.ipynb").read_text())["metadata"][
            "eqx_fmnist"
        ]["seconds"]
        for page in TUTORIALS
    }
    assert [notebooks.stored_seconds(page) for page in TUTORIALS] == list(recorded.values())
    assert notebooks.stored_seconds(tmp_path / "no-such-page.md") == 0.0
    assert started == sorted(recorded, key=lambda stem: -recorded[stem])
    assert set(notebooks._executed) == set(recorded)  # every page's notebook, each once
