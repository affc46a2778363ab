"""The reader's pages stay pages: the README a front page of about 700 words of prose,
and no page, results file, docstring or comment a log of how or when the project was
made."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_PROSE_WORDS = 700
PAGES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").rglob("*.md")),
    *sorted((ROOT / "benchmarks" / "results").rglob("*.md")),
]
SOURCES = [
    p
    for folder in ("eqx_fmnist", "tests", "benchmarks", "examples", "hooks", ".ci")
    for p in sorted((ROOT / folder).rglob("*.py"))
    if p.name != "test_pages.py"  # which spells the phrases it looks for
]
# What a development log says and a reader's page does not.
LOG = re.compile(
    r"\bissue \d+|\b(this|a later|an earlier|the next) session\b|\bnot kept\b"
    r"|\bwaits for the next run\b|\bbefore issue\b|\bafter issue\b"
    r"|\btried by hand\b|\bis not what it says\b|/root/|\bpredates the\b",
    re.I,
)


def prose(markdown: str) -> str:
    """`markdown` without its fenced blocks, inline code and link targets."""
    text = re.sub(r"^```.*?^```$", " ", markdown, flags=re.M | re.S)
    text = re.sub(r"`[^`\n]*`", " ", text)
    return re.sub(r"\]\([^)]*\)", "]", text)


def words(text: str) -> int:
    return len(re.findall(r"[A-Za-z0-9][A-Za-z0-9'’.,-]*", text))


def test_the_readme_is_a_front_page():
    assert words(prose((ROOT / "README.md").read_text())) <= README_PROSE_WORDS


def test_the_word_count_skips_code_and_link_targets():
    page = "Two words.\n\n```bash\nmany words in a block\n```\n`and code` [a link](http://x.y/z)\n"
    assert words(prose(page)) == 4


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_is_a_development_log(page):
    found = [m.group(0) for m in LOG.finditer(prose(page.read_text()))]
    assert not found, found


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_docstring_or_comment_is_a_development_log(source):
    found = [m.group(0) for m in LOG.finditer(source.read_text())]
    assert not found, found


def test_the_log_check_sees_a_log():
    assert LOG.search("measured in a later session, see issue 51")
    assert not LOG.search('an ONNX session made each time; ```python session="cli"')


def test_the_readmes_run_and_times_are_the_results_files():
    """The README's printed run is the one `benchmarks/main_job.py` recorded, and the
    times it states are that file's cold and warm wall seconds: no figure of its own."""
    readme = (ROOT / "README.md").read_text()
    results = (ROOT / "benchmarks" / "results" / "main_job.md").read_text()
    printed = re.compile(r"```text\n.*?```", re.S)
    assert printed.search(readme).group(0) == printed.search(results).group(0)
    walls = dict(re.findall(r"^\| (cold|warm) [^|]*\| ([\d.]+) \|", results, re.M))
    stated = re.search(r"it takes ([\d.]+) s .*? and ([\d.]+) s run again", readme, re.S)
    assert stated is not None and stated.groups() == (walls["cold"], walls["warm"])
    machine = results.splitlines()[0]
    assert "Intel(R) Xeon(R)" in machine and "Intel Xeon" in readme


def test_the_sentence_counter_splits_as_its_rules_say():
    """`tests/sentences.py`: sentences end at `.`, `!` or `?` before a space; code blocks,
    tables and headings are not prose; inline code is a word, a link its text."""
    from sentences import figures, sentence_lengths

    page = (
        "# A heading of five words\n\nOne two three. Four five `six seven` eight!\n"
        "A [link text](http://x.y/z.html) ends here?\n\n```python\nnot. prose. at. all.\n```\n"
        "| a | table. |\n\n    indented. block.\n"
    )
    assert sentence_lengths(page) == [3, 4, 5]  # "A link text ends here": 5
    assert figures([10, 20, 40]) == (20, 1 / 3)


def test_the_quickstart_reads_in_short_sentences():
    """The newcomer's first page: a median sentence of at most 20 words and no more
    than one sentence in ten over 35."""
    from sentences import figures, sentence_lengths

    median, long = figures(sentence_lengths((ROOT / "docs" / "quickstart.md").read_text()))
    assert median <= 20 and long <= 0.1, (median, long)


def test_the_user_pages_read_in_short_sentences():
    """Each of the reader's pages (the README, the index, the quickstart, the
    tutorials, recipes, the command line, reliability, accelerators, shapes and dtypes),
    and all of them together: a median sentence of at most 20 words and no more than one
    sentence in ten over 35."""
    from sentences import USER_PAGES, figures, sentence_lengths

    lengths = {page.name: sentence_lengths(page.read_text()) for page in USER_PAGES}
    over = {}
    for name, each in lengths.items():
        median, long = figures(each)
        if median > 20 or long > 0.1:
            over[name] = (median, round(long, 2))
    assert not over, over
    median, long = figures([n for each in lengths.values() for n in each])
    assert median <= 20 and long <= 0.1, (median, long)
