"""Seconds to `load_fashion_mnist()`: a cold load (an empty cache: gunzip, SHA-256 of the
content, a decoded copy kept), a warm load (the decoded copy, its check remembered), and
`verify=False`; each the median of fresh processes, so that nothing stays in memory.

    python benchmarks/load_data.py [--repeats 5] [--data-dir DIR] [--out benchmarks/results/load_data.md]
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from eqx_fmnist.data import load_fashion_mnist

from harness import machine_line, write_results

TIMED = (
    "import time, sys; from eqx_fmnist.data import load_fashion_mnist; t = time.perf_counter(); "
    "load_fashion_mnist(sys.argv[1] or None, verify=sys.argv[2] == 'True'); "
    "print(time.perf_counter() - t)"
)


def timed(data_dir: str, verify: bool, cache: str) -> float:
    """One load in a fresh process whose user cache is `cache`."""
    env = {**os.environ, "XDG_CACHE_HOME": cache}
    done = subprocess.run(
        [sys.executable, "-c", TIMED, data_dir, str(verify)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return float(done.stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--data-dir", default="", help="default: where the library finds them")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/load_data.md"))
    args = parser.parse_args()
    source = str(load_fashion_mnist(args.data_dir or None).source)
    rows = {"verify=True, cold cache": [], "verify=True, warm cache": [], "verify=False": []}
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as cache:  # empty: the cold load fills it
            rows["verify=True, cold cache"].append(timed(source, True, cache))
            rows["verify=True, warm cache"].append(timed(source, True, cache))
            rows["verify=False"].append(timed(source, False, cache))
    lines = [
        machine_line(),
        "",
        f"source: {source}; the median of {args.repeats} fresh processes each",
        "",
        "| load | median s | min..max s |",
        "|---|---|---|",
    ]
    for name, seconds in rows.items():
        lines.append(
            f"| {name} | {statistics.median(seconds):.3f} | {min(seconds):.3f}..{max(seconds):.3f} |"
        )
    text = "\n".join(lines) + "\n"
    write_results(args.out, text)


if __name__ == "__main__":
    main()
