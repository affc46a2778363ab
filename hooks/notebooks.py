"""Each tutorial as a Jupyter notebook, run once in a fresh kernel, and its page built from
that run.

The page's executed blocks (```python exec="on" ...```) become code cells, in order; the
prose and every other block become markdown cells between them, with what a notebook
cannot follow made plain: `--8<--` includes inlined, `[text][eqx_fmnist.x]`
cross-references and links to other pages pointed at the site's pages, and a figure
printed as an `<img>` tag for the page displayed instead (`print(figure_to_html(...))`
becomes `display(figure_to_html(...))`, which a notebook shows as a PNG). The first cell names the install a notebook needs, its
extras included.

When the site is built, every tutorial's notebook is executed in a fresh kernel (the
reader's way, one session per page) before any page is rendered, and each page's blocks
are replaced by their code and that run's outputs: the code runs once, not once for the
page and again for the notebook. The site serves the executed notebooks at
`notebooks/<page>.ipynb`. The same notebooks are committed under `docs/notebooks/` with
the outputs of one build stored in them, so that a reader sees them without building:
`mkdocs build`, then `python hooks/notebooks.py --outputs site` (its first cell names the
machine). Tests keep their code equal to the pages', and run one again to check that its
stored numbers are what its code prints now.
"""

import concurrent.futures
import logging
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
EXEC_BLOCK = re.compile(r"^```python ([^\n]*exec=\"on\"[^\n]*)\n(.*?)^```\n?", re.M | re.S)
OPTION = re.compile(r'(\w+)="([^"]*)"')
SNIPPET = re.compile(r'^--8<-- "([^"]+)"\s*$', re.M)
CROSS_REF = re.compile(r"\[([^\]]+)\]\[(eqx_fmnist[\w.]*)\]")
PAGE_LINK = re.compile(r"\]\((?!https?:|#)([^)#\s]+\.md)(#[^)\s]*)?\)")
FIGURE_CALL = re.compile(r"\b(print|display)(\(\s*figure_to_html\()")
# What a page's code imports beyond the core library, and the extra that installs it.
EXTRAS = {"onnx": ("onnx", "onnxruntime"), "audit": ("cleanlab", "audit_labels")}
log = logging.getLogger("mkdocs.hooks.notebooks")


def install_note(markdown: str) -> str:
    """The first cell: what the notebook needs installed, with the extras its code uses."""
    code = "\n".join(m.group(2) for m in EXEC_BLOCK.finditer(markdown))
    extras = [name for name, words in EXTRAS.items() if any(w in code for w in words)]
    command = f"pip install -e '.[{','.join(extras)}]'" if extras else "pip install -e ."
    return (
        "This notebook is the page of the same name in eqx_fmnist's documentation. Install "
        f"the library into the kernel's environment first (from a checkout: `{command}`); "
        "it finds the data as the library does (downloading them if need be)."
    )


def api_pages() -> dict[str, str]:
    """Each documented module (`::: eqx_fmnist.x` in `docs/api/`) and its API page."""
    pages = {}
    for page in sorted((DOCS / "api").glob("*.md")):
        for name in re.findall(r"^::: ([\w.]+)", page.read_text(), re.M):
            pages[name] = page.stem
    return pages


def resolve_links(text: str, pages: dict[str, str]) -> str:
    """A markdown cell's cross-references and page links as links into the site (seen from
    `notebooks/`); a tutorial's link goes to its notebook, the file beside this one."""

    def cross_ref(match: re.Match) -> str:
        label, name = match.groups()
        owners = [m for m in pages if name == m or name.startswith(m + ".")]
        if not owners:
            raise ValueError(f"no API page documents {name!r} (docs/api/*.md)")
        return f"[{label}](../api/{pages[max(owners, key=len)]}/#{name})"

    def page_link(match: re.Match) -> str:
        path, anchor = match.group(1), match.group(2) or ""
        if "/" not in path:  # another tutorial: its notebook
            return f"]({path[: -len('.md')]}.ipynb{anchor})"
        target = path.removeprefix("../").removesuffix(".md")
        target = "" if target == "index" else f"{target}/"
        return f"](../{target}{anchor})"

    return PAGE_LINK.sub(page_link, CROSS_REF.sub(cross_ref, text))


def inline_snippets(text: str) -> str:
    return SNIPPET.sub(lambda m: (ROOT / m.group(1)).read_text().rstrip("\n"), text)


def notebook_code(code: str, options: dict[str, str]) -> str:
    """A block's code as a notebook runs it: a figure printed for the page is displayed."""
    code = code.rstrip("\n")
    if options.get("html") == "true":
        code = FIGURE_CALL.sub(r"display\2", code)
    return code


def page_to_notebook(markdown: str, made_on: str | None = None) -> nbformat.NotebookNode:
    """The notebook of one page: its executed blocks as code cells (each keeping its
    block's options in its metadata), the rest as markdown; `made_on`: the machine its
    stored outputs were made on, which the first cell names."""
    pages = api_pages()
    first = install_note(markdown)
    if made_on is not None:
        first += f" {STORED_OUTPUTS.format(machine=made_on)}"
    cells = [nbformat.v4.new_markdown_cell(first)]

    def prose(text: str) -> None:
        if text.strip():
            cells.append(
                nbformat.v4.new_markdown_cell(resolve_links(inline_snippets(text.strip()), pages))
            )

    at = 0
    for match in EXEC_BLOCK.finditer(markdown):
        prose(markdown[at : match.start()])
        options = dict(OPTION.findall(match.group(1)))
        cell = nbformat.v4.new_code_cell(notebook_code(match.group(2), options))
        cell.metadata["page_block"] = options
        cells.append(cell)
        at = match.end()
    prose(markdown[at:])
    for i, cell in enumerate(cells):
        cell.id = f"cell-{i}"  # stable, so the committed copy is written alike each time
    notebook = nbformat.v4.new_notebook(cells=cells)
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    return notebook


def run_notebook(notebook: nbformat.NotebookNode, *, timeout: int = 1200) -> float:
    """Execute `notebook` in place in a fresh kernel started in the project's root (where
    the site build runs a page's code); returns the seconds it took. A cell's error
    raises, naming the cell."""
    from nbclient import NotebookClient

    start = time.perf_counter()
    NotebookClient(
        notebook,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(ROOT)}},
    ).execute()
    return time.perf_counter() - start


def rendered(cell: nbformat.NotebookNode) -> str:
    """A code cell as the page shows it: its code (unless the block hides it), then its
    outputs as the block asked (text in a `text` block, HTML as is, else Markdown)."""
    options = cell.metadata["page_block"]
    code = cell.source
    if options.get("html") == "true":
        code = FIGURE_CALL.sub(r"print\2", code)
    parts = [f"```python\n{code}\n```"] if options.get("source") == "above" else []
    text, html = [], []
    for out in cell.outputs:
        if out.output_type == "stream" and out.name == "stdout":
            text.append(out.text)
        elif "image/png" in out.get("data", {}):
            alt = out.data.get("text/plain", "figure").strip("'\"")
            html.append(f'<img alt="{alt}" src="data:image/png;base64,{out.data["image/png"]}">')
    printed = "".join(text).rstrip("\n")
    if options.get("result") == "text":
        parts.append(f"```text\n{printed}\n```" if printed else "")
    else:
        parts.append("\n".join(html) if html else printed)
    return "\n\n".join(p for p in parts if p) + "\n"


def is_tutorial(src_path: str) -> bool:
    return src_path.replace("\\", "/").startswith("tutorials/")


_executed: dict[str, nbformat.NotebookNode] = {}


def _executed_notebook(page: Path) -> tuple[nbformat.NotebookNode, float]:
    notebook = page_to_notebook(page.read_text())
    return notebook, run_notebook(notebook)


def stored_seconds(page: Path) -> float:
    """How long the page's notebook ran when its outputs were stored (`0.0` if unknown)."""
    try:
        stored = nbformat.read(DOCS / "notebooks" / f"{page.stem}.ipynb", as_version=4)
        return float(stored.metadata["eqx_fmnist"]["seconds"])
    except (OSError, KeyError, TypeError, ValueError):
        return 0.0


def on_pre_build(config):
    """Run every tutorial's notebook, each in a fresh kernel, before any page is built:
    `$EQX_FMNIST_NOTEBOOK_JOBS` at a time (default: one per CPU core, at most 4), each
    kernel its own process, the longest first (by the stored notebooks' times), so that
    no long one starts last while the other kernels have finished."""
    _executed.clear()
    pages = sorted((Path(config["docs_dir"]) / "tutorials").glob("*.md"))
    pages.sort(key=stored_seconds, reverse=True)
    jobs = int(os.environ.get("EQX_FMNIST_NOTEBOOK_JOBS") or min(4, os.cpu_count() or 1))
    with concurrent.futures.ThreadPoolExecutor(max(1, jobs)) as pool:
        ran = pool.map(_executed_notebook, pages)
        for page, (notebook, seconds) in zip(pages, ran, strict=True):
            log.info("notebook %s ran in a fresh kernel in %.1f s", page.stem, seconds)
            notebook.metadata["eqx_fmnist"] = {"seconds": round(seconds, 1)}
            _executed[page.stem] = notebook


def on_page_markdown(markdown, page, config, files):
    """A tutorial's blocks replaced by their code and its notebook's outputs, and a link
    to the notebook under the title."""
    if not is_tutorial(page.file.src_path):
        return markdown
    stem = Path(page.file.src_path).stem
    cells = iter(c for c in _executed[stem].cells if c.cell_type == "code")
    markdown = EXEC_BLOCK.sub(lambda m: rendered(next(cells)), markdown)
    link = (
        f'<p class="notebook-link"><a href="../../notebooks/{stem}.ipynb" download>'
        "Download this page as a Jupyter notebook</a> (run; its outputs are this page's)</p>"
    )
    title, _, rest = markdown.partition("\n")
    return f"{title}\n\n{link}\n{rest}"


def on_post_build(config):
    """Write every tutorial's executed notebook into the site."""
    out = Path(config["site_dir"]) / "notebooks"
    out.mkdir(parents=True, exist_ok=True)
    for stem, notebook in _executed.items():
        nbformat.write(notebook, out / f"{stem}.ipynb")


STORED_OUTPUTS = (
    "The outputs stored in it were made on {machine}, by `mkdocs build` (which runs each "
    "tutorial's notebook in a fresh kernel) and then `python hooks/notebooks.py --outputs "
    "site`."
)
"""What the first cell of a notebook stored with outputs says of them."""


def this_machine() -> str:
    """The CPU, its cores and JAX's version and backend: what a stored output ran on."""
    import jax

    from eqx_fmnist.hardware import cpu_info

    model = (cpu_info() or ("an unknown CPU",))[0]
    return f"{model} ({os.cpu_count()} cores, JAX {jax.__version__} on {jax.default_backend()})"


def write_committed(folder: Path = DOCS / "notebooks", outputs: Path | None = None) -> list[Path]:
    """The notebooks as committed under `docs/notebooks/`: without outputs, or with those
    of the executed notebooks in `outputs` (a built site's `notebooks/`, or the stored
    notebooks themselves), which must hold the same code, and the machine they ran on
    named in the first cell (the one a stored notebook names, else this one)."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for page in sorted((DOCS / "tutorials").glob("*.md")):
        path = folder / f"{page.stem}.ipynb"
        notebook = page_to_notebook(page.read_text())
        if outputs is not None:
            ran = nbformat.read(outputs / path.name, as_version=4)
            # Outputs kept from a stored notebook keep the machine that made them.
            machine = ran.metadata.get("eqx_fmnist", {}).get("machine") or this_machine()
            notebook = page_to_notebook(page.read_text(), made_on=machine)
            mine = [c for c in notebook.cells if c.cell_type == "code"]
            theirs = [c for c in ran.cells if c.cell_type == "code"]
            if [c.source for c in mine] != [c.source for c in theirs]:
                raise SystemExit(f"{outputs / path.name} ran other code than {page}: build again")
            for cell, done in zip(mine, theirs, strict=True):
                cell.outputs, cell.execution_count = done.outputs, done.execution_count
            notebook.metadata["eqx_fmnist"] = {
                **ran.metadata.get("eqx_fmnist", {}),
                "machine": machine,
            }
        nbformat.write(notebook, path)
        written.append(path)
    return written


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Write docs/notebooks/ from the tutorials.")
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--outputs", type=Path, help="a built site: store its executed notebooks' outputs"
    )
    source.add_argument(
        "--keep-outputs",
        action="store_true",
        help="keep the outputs the committed notebooks hold (only the prose changed)",
    )
    args = parser.parse_args()
    executed = None if args.outputs is None else args.outputs / "notebooks"
    with tempfile.TemporaryDirectory() as kept:
        if args.keep_outputs:  # the committed notebooks read before any is rewritten
            for notebook in (DOCS / "notebooks").glob("*.ipynb"):
                shutil.copy(notebook, kept)
            executed = Path(kept)
        for path in write_committed(outputs=executed):
            print(path.relative_to(ROOT))
