"""The main job as a user runs it: `eqx-fmnist train`, each time in a process of its own
in a folder of its own (the run folder `runs/<timestamp>`, as a newcomer's), first with
an empty compilation cache (cold) and then with the cache the first run left (warm); the
wall time of each command, the time line its `summary.json` records, and what the last
run printed, as the README shows it.

    python benchmarks/main_job.py [--runs 2] [--train "FLAGS"] [--out FILE.md]

`--train` passes flags to `eqx-fmnist train` (`--train "--steps 12"` for a smoke run).
"""

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from eqx_fmnist.fileio import atomic_write

from harness import machine_line


def run_once(flags: list[str], folder: Path, cache: Path) -> dict:
    """One `eqx-fmnist train` in a process of its own, run in `folder`: its wall
    seconds, its summary and what it printed."""
    env = {**os.environ, "EQX_FMNIST_COMPILE_CACHE": str(cache), "COLUMNS": "88"}
    folder.mkdir(parents=True)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "eqx_fmnist", "train", *flags],
        env=env,
        capture_output=True,
        text=True,
        cwd=folder,
    )
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"eqx-fmnist train failed ({done.returncode}):\n{done.stderr}")
    (summary,) = folder.glob("runs/*/summary.json")
    return {"wall": wall, "summary": json.loads(summary.read_text()), "printed": done.stdout}


def bare_start() -> float:
    """The wall seconds of `import jax; jax.devices()` in a process of its own: JAX's
    own start on this machine, beside which the command's is read."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import jax; jax.devices()"], check=True)
    return time.perf_counter() - start


def _lines(printed: str) -> str:
    """What a command printed, each line without the spaces a terminal pads it with."""
    return "\n".join(line.rstrip() for line in printed.rstrip().splitlines())


def table(runs: list[tuple[str, dict]]) -> str:
    """The runs side by side, and each one's time line."""
    first = runs[0][1]["summary"]
    parts = list(first["seconds"])
    head = ["run", "wall s", "test accuracy", "examples/sec", *(f"{p} s" for p in parts)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, r in runs:
        s = r["summary"]
        cells = [
            name,
            f"{r['wall']:.1f}",
            f"{s['test_accuracy']:.4f}",
            f"{s['examples_per_sec']:,.0f}",
            *(f"{s['seconds'][p]:.2f}" for p in parts),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2, help="warm runs after the cold one")
    parser.add_argument("--train", default="", help="flags for eqx-fmnist train, quoted")
    parser.add_argument("--out", type=Path, help="write the table here (markdown)")
    args = parser.parse_args()
    flags = shlex.split(args.train)
    bare = []
    with tempfile.TemporaryDirectory() as tmp:
        cache, results = Path(tmp) / "jax-compile", []
        for i in range(1 + args.runs):
            bare.append(bare_start())  # interleaved with the runs
            name = "cold (empty compilation cache)" if i == 0 else f"warm {i}"
            results.append((name, run_once(flags, Path(tmp) / f"run{i}", cache)))
            print(f"{name}: {results[-1][1]['wall']:.1f} s", flush=True)
    shown = " ".join(["eqx-fmnist", "train", *flags]) if flags else "eqx-fmnist train"
    text = "\n\n".join(
        [
            machine_line(),
            f"`{shown}` in a process of its own each time, the first with an empty "
            "compilation cache, the others with the cache it left. Wall: the command "
            "from start to exit (starting Python and JAX included); the other columns are "
            "the run's `summary.json`: its examples/sec and where its time went.",
            table(results),
            'JAX\'s own start here, `python -c "import jax; jax.devices()"` in a process of '
            f"its own before each run: {', '.join(f'{b:.1f}' for b in bare)} s.",
            f"What `{shown}` printed, the last run:",
            "```text\n" + _lines(results[-1][1]["printed"]) + "\n```",
        ]
    )
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with atomic_write(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
