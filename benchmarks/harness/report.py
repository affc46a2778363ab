"""The benchmark's tables and figure, from what `run_benchmark` measured."""

import dataclasses
import math
import os
from pathlib import Path
from typing import Any

from .roofline import DevicePeaks, Roofline, peaks_line, step_roofline
from .timing import TOKENS_PER_EXAMPLE, MatmulBound, Throughput


@dataclasses.dataclass(frozen=True)
class Cadence:
    """`fit`'s examples/sec with a host read every `log_every` steps (median of `runs`)."""

    log_every: int
    examples_per_sec: float
    runs: tuple[float, ...]


def _table(header: list[str], rows: list[list[str]]) -> str:
    """A markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def _facts_line(facts: dict[str, Any]) -> str:
    flags = ", ".join(facts["flags"]) or "none of them"
    runtime = f" ({facts['runtime']})" if facts.get("runtime") else ""
    line = (
        f"Machine: {facts['cpu']}, {facts['cores']} cores (flags: {flags}); "
        f"{facts['backend']} backend, {facts['devices']}{runtime}, JAX's default matmul "
        f"precision {facts.get('matmul_precision', 'default')}; jax {facts['jax']}, "
        f"jaxlib {facts['jaxlib']}, Python {facts['python']}"
    )
    if facts.get("torch_device"):
        line += f"; PyTorch on {facts['torch_device']}"
    if facts.get("XLA_FLAGS"):
        line += f"; XLA_FLAGS={facts['XLA_FLAGS']}"
    if facts.get("made_by"):  # the command and its commit (older reports lack them)
        line += f". {facts['made_by']}"
    return line + "."


@dataclasses.dataclass
class BenchmarkReport:
    """Everything one benchmark run measured, and how to show it.

    **Fields:**

    - `facts`: `machine_facts`.
    - `bf16_matmul_speedup`: XLA's bfloat16 (float32-accumulating) matmul over its
        float32 one on this machine.
    - `flops_per_example`, `xla_flops_per_example`: the hand count of matmul FLOPs per
        training example, and XLA's `cost_analysis()` of a compiled chunk.
    - `main`: the training paths at batch 512, float32, a host read every `read_every`
        steps each.
    - `cadence`: `fit` at a host read every 25 steps and once per epoch.
    - `precision`: the fused path under each policy.
    - `batch_sizes`: the fused path at each batch size, with the step's bound: its
        matmuls timed one by one on a CPU, its roofline elsewhere.
    - `peaks`: the device's measured peaks (the roofline's), when measured.
    - `main_job`: `fit` of the default recipe, the same without augmentation, and the
        plain fused epoch (`main_job_rows`).
    - `skipped`: variants left out, and why.
    """

    facts: dict[str, Any]
    bf16_matmul_speedup: float
    flops_per_example: int
    xla_flops_per_example: float
    main: list[Throughput]
    read_every: int
    cadence: list[Cadence]
    precision: list[Throughput]
    batch_sizes: list[tuple[Throughput, MatmulBound | Roofline]]
    peaks: DevicePeaks | None = None
    main_job: list[Throughput] = dataclasses.field(default_factory=list)
    skipped: list[str] = dataclasses.field(default_factory=list)

    def _rate(self, name: str) -> float | None:
        return next((t.examples_per_sec for t in self.main if t.name == name), None)

    def _main_table(self) -> str:
        bound_512 = next((b for t, b in self.batch_sizes if b.batch_size == 512), None)
        # Relative to the loops the library replaces when they were measured
        # (benchmarks/throughput.py), else to the library's per-step path.
        bases = [n for n in ("codelab_jit", "pytorch_eager") if self._rate(n)]
        bases = bases or [self.main[0].name]

        def pct(t: Throughput) -> str:
            if bound_512 is None:
                return "n/a"
            return f"{100 * t.examples_per_sec / bound_512.examples_per_sec:.0f}%"

        header = ["path", "examples/sec", *(f"x {b}" for b in bases), "% of bound"]
        rows = [
            [
                t.name,
                f"{t.examples_per_sec:,.0f}",
                *(f"{t.examples_per_sec / (self._rate(b) or math.nan):.2f}" for b in bases),
                pct(t),
                f"{t.tokens_per_sec:,.0f}",
                f"{t.compile_seconds:.2f}",
            ]
            for t in self.main
        ]
        return _table([*header, "projected tokens/sec", "compile s"], rows)

    def _other_tables(self) -> tuple[str, str, str]:
        """The host-read cadence, the precisions and the batch sizes."""
        per_epoch, f32 = self.cadence[-1].examples_per_sec, self.precision[0].examples_per_sec
        cadence = _table(
            ["`fit`, host read every", "examples/sec", "x one read per epoch"],
            [
                [
                    f"{c.log_every} steps",
                    f"{c.examples_per_sec:,.0f}",
                    f"{c.examples_per_sec / per_epoch:.2f}",
                ]
                for c in self.cadence
            ],
        )
        precision = _table(
            ["fused path, precision", "examples/sec", "x float32"],
            [
                [t.name, f"{t.examples_per_sec:,.0f}", f"{t.examples_per_sec / f32:.2f}"]
                for t in self.precision
            ],
        )
        header = ["fused path, batch", "examples/sec", "bound (examples/sec)"]
        batches = _table(
            [*header, "% of bound", "bound from"],
            [
                [
                    str(b.batch_size),
                    f"{t.examples_per_sec:,.0f}",
                    f"{b.examples_per_sec:,.0f}",
                    f"{100 * t.examples_per_sec / b.examples_per_sec:.0f}%",
                    ", ".join(sorted(set(b.backends))),
                ]
                for t, b in self.batch_sizes
            ],
        )
        return cadence, precision, batches

    def _main_job_table(self) -> list[str]:
        """The run a user starts against the fused path it is built on."""
        if not self.main_job:
            return []
        no_aug, fused = (t.examples_per_sec for t in self.main_job[-2:])
        rows = [
            [
                t.name,
                f"{t.examples_per_sec:,.0f}",
                f"{t.examples_per_sec / no_aug:.2f}",
                f"{t.examples_per_sec / fused:.2f}",
            ]
            for t in self.main_job
        ]
        header = ["the main job", "examples/sec", "x fit without augmentation"]
        return [
            "`fit` of the default recipe against the same without augmentation and the "
            "plain fused epoch (one host read per epoch), interleaved: what a run keeps of "
            "its path's speed.",
            _table([*header, "x plain fused epoch"], rows),
        ]

    def to_markdown(self) -> str:
        main, (cadence, precision, batches) = self._main_table(), self._other_tables()
        parts = [
            _facts_line(self.facts),
            f"Training paths, batch 512, float32, the loss read back to the host every "
            f"{self.read_every} steps on every path; median of interleaved repetitions.",
            main,
            *self._main_job_table(),
            cadence,
            f"XLA runs a bfloat16 x bfloat16 -> float32 matmul at "
            f"{self.bf16_matmul_speedup:.2f}x its float32 speed on this machine.",
            precision,
            batches,
            f"Matmul FLOPs per training example: {self.flops_per_example:,} by hand; XLA's "
            f"`cost_analysis()` of the compiled chunk counts {self.xla_flops_per_example:,.0f} "
            "(every floating-point operation it emits, elementwise work included).",
            "On a CPU the bound times each of the step's eight matmul shapes on its own "
            "(with numpy and PyTorch, the faster, the best of nine timings each): a step "
            "made of nothing else would run at that rate. On an accelerator, where one "
            "small dispatch times the dispatch, it is the step's roofline from the "
            "device's own peaks (below). "
            "Each policy asks for its own matmul precision: float32 products at "
            "`highest` (no TF32 on a GPU, no bfloat16 passes on a TPU), bfloat16 and "
            "float16 at the default.\n"
            f"Tokens/sec is a projection: examples/sec x {TOKENS_PER_EXAMPLE} (7 x 7 "
            "patches per image), not a measurement.",
        ]
        if self.peaks is not None:
            parts.append(peaks_line(self.peaks, step_roofline(512, self.peaks)))
        if self.skipped:
            parts.append("\n".join(f"- skipped: {s}" for s in self.skipped))
        return "\n\n".join(parts) + "\n"

    def figure(self):
        """Bars of the training paths' examples/sec, with the batch-512 matmul bound."""
        from eqx_fmnist.plots import plot_throughput

        bound = next((b.examples_per_sec for _, b in self.batch_sizes if b.batch_size == 512), None)
        return plot_throughput(
            [t.name for t in self.main],
            [t.examples_per_sec for t in self.main],
            title=f"Training throughput, batch 512, float32 ({self.facts['cpu']}, "
            f"{self.facts['cores']} cores)",
            bound=bound,
        )

    def save(self, folder: str | os.PathLike) -> list[Path]:
        """`throughput.md` and `throughput.png` in `folder` (made if missing)."""
        from eqx_fmnist.fileio import atomic_write
        from eqx_fmnist.plots import save_figure

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        with atomic_write(folder / "throughput.md", "w") as f:
            f.write(self.to_markdown())
        return [folder / "throughput.md", save_figure(self.figure(), folder / "throughput.png")]


def write_results(path: str | os.PathLike, text: str) -> Path:
    """Write a script's results table to `path` (its folder made) and print it, with the
    path written: the one way every script in `benchmarks/` leaves its table."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    print(text)
    print(f"wrote {path}")
    return path
