"""What `import eqx_fmnist` costs beside `import jax, equinox, optax`, and what
`eqx-fmnist --help` costs: fresh processes, interleaved, the best of `--repeats` each
(a process's start is noisy; its best is what the import itself takes).

    python benchmarks/import_time.py [--repeats 5] [--out benchmarks/results/import_time.md]
"""

import argparse
import subprocess
import sys
import time
from pathlib import Path

from harness import machine_line, write_results

TIMED = "import time; t = time.perf_counter(); {}; print(time.perf_counter() - t)"
IMPORTS = {
    "`import jax, equinox, optax`": "import jax, equinox, optax",
    "`import eqx_fmnist`": "import eqx_fmnist",
    "`import eqx_fmnist` and its first `ef.runs`": "import eqx_fmnist; eqx_fmnist.runs",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/import_time.md"))
    args = parser.parse_args()
    best: dict[str, float] = {}
    for _ in range(args.repeats):
        for name, code in IMPORTS.items():
            ran = subprocess.run(
                [sys.executable, "-c", TIMED.format(code)], capture_output=True, text=True
            )
            best[name] = min(best.get(name, float("inf")), float(ran.stdout))
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "eqx_fmnist", "--help"], capture_output=True)
        best["`eqx-fmnist --help` (the whole process)"] = min(
            best.get("`eqx-fmnist --help` (the whole process)", float("inf")),
            time.perf_counter() - t,
        )
    base = best["`import jax, equinox, optax`"]
    lines = [
        machine_line(),
        "",
        f"Fresh processes, interleaved, the best of {args.repeats} each.",
        "",
        "| what | seconds | beyond jax, equinox, optax |",
        "|---|---|---|",
        *(f"| {name} | {s:.2f} | {s - base:+.2f} |" for name, s in best.items()),
    ]
    write_results(args.out, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
