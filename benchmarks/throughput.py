"""The full throughput benchmark: every training path in one process, one run.

Writes `throughput.md` (the tables, headed by the machine they came from) and
`throughput.png` (the bar chart) to `--out`.

    python benchmarks/throughput.py                 # about 6 minutes on 2 CPU cores
    python benchmarks/throughput.py --quick --out /tmp/bench   # a smoke run (CI)
"""

import argparse
import sys
from pathlib import Path

import eqx_fmnist as ef
from eqx_fmnist.bench import run_benchmark
from eqx_fmnist.plots import save_figure


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks that it runs")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args(argv)
    report = run_benchmark(
        ef.to_datasets(ef.load_fashion_mnist()),
        quick=args.quick,
        repeats=args.repeats,
        progress=lambda what: print(f"measuring {what} ...", file=sys.stderr, flush=True),
    )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "throughput.md").write_text(report.to_markdown())
    save_figure(report.figure(), args.out / "throughput.png")
    print(report.to_markdown())
    print(f"wrote {args.out / 'throughput.md'} and {args.out / 'throughput.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
