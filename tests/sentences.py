"""Sentence lengths of the reader's pages: `python tests/sentences.py [PAGE ...]` prints,
per page, the median sentence in words and the share of sentences over 35 words.

The prose of a page is what is left without its fenced and indented blocks, tables,
headings, admonitions and HTML; a sentence ends at `.`, `!` or `?` before a space (or
the end of a paragraph); inline code counts as one word and a link as its text."""

import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
USER_PAGES = [
    ROOT / "README.md",
    *(ROOT / "docs" / name for name in ("index.md", "quickstart.md", "recipes.md", "cli.md")),
    *(ROOT / "docs" / name for name in ("reliability.md", "accelerators.md")),
    ROOT / "docs" / "shapes-and-dtypes.md",
    *sorted((ROOT / "docs" / "tutorials").glob("*.md")),
]
LONG = 35


def prose(markdown: str) -> str:
    """The page's running text, one paragraph per blank-line-separated block."""
    text = re.sub(r"^(```|~~~).*?^\1\s*$", "\n", markdown, flags=re.M | re.S)
    kept = []
    for line in text.splitlines():
        skip = line.startswith(("    ", "\t", "|", "#", "!!!", "???", "<", "--8<--"))
        kept.append("" if skip else line)
    text = "\n".join(kept)
    text = re.sub(r"`[^`\n]*`", "code", text)
    return re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)


def sentence_lengths(markdown: str) -> list[int]:
    """The number of words of each sentence of the page's prose."""
    lengths = []
    for paragraph in re.split(r"\n\s*\n", prose(markdown)):
        flat = " ".join(paragraph.split())
        for sentence in re.split(r"(?<=[.!?])\s+", flat):
            words = re.findall(r"[A-Za-z0-9][A-Za-z0-9'’.,:-]*", sentence)
            if words:
                lengths.append(len(words))
    return lengths


def figures(lengths: list[int]) -> tuple[float, float]:
    """The median length and the share over `LONG` words."""
    return statistics.median(lengths), sum(n > LONG for n in lengths) / len(lengths)


if __name__ == "__main__":
    pages = [Path(p).resolve() for p in sys.argv[1:]] or USER_PAGES
    everything = []
    for page in pages:
        lengths = sentence_lengths(page.read_text())
        everything += lengths
        median, long = figures(lengths)
        print(
            f"{page.relative_to(ROOT)}: {len(lengths)} sentences, median {median:g}, {long:.0%} over {LONG}"
        )
    median, long = figures(everything)
    print(f"all: {len(everything)} sentences, median {median:g}, {long:.0%} over {LONG}")
