"""The tutorials' code runs under pytest too, so a broken page fails without building.

Each page's ```python exec="on"``` blocks run in order, one namespace per markdown-exec
session, as the site build runs them, in their quick form: the same code on a slice of
the data (16,000 training and 2,000 test images), so that an epoch is 31 steps; the site
build runs them on all of it. These tests are the documentation tier
(`python -m pytest -m docs`). `mkdocs build --strict` in `.ci/run` is the other
half: it renders the pages and fails on any warning. A page's code runs once per CI run:
`.ci/run` builds the site first and sets `EQX_FMNIST_SITE` to it, and then this test
checks each page as the build ran it (the same checks, on the built HTML) instead of
running its code a second time.
"""

import contextlib
import html
import io
import os
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.docs  # the documentation tier: what the pages and scripts show

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs").rglob("*.md"))
# The slice a page's quick form reads: enough for its largest held-out split (tutorial
# 11's 10,000 validation images) and some left to train on.
QUICK_TRAIN, QUICK_TEST = 16_000, 2_000
FENCE = re.compile(r"^```python ([^\n]*exec=\"on\"[^\n]*)\n(.*?)^```$", re.M | re.S)


def exec_blocks(page: Path) -> list[tuple[str, str, str]]:
    """(session, options, code) of every executed block of `page`."""
    blocks = []
    for options, code in FENCE.findall(page.read_text()):
        session = re.search(r'session="([^"]+)"', options)
        blocks.append((session.group(1) if session else f"#{len(blocks)}", options, code))
    return blocks


def test_the_finder_sees_the_tutorials():
    """Every tutorial the site's navigation lists is a page the finder runs, each with
    executed code, and no tutorial page is left out of the navigation."""
    tutorials = [p for p in PAGES if "tutorials" in p.parts]
    listed = re.findall(r"(tutorials/[\w-]+\.md)", (ROOT / "mkdocs.yml").read_text())
    assert sorted(ROOT / "docs" / name for name in listed) == tutorials
    assert all(exec_blocks(p) for p in tutorials)


def built_page(site: Path, page: Path) -> Path:
    """Where mkdocs puts `page` in the built `site`."""
    relative = page.relative_to(ROOT / "docs").with_suffix("")
    return site / ("index.html" if relative.name == "index" else relative / "index.html")


SHOWN = {
    # The quickstart trains, saves, loads and names five images.
    "quickstart": [
        r"test accuracy 0\.\d{4} on [\d,]+ images",
        r"(\s+\w[\w/ -]*  \(true: .*\)\n){5}",
    ],
    # Tutorial 4's trap, as it is: the program traced with the old global runs again.
    "04-one-epoch-as-scan": [
        r"\[2\. 2\. 2\.\]\s+\[2\. 2\. 2\.\] \(scale is 3 now",
        r"train_epoch ran (\d+) steps; \1 are batches of 512",
        r"\[2\. 2\. 2\.\] \[3\. 3\. 3\.\]",
    ],
}
"""What a page's output must show (regular expressions), where a page teaches by it."""


def check_built_page(page: Path, text: str) -> None:
    """What the build must have shown: each figure as an inline PNG, no error output,
    and what `SHOWN` asks of the page."""
    if any('html="true"' in o and "figure_to_html" in c for _, o, c in exec_blocks(page)):
        assert "data:image/png;base64," in text, "a figure is missing"
    shown = html.unescape(re.sub(r"<[^>]+>", "", text))
    assert "Traceback (most recent call last)" not in shown
    for expected in SHOWN.get(page.stem, []):
        assert re.search(expected, shown), f"{page.stem} does not show {expected!r}"


def test_the_built_page_check_can_fail(tmp_path):
    page = ROOT / "docs" / "tutorials" / "06-evaluation.md"
    with pytest.raises(AssertionError, match="figure is missing"):
        check_built_page(page, "<p>no picture</p>")
    with pytest.raises(AssertionError):
        check_built_page(page, "data:image/png;base64,x Traceback (most recent call last)")
    assert built_page(tmp_path, ROOT / "docs" / "cli.md") == tmp_path / "cli" / "index.html"


@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in PAGES if exec_blocks(p)], ids=lambda p: p.stem)
def test_page_code_runs(page, real_data, monkeypatch):
    site = os.environ.get("EQX_FMNIST_SITE")
    if site:  # .ci/run built the site a moment ago: the build ran this page's code
        check_built_page(page, built_page(Path(site), page).read_text())
        return
    import jax

    monkeypatch.chdir(ROOT)  # pages read benchmarks/results/ relative to the root
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.setenv("EQX_FMNIST_DATA", str(real_data.source))  # where the user has it
    import eqx_fmnist  # noqa: F401  (the package's modules, loaded before they are patched)
    import eqx_fmnist.cli  # noqa: F401

    from helpers import use_a_slice

    # The quick form of a page: its code as written, on a slice of the data (an epoch is
    # 31 steps, the test set 2,000 images); the site build runs it on all of them.
    use_a_slice(real_data, monkeypatch, QUICK_TRAIN, QUICK_TEST)
    namespaces: dict[str, dict] = {}
    outputs = []
    for session, options, code in exec_blocks(page):
        ns = namespaces.setdefault(session, {"__name__": f"docs_{page.stem}"})
        out = io.StringIO()
        # A reader's code runs with JAX's standard promotion (the suite's strict promotion
        # is for the library; the page on strict promotion turns it on itself).
        with contextlib.redirect_stdout(out), jax.numpy_dtype_promotion("standard"):
            exec(compile(code, f"{page.name}[{session}]", "exec"), ns)
        outputs.append((options, out.getvalue()))
    for options, text in outputs:
        if 'html="true"' in options and "<img" in text:
            assert "base64," in text
    if "tutorials" in page.parts and any("plot_" in code for _, _, code in exec_blocks(page)):
        assert any("<img" in text for _, text in outputs), "a figure is missing"
    # A block that caught an exception and printed it would pass silently: refuse that.
    assert not any("Traceback (most recent call last)" in text for _, text in outputs)
    printed = "\n".join(text for _, text in outputs)
    for expected in SHOWN.get(page.stem, []):
        assert re.search(expected, printed), f"{page.stem} does not show {expected!r}"
