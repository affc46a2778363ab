"""Each tutorial as a Jupyter notebook, made from its page when the site is built.

The page's executed blocks (```python exec="on" ...```) become code cells, in order and
unchanged; the prose and every other block become markdown cells between them. The site
serves the notebooks at `notebooks/<page>.ipynb`, and each tutorial links to its own.
`tests/test_notebooks.py` checks that a notebook's code is its page's code and runs one
end to end in a Jupyter kernel.
"""

import re
from pathlib import Path

import nbformat

EXEC_BLOCK = re.compile(r"^```python ([^\n]*exec=\"on\"[^\n]*)\n(.*?)^```\n?", re.M | re.S)
INSTALL = (
    "This notebook is made from the page of the same name in eqx_fmnist's documentation. "
    "It needs the library installed in the kernel's environment (from a checkout: "
    "`pip install -e .`) and finds the data as the library does (downloading them if "
    "need be)."
)


def page_to_notebook(markdown: str) -> nbformat.NotebookNode:
    """The notebook of one page: its executed blocks as code cells, the rest as markdown."""
    cells = [nbformat.v4.new_markdown_cell(INSTALL)]
    at = 0
    for match in EXEC_BLOCK.finditer(markdown):
        prose = markdown[at : match.start()].strip()
        if prose:
            cells.append(nbformat.v4.new_markdown_cell(prose))
        cells.append(nbformat.v4.new_code_cell(match.group(2).rstrip("\n")))
        at = match.end()
    if markdown[at:].strip():
        cells.append(nbformat.v4.new_markdown_cell(markdown[at:].strip()))
    notebook = nbformat.v4.new_notebook(cells=cells)
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    return notebook


def is_tutorial(src_path: str) -> bool:
    return src_path.replace("\\", "/").startswith("tutorials/")


def on_page_markdown(markdown, page, config, files):
    """A link to the page's notebook under its title."""
    if not is_tutorial(page.file.src_path):
        return markdown
    stem = Path(page.file.src_path).stem
    link = (
        f'<p class="notebook-link"><a href="../../notebooks/{stem}.ipynb" download>'
        "Download this page as a Jupyter notebook</a></p>"
    )
    title, _, rest = markdown.partition("\n")
    return f"{title}\n\n{link}\n{rest}"


def on_post_build(config):
    """Write every tutorial's notebook into the site."""
    docs, site = Path(config["docs_dir"]), Path(config["site_dir"])
    out = site / "notebooks"
    out.mkdir(parents=True, exist_ok=True)
    for page in sorted((docs / "tutorials").glob("*.md")):
        nbformat.write(page_to_notebook(page.read_text()), out / f"{page.stem}.ipynb")
