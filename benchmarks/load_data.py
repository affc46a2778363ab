"""Seconds to `load_fashion_mnist()`: a cold cache (gunzip, hash, keep a decoded copy)
vs. a warm one (read the decoded copy, verification remembered).

Medians of several loads in one process. A cold cache is made by pointing
`$XDG_CACHE_HOME` at a fresh folder before each cold load.

    python benchmarks/load_data.py [--repeats 5]
"""

import argparse
import os
import statistics
import tempfile
import time

import eqx_fmnist as ef
from eqx_fmnist.bench import machine_facts


def timed(**kwargs) -> float:
    t = time.perf_counter()
    ef.load_fashion_mnist(**kwargs)
    return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    cold, warm, unverified = [], [], []
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as cache:
            os.environ["XDG_CACHE_HOME"] = cache
            cold.append(timed(verify=True))  # gunzips, hashes, keeps decoded copies
            warm.append(timed(verify=True))  # reads the copies; verification remembered
            unverified.append(timed(verify=False))
    facts = machine_facts()
    print(f"Machine: {facts['cpu']}, {facts['cores']} cores; jax {facts['jax']}.\n")
    print(f"source: {ef.load_fashion_mnist(verify=False).source}\n")
    print("| load | median s | min..max s |")
    print("|---|---|---|")
    for name, xs in [
        ("verify=True, cold cache", cold),
        ("verify=True, warm cache", warm),
        ("verify=False", unverified),
    ]:
        print(f"| {name} | {statistics.median(xs):.3f} | {min(xs):.3f}..{max(xs):.3f} |")


if __name__ == "__main__":
    main()
