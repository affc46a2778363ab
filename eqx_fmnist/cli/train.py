"""`eqx-fmnist train` (one run, or `--seeds N` members as one program) and `eqx-fmnist
sweep` (a grid x seeds as one program): one way to make a run folder for both."""

import argparse
import shlex
from pathlib import Path

from .. import runs
from ..ensemble import Grid, Seeds, member_seeds
from ..state import BATCHED
from ..train import TrainResult
from . import flags
from .common import UsageError, console, load_data, table, train_in_folder


def add_train_parser(sub) -> None:
    p = sub.add_parser("train", help="train, evaluate, and write a run folder with figures")
    p.set_defaults(func=cmd_train)
    flags.add_config_flags(p, distilled=True)
    r = flags.add_run_folder_flags(p)
    seeds = "train N members (seeds SEED to SEED+N-1) as one program: an ensemble"
    r.add_argument("--seeds", type=int, metavar="N", help=seeds)
    r.add_argument(
        "--teacher",
        metavar="RUN_DIR",
        help="distil: learn from this run's (or ensemble's) probabilities too "
        "(see --distill-temperature, --distill-weight)",
    )
    r.add_argument(
        "--tensorboard", action="store_true", help="TensorBoard scalars in RUN/tensorboard"
    )
    r.add_argument(
        "--profile", action="store_true", help="Perfetto trace of intervals 2-3 in RUN/profile"
    )
    flags.add_data_args(p)


def add_sweep_parser(sub) -> None:
    p = sub.add_parser(
        "sweep",
        help="train a grid of hyperparameters x seeds in one program, ranked on validation",
        description="Every grid point x seed trains as a member of one compiled program; "
        "the points are ranked by validation accuracy and only the winner is tested. "
        f"Give comma-separated values to some of --{', --'.join(BATCHED)}".replace("_", "-"),
    )
    p.set_defaults(func=cmd_sweep)
    flags.add_config_flags(p, lists=BATCHED)
    r = flags.add_run_folder_flags(p, what="sweep")
    r.add_argument("--seeds", type=int, help="seeds per grid point (2)")
    flags.add_data_args(p)


def cmd_train(args: argparse.Namespace) -> int:
    if (training := flags.resumed(args, "train")) is not None:
        return _train(training, profile=args.profile)
    config = flags.config_from_args(args)
    out = args.out or runs.default_folder()
    options = flags.folder_options(args)
    fm = load_data(args)
    members = None if args.seeds is None else Seeds(member_seeds(config, args.seeds))
    teacher = args.teacher
    training = None
    again = None
    if args.distilled and teacher is None:  # the recipe: a teacher first, then the student
        # What continues it: its own command, the folder named, not starting it afresh.
        argv = [a for a in args.argv if a != "--overwrite"]
        if args.out is None:
            argv += ["--out", str(out)]
        teacher = out / runs.TEACHER_FOLDER
        again = shlex.join(["eqx-fmnist", *argv])
        if (first := runs.teacher_training(out, config, data=fm, **options)) is None:
            console.print(f"teacher: {teacher}, trained before (--overwrite trains it again)")
        else:
            console.print(f"teacher: a CNN, {first.length}, into {teacher}")
            if status := _train(first, again=again):
                return status
        if not args.overwrite:  # the recipe's command run again continues its student
            training = runs.Training.unfinished(out, config, data=fm, **options)
    if training is None:
        options |= {"members": members, "teacher": teacher, "data": fm}
        training = runs.Training.new(out, config, **options)
    return _train(training, profile=args.profile, again=again)


def _train(training: runs.Training, *, profile: bool = False, again: str | None = None) -> int:
    """Train `training` with the progress bar, then print its results."""
    done = train_in_folder(training, profile=profile, again=again)
    if isinstance(done, int):
        return done
    run = done.outcome  # a RunResult: one model or an ensemble
    print_results(run.result, training.folder.folder, done.summary["seconds"])
    if run.calibration is not None:
        console.print(
            f"calibrated on {run.calibration.held_out:,} held-out images: temperature "
            f"{run.calibration.temperature:.3f}; inputs unlike the training images are flagged"
        )
    return 0


def print_results(result: TrainResult, out: Path, seconds: dict[str, float]) -> None:
    """The test results (each member's, for an ensemble), the throughput, and where the
    run's wall time went (`seconds`, as its summary records them)."""
    test = result.test
    eps = result.examples_per_sec
    assert test is not None, "the command line always trains with the test split"
    rows = []
    if test.members:
        rows = [
            (f"member {i} (seed {c.seed})", f"{m.accuracy:.4f}", f"{m.loss:.4f}")
            for i, (c, m) in enumerate(zip(result.configs, test.members, strict=True))
        ]
        rows.append(
            ("members: mean ± std", f"{test.accuracy_mean:.4f} ± {test.accuracy_std:.4f}", "")
        )
    name = "[bold]ensemble[/] (mean probability)" if test.members else "[bold]test[/]"
    rows.append((name, f"[bold]{test.accuracy:.4f}[/]", f"{test.loss:.4f}"))
    console.print(table(f"Test results ({test.count:,} images)", ("", "accuracy", "loss"), rows))
    skipped = sum(int(h.get("skipped", 0)) for h in result.history)
    if skipped:
        steps = sum(int(h["steps"]) for h in result.history)
        console.print(
            f"[bold]{skipped:,} of {steps:,} steps were skipped[/] (a non-finite loss or "
            "gradient, on_nonfinite='skip')"
        )
    per = "model-examples/sec" if result.num_members else "examples/sec"
    console.print(
        f"{eps:,.0f} {per}, {eps * runs.TOKENS_PER_EXAMPLE:,.0f} tokens/sec projected "
        f"({runs.TOKENS_PER_EXAMPLE} tokens, 7 x 7 patches, per image); compile "
        f"{result.compile_seconds:.2f} s, train {result.train_seconds:.2f} s\n"
        f"wrote {out}/: config.json, history.jsonl, summary.json, {runs.CHECKPOINT_NAME}"
        f"{' (all members)' if result.num_members else ''}, figures"
    )
    parts = ", ".join(f"{k.replace('_', ' ')} {v:.1f}" for k, v in seconds.items())
    console.print(f"time (s): {parts}; examples/sec counts the training calls' wall time")


def cmd_sweep(args: argparse.Namespace) -> int:
    grid = {name: list(getattr(args, name)) for name in BATCHED if getattr(args, name) is not None}
    if (training := flags.resumed(args, "sweep")) is None:
        if not grid:
            raise UsageError(
                "give values to sweep, e.g. --learning-rate 1e-3,3e-3 --weight-decay 1e-2,5e-2 "
                "(any of " + ", ".join("--" + n.replace("_", "-") for n in BATCHED) + ")."
            )
        for name in grid:
            setattr(args, name, None)
        config = flags.config_from_args(args)
        members = Grid(grid, member_seeds(config, 2 if args.seeds is None else args.seeds))
        out = args.out or runs.default_folder()
        options = flags.folder_options(args)
        training = runs.Training.new(out, config, members=members, data=load_data(args), **options)
    done = train_in_folder(training)
    if isinstance(done, int):
        return done
    console.print(done.outcome.to_markdown(), markup=False)
    console.print(f"wrote {training.folder.folder}/: {', '.join(runs.SWEEP_FILES)}, ...")
    return 0
