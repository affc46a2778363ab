"""Each tutorial as a notebook (`hooks/notebooks.py`, run by the site build): its code
cells are its page's executed blocks, and one notebook runs end to end in a kernel."""

import importlib.util
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.docs  # the documentation tier: what the pages and scripts show

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = sorted((ROOT / "docs" / "tutorials").glob("*.md"))
FENCE = re.compile(r"^```python [^\n]*exec=\"on\"[^\n]*\n(.*?)^```$", re.M | re.S)


def hook():
    spec = importlib.util.spec_from_file_location("notebooks", ROOT / "hooks" / "notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("page", TUTORIALS, ids=lambda p: p.stem)
def test_a_notebooks_code_is_its_pages_code(page):
    text = page.read_text()
    notebook = hook().page_to_notebook(text)
    code = [c.source for c in notebook.cells if c.cell_type == "code"]
    assert code == [block.rstrip("\n") for block in FENCE.findall(text)]
    prose = " ".join(c.source for c in notebook.cells if c.cell_type == "markdown")
    assert text.splitlines()[0] in prose  # the title and the prose come along
    assert 'exec="on"' not in prose  # no executed block left behind as text


def test_the_hook_writes_one_notebook_per_tutorial_and_links_each(tmp_path):
    import nbformat

    notebooks = hook()
    notebooks.on_post_build({"docs_dir": str(ROOT / "docs"), "site_dir": str(tmp_path)})
    written = sorted(p.stem for p in (tmp_path / "notebooks").glob("*.ipynb"))
    assert written == [p.stem for p in TUTORIALS]
    nbformat.validate(nbformat.read(tmp_path / "notebooks" / "01-data.ipynb", as_version=4))

    class File:
        src_path = "tutorials/01-data.md"

    class Page:
        file = File()

    linked = notebooks.on_page_markdown("# 1. Data\n\ntext", Page(), {}, None)
    assert linked.startswith("# 1. Data\n") and "../../notebooks/01-data.ipynb" in linked


@pytest.mark.slow
def test_the_first_tutorial_runs_end_to_end_in_a_kernel(real_data, monkeypatch):
    """Tutorial 1 as a reader opens it: a fresh Jupyter kernel, every cell in order."""
    from nbclient import NotebookClient

    monkeypatch.setenv("EQX_FMNIST_DATA", str(real_data.source))
    notebook = hook().page_to_notebook((ROOT / "docs" / "tutorials" / "01-data.md").read_text())
    NotebookClient(notebook, timeout=600, kernel_name="python3").execute()
    outputs = [o for c in notebook.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs)
    assert "train images (60000, 28, 28) uint8" in text and "traced for" in text
    assert f"found in {real_data.source}" in text  # the kernel found the data as told
