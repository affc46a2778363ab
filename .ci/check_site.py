"""Check the built site: every tutorial page shows its figures and no failed block.

python .ci/check_site.py site
"""

import re
import sys
from html.parser import HTMLParser
from pathlib import Path


class Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.images, self.text = 0, []

    def handle_starttag(self, tag, attrs):
        if tag == "img" and dict(attrs).get("src", "").startswith(
            ("data:image/png", "http", "/", ".")
        ):
            self.images += 1

    def handle_data(self, data):
        self.text.append(data)


def main(site: Path) -> int:
    problems = []
    tutorials = sorted((site / "tutorials").glob("*/index.html"))
    if len(tutorials) < 8:
        problems.append(f"expected 8 tutorial pages under {site}/tutorials, found {len(tutorials)}")
    for html in [
        *tutorials,
        site / "index.html",
        site / "cli" / "index.html",
        site / "benchmarks" / "index.html",
        site / "shapes-and-dtypes" / "index.html",
    ]:
        page = Page()
        page.feed(html.read_text())
        text = "".join(page.text)
        # A block that fails shows markdown-exec's traceback; pages also print errors on
        # purpose, one line each (a refused config, a shape check), which are fine.
        if re.search(r"Traceback \(most recent call last\)|exec(ution)? failed", text):
            problems.append(f"{html}: error output on the page")
        source = html.read_text()
        if "tutorials" in html.parts and "plot_" in source and page.images == 0:
            problems.append(f"{html}: draws figures but shows no image")
        print(f"{html.relative_to(site)}: {page.images} images, {len(text):,} characters of text")
    api = sorted((site / "api").glob("*/index.html"))
    for html in api:
        if 'class="doc doc-object' not in html.read_text():
            problems.append(f"{html}: the API page has no documented objects")
    for p in problems:
        print("PROBLEM:", p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "site")))
