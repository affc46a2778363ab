"""The commands for many members in one program: `train --seeds N` (an ensemble) and
`sweep`, and how `evaluate` and `predict` show an ensemble."""

import argparse
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from .. import data as data_mod
from ..checkpoint import Checkpoint, load_checkpoint
from ..config import TrainConfig
from ..dataset import ArrayDataset, to_datasets
from ..ensemble import EnsembleResult, grid_configs, grid_of, member_seeds, sweep
from ..evaluate import evaluate_ensemble, member_probabilities
from ..flags import add_config_flags, config_from_args, given_flags
from ..runs import CheckpointEvery, RunFolder, default_folder
from ..state import BATCHED
from .common import (
    UsageError,
    add_data_args,
    checkpoint_path,
    console,
    load_data,
    table,
    train_with_progress,
)

DEFAULT_SWEEP_VALIDATION = 10_000


def seed_members(config: TrainConfig, seeds: int) -> list[TrainConfig]:
    """`--seeds N`: one member per seed, `config.seed` to `config.seed + N - 1`."""
    return [config.with_changes(seed=s) for s in member_seeds(config, seeds)]


def describe_seeds(members) -> str:
    seeds = sorted({c.seed for c in members})
    if seeds == list(range(seeds[0], seeds[-1] + 1)) and len(seeds) > 2:
        return f"{seeds[0]}-{seeds[-1]}"
    return ",".join(map(str, seeds))


def print_ensemble(result: EnsembleResult, out: Path) -> None:
    rows = [
        (f"member {i} (seed {c.seed})", f"{m.accuracy:.4f}", f"{m.loss:.4f}")
        for i, (c, m) in enumerate(zip(result.configs, result.members, strict=True))
    ]
    rows.append(
        ("members: mean ± std", f"{result.accuracy_mean:.4f} ± {result.accuracy_std:.4f}", "")
    )
    rows.append(("[bold]ensemble[/] (mean probability)", f"[bold]{result.ensemble.accuracy:.4f}[/]",
                 f"{result.ensemble.loss:.4f}"))  # fmt: skip
    console.print(table("Test results", ("", "accuracy", "loss"), rows))
    console.print(
        f"{len(result.configs)} members in one program: {result.examples_per_sec:,.0f} "
        f"model-examples/sec, compile {result.compile_seconds:.2f} s, train "
        f"{result.train_seconds:.2f} s\nwrote {out}/: config.json, history.jsonl, "
        "summary.json, checkpoint.eqx (all members), figures"
    )


def evaluate_members(ckpt: Checkpoint, test: ArrayDataset, *, show_members: bool):
    """Print an ensemble checkpoint's test results; return the ensemble's log mean
    probabilities (its logits)."""
    policy = ckpt.state.policy
    members, ens = evaluate_ensemble(ckpt.state.model, test, policy=policy)
    accs = [m.accuracy for m in members]
    console.print(
        f"{len(members)} members: ensemble test accuracy [bold]{ens.accuracy:.4f}[/], loss "
        f"{ens.loss:.4f} on {ens.count:,} images; members {np.mean(accs):.4f} ± "
        f"{np.std(accs, ddof=1) if len(accs) > 1 else 0.0:.4f}"
    )
    if show_members:
        rows = [
            (f"member {i}", *(f"{getattr(c, k):g}" for k in ("seed", *BATCHED)),
             f"{m.accuracy:.4f}", f"{m.loss:.4f}")
            for i, (c, m) in enumerate(zip(ckpt.members, members, strict=True))
        ]  # fmt: skip
        console.print(
            table("Members", ("", "seed", "lr", "wd", "smoothing", "accuracy", "loss"), rows)
        )
    probs = member_probabilities(ckpt.state.model, test.images, policy=policy)
    return np.log(np.asarray(probs.mean(axis=0)))


def predict_members(ckpt: Checkpoint, flat: jnp.ndarray, *, show_members: bool):
    """The ensemble's probabilities for `flat` images, and each member's best guess."""
    probs = np.asarray(member_probabilities(ckpt.state.model, flat, policy=ckpt.state.policy))
    guesses = None
    if show_members:
        guesses = [
            ", ".join(data_mod.CLASS_NAMES[c] for c in probs[:, j].argmax(axis=-1))
            for j in range(probs.shape[1])
        ]
    return probs.mean(axis=0), guesses


# --------------------------------------------------------------------------- sweep


def add_sweep_parser(sub) -> None:
    p = sub.add_parser(
        "sweep",
        help="train a grid of hyperparameters x seeds in one program, ranked on validation",
        description="Every grid point x seed trains as a member of one compiled program; "
        "the points are ranked by validation accuracy and only the winner is tested. "
        f"Give comma-separated values to some of --{', --'.join(BATCHED)}".replace("_", "-"),
    )
    p.set_defaults(func=cmd_sweep)
    add_config_flags(p, lists=BATCHED)
    r = p.add_argument_group("sweep")
    r.add_argument("--seeds", type=int, help="seeds per grid point (2)")
    r.add_argument("--out", type=Path, help="sweep folder (default: runs/<timestamp>)")
    r.add_argument("--overwrite", action="store_true", help="reuse a folder that has results")
    r.add_argument("--resume", metavar="CHECKPOINT", help="continue a sweep from its checkpoint")
    r.add_argument("--checkpoint-every", default="60s", help="checkpoint cadence (60s)")
    add_data_args(p)


def cmd_sweep(args: argparse.Namespace) -> int:
    every = CheckpointEvery.parse(args.checkpoint_every)
    grid = {name: getattr(args, name) for name in BATCHED if getattr(args, name) is not None}
    resume = None
    if args.resume:
        given = given_flags(args) + ["--seeds"] * (args.seeds is not None)
        if given:
            raise UsageError(
                "--resume continues the saved sweep with its saved grid and config; "
                f"drop {' '.join(given)}."
            )
        resume = load_checkpoint(checkpoint_path(args.resume))
        if resume.members is None:
            raise UsageError(f"{args.resume} is one run's checkpoint, not a sweep's.")
        config, configs = resume.config, list(resume.members)
        grid, seeds = grid_of(configs)
        out = args.out or checkpoint_path(args.resume).parent
    else:
        if not grid:
            raise UsageError(
                "give values to sweep, e.g. --learning-rate 1e-3,3e-3 --weight-decay 1e-2,5e-2 "
                "(any of " + ", ".join("--" + n.replace("_", "-") for n in BATCHED) + ")."
            )
        for name in grid:
            setattr(args, name, None)
        config = config_from_args(args)
        if not config.validation_size:
            config = config.with_changes(validation_size=DEFAULT_SWEEP_VALIDATION)
        _, seeds, configs = grid_configs(config, grid, args.seeds or 2)
        out = args.out or default_folder()
    fm = load_data(args)
    num_train, start = config.num_train(len(fm.train_images)), resume.step if resume else 0
    total = config.total_steps(num_train)
    folder = RunFolder(out, config, num_train=num_train, start_step=start, overwrite=args.overwrite,
                       checkpoint_every=every, members=configs)  # fmt: skip
    with folder as run, run.stop_on_signals():
        shown = "; ".join(f"{k} {', '.join(f'{v:g}' for v in vs)}" for k, vs in grid.items())
        console.print(
            f"sweep folder [bold]{out}[/]: {shown}; seeds {', '.join(map(str, seeds))}: "
            f"{len(configs)} members in one program, {total:,} steps each, ranked on "
            f"{config.validation_size:,} validation images"
            + (f"\nresuming at step {start:,} of {total:,}" if start else ""),
            highlight=False,
        )

        def train(callbacks):
            state = resume and resume.state
            return sweep(
                config, grid, seeds, validation_size=config.validation_size,
                data=to_datasets(fm), state=state, callback=callbacks,
            )  # fmt: skip

        result = train_with_progress(run, train, total=total, start=start, command="sweep")
        if isinstance(result, int):
            return result
        run.finish_sweep(result)
    console.print(result.to_markdown(), markup=False, highlight=False)
    console.print(f"wrote {out}/: sweep.md, sweep.json, sweep_heatmap.png, checkpoint.eqx, ...")
    return 0
