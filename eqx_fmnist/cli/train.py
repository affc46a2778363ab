"""`eqx-fmnist train` (one run, or `--seeds N` members as one program) and `eqx-fmnist
sweep` (a grid x seeds as one program): one way to make a run folder for both."""

import argparse
import functools
from pathlib import Path

from ..config import TrainConfig
from ..ensemble import Grid, Seeds, grid_of, member_seeds, sweep
from ..ensemble.grid import SWEEP_VALIDATION
from ..model import Model
from ..runs import (
    CHECKPOINT_NAME,
    TOKENS_PER_EXAMPLE,
    Run,
    RunError,
    default_folder,
    open_teacher,
    refuse_results,
    run_splits,
    train_run,
)
from ..state import BATCHED
from ..train import TrainResult
from .common import UsageError, console, load_data, table, train_in_folder
from .flags import (
    add_config_flags,
    add_data_args,
    add_run_folder_flags,
    config_from_args,
    resumed,
)


def add_train_parser(sub) -> None:
    p = sub.add_parser("train", help="train, evaluate, and write a run folder with figures")
    p.set_defaults(func=cmd_train)
    add_config_flags(p, distilled=True)
    r = add_run_folder_flags(p)
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
    add_data_args(p)


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
    r = add_run_folder_flags(p, what="sweep")
    r.add_argument("--seeds", type=int, help="seeds per grid point (2)")
    add_data_args(p)


def _teacher_of(
    args: argparse.Namespace, config: TrainConfig, resume: Run | None
) -> tuple[Path, Model] | tuple[None, None]:
    """The teacher given by `--teacher`, or (resuming) the one the run folder names."""
    where = args.teacher
    if where is None and resume is not None:
        where = resume.teacher()
    if where is None:
        return None, None
    try:
        return open_teacher(where, config)
    except RunError as e:
        raise UsageError(f"--teacher {where}: {e}") from None


def cmd_train(args: argparse.Namespace) -> int:
    resume = resumed(args, "run")
    if resume is not None:
        config, members, out = resume.config, resume.choice, args.out or resume.folder
    else:
        config, out = config_from_args(args), args.out or default_folder()
        members = None if args.seeds is None else Seeds(member_seeds(config, args.seeds))
    if args.distilled and args.teacher is None and resume is None:
        if not args.overwrite:  # refused before its teacher trains, not minutes after
            refuse_results(out)
        status = _train_the_teacher(args, config, out / TEACHER_FOLDER)
        if status:
            return status
        args.teacher = str(out / TEACHER_FOLDER)
    return _train(args, config, members, out, resume)


TEACHER_FOLDER = "teacher"
"""Where `train --distilled` trains its teacher, inside the student's run folder."""


def _train_the_teacher(args: argparse.Namespace, student: TrainConfig, where: Path) -> int:
    """`--distilled` without `--teacher`: train `TrainConfig.teacher()` into `where`
    (holding out the student's splits, so that no held-out image taught it), or reuse
    the finished run there."""
    if (where / "summary.json").is_file() and not args.overwrite:
        console.print(f"teacher: {where}, trained before (--overwrite trains it again)")
        return 0
    config = TrainConfig.teacher(
        seed=student.seed,
        validation_size=student.validation_size,
        calibration_size=student.calibration_size,
    )
    length = f"{config.epochs} epoch{'s' * (config.epochs != 1)}"
    console.print(f"teacher: a CNN ({length}), into {where}", highlight=False)
    own = argparse.Namespace(**{**vars(args), "teacher": None, "tensorboard": False})
    return _train(own, config, None, where, None)


def _train(args, config: TrainConfig, members, out: Path, resume: Run | None) -> int:
    teacher_path, teacher = _teacher_of(args, config, resume)
    fm = load_data(args)
    splits, state = run_splits(config, fm), resume.state if resume else None

    def train(callbacks):
        return train_run(
            config, splits, members=members, state=state, callback=callbacks, teacher=teacher
        )

    configs = None if members is None else members.configs(config)
    summaries = []  # the summary the folder writes, for its time line
    run = train_in_folder(
        args,
        out,
        config,
        train,
        lambda folder, r: summaries.append(folder.finish(r.result, fm, r.calibration)),
        data=fm,
        num_train=len(splits.train),
        members=members,
        start=resume.step if resume else 0,
        command="train",
        describe=functools.partial(_describe_run, config, configs, teacher_path),
        teacher=teacher_path,
        resume_from=resume.folder if resume else None,
        tensorboard=args.tensorboard,
        profile=args.profile,
    )
    if isinstance(run, int):
        return run
    print_results(run.result, out, summaries[0]["seconds"])
    if run.calibration is not None:
        console.print(
            f"calibrated on {run.calibration.held_out:,} held-out images: temperature "
            f"{run.calibration.temperature:.3f}; inputs unlike the training images are flagged",
            highlight=False,
        )
    return 0


def _describe_run(config: TrainConfig, members, teacher: Path | None, total: int) -> str:
    length = f"{config.epochs} epochs ({total:,} steps)" if config.epochs else f"{total:,} steps"
    who = f"seed {config.seed}"
    if members:
        who = f"{len(members)} members in one program (seeds {describe_seeds(members)})"
    held = ""
    if config.calibration_size:
        held = f", {config.calibration_size:,} images held out to calibrate"
    taught = f", distilled from {teacher}" * (teacher is not None)
    return f"{length}, {config.precision}, {who}{held}{taught}"


def describe_seeds(members) -> str:
    seeds = sorted({c.seed for c in members})
    if seeds == list(range(seeds[0], seeds[-1] + 1)) and len(seeds) > 2:
        return f"{seeds[0]}-{seeds[-1]}"
    return ",".join(map(str, seeds))


def print_results(result: TrainResult, out: Path, seconds: dict[str, float]) -> None:
    """The test results (each member's, for an ensemble), the throughput, and where the
    run's wall time went (`seconds`, as its summary records them)."""
    test, eps = result.test, result.examples_per_sec
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
            "gradient, on_nonfinite='skip')",
            highlight=False,
        )
    per = "model-examples/sec" if result.num_members else "examples/sec"
    console.print(
        f"{eps:,.0f} {per}, {eps * TOKENS_PER_EXAMPLE:,.0f} tokens/sec projected "
        f"({TOKENS_PER_EXAMPLE} tokens, 7 x 7 patches, per image); compile "
        f"{result.compile_seconds:.2f} s, train {result.train_seconds:.2f} s\n"
        f"wrote {out}/: config.json, history.jsonl, summary.json, {CHECKPOINT_NAME}"
        f"{' (all members)' if result.num_members else ''}, figures",
        highlight=False,
    )
    parts = ", ".join(f"{k.replace('_', ' ')} {v:.1f}" for k, v in seconds.items())
    console.print(
        f"time (s): {parts}; examples/sec counts the training calls' wall time", highlight=False
    )


def cmd_sweep(args: argparse.Namespace) -> int:
    grid = {name: getattr(args, name) for name in BATCHED if getattr(args, name) is not None}
    resume = resumed(args, "sweep", members=True)
    if resume is not None:
        config, out = resume.config, args.out or resume.folder
        grid, seeds = grid_of(resume.members or ())
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
            config = config.with_changes(validation_size=SWEEP_VALIDATION)
        seeds, out = (
            member_seeds(config, 2 if args.seeds is None else args.seeds),
            args.out or default_folder(),
        )
    members = Grid(grid, seeds)
    configs = members.configs(config)

    def describe(total: int) -> str:
        shown = "; ".join(f"{k} {', '.join(f'{v:g}' for v in vs)}" for k, vs in grid.items())
        return (
            f"{shown}; seeds {', '.join(map(str, seeds))}: {len(configs)} members in one "
            f"program, {total:,} steps each, ranked on {config.validation_size:,} "
            "validation images"
        )

    fm = load_data(args)
    splits, state = run_splits(config, fm), resume.state if resume else None
    result = train_in_folder(
        args,
        out,
        config,
        lambda cbs: sweep(config, splits, grid, seeds, state=state, callback=cbs),
        lambda folder, r: folder.finish_sweep(r),
        data=fm,
        num_train=len(splits.train),
        members=members,
        start=resume.step if resume else 0,
        resume_from=resume.folder if resume else None,
        command="sweep",
        describe=describe,
    )
    if isinstance(result, int):
        return result
    console.print(result.to_markdown(), markup=False, highlight=False)
    console.print(f"wrote {out}/: sweep.md, sweep.json, sweep_heatmap.png, checkpoint.eqx, ...")
    return 0
