"""The flags the commands share. The training flags are generated from
[`TrainConfig`][eqx_fmnist.config.TrainConfig]'s fields: one `--field-name` per field
(plus the field's extra spellings), typed, with its help text and default. Adding a
field to `TrainConfig` adds its flag. Beside them: the data flags, `--tta`, the run
folder's flags, and `--resume`'s rule (a resumed run keeps its saved config)."""

import argparse
import typing
from collections.abc import Callable
from pathlib import Path

from ..config import _FIELDS, TrainConfig, field_type, literal_choices
from ..runs import Training
from ..views import TTA_VIEWS
from .common import UsageError, load_data


def out_path(text: str) -> Path:
    """`--out`: a path, not an empty string (which would be the working folder)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("give a folder, not an empty string")
    return Path(text)


def add_data_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", help="the folder with the four IDX files (no other is searched)")
    p.add_argument("--no-download", action="store_true", help="fail instead of downloading")


def add_tta_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--tta",
        choices=list(TTA_VIEWS),
        help="test-time augmentation: the image alone (none), with its mirror (mirror), "
        "and 1-pixel moves (shifts); default: the run's",
    )


def add_run_folder_flags(
    p: argparse.ArgumentParser, *, what: str = "run"
) -> argparse._ArgumentGroup:
    """The flags every command that writes a run folder takes."""
    r = p.add_argument_group(f"{what} folder")
    r.add_argument("--out", type=out_path, help=f"{what} folder (default: runs/<timestamp>)")
    r.add_argument("--overwrite", action="store_true", help="reuse a folder that has results")
    r.add_argument("--resume", metavar="CHECKPOINT", help=f"continue a {what} from its checkpoint")
    every = "checkpoint cadence: 60s, 5m or 500steps; and at the end, and on Ctrl-C (60s; a "
    every += "resume: the run's own)"
    r.add_argument("--checkpoint-every", help=every)
    return r


def _comma_separated(kind: type) -> Callable[[str], tuple]:
    """A flag's parser of comma-separated values of `kind` (`int` or `float`)."""
    what = "ints" if kind is int else "numbers"

    def parse(text: str) -> tuple:
        try:
            return tuple(kind(part) for part in text.split(","))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected comma-separated {what}, not {text!r}"
            ) from None

    return parse


def add_config_flags(
    parser: argparse.ArgumentParser, *, lists: tuple[str, ...] = (), distilled: bool = False
) -> None:
    """Add a flag for every field to `parser`, and `--config FILE`, `--codelab`,
    `--best` and (with `distilled`, for `train`) `--distilled`.

    Every flag defaults to `None`, so [`config_from_args`][eqx_fmnist.cli.flags.config_from_args]
    can tell the flags given from those left out. The number fields named in `lists`
    take comma-separated values instead (a sweep's grid), as lists of floats.
    """
    group = parser.add_argument_group("training (defaults: the default recipe, TrainConfig())")
    defaults = TrainConfig()
    for name, f in _FIELDS.items():
        kind, _ = field_type(name)
        default = getattr(defaults, name)
        shown = ",".join(map(str, default)) if isinstance(default, tuple) else default
        help_text = f.metadata["help"].replace("%", "%%")
        if default is not None and "default" not in help_text:
            help_text += f" (default: {shown})"
        options: dict[str, typing.Any] = {"dest": name, "default": None, "help": help_text}
        if literal_choices(name):
            options["choices"] = literal_choices(name)
        elif kind is bool:
            options["action"] = argparse.BooleanOptionalAction
        elif typing.get_origin(kind) is tuple:
            options |= {"type": _comma_separated(int), "metavar": "N,N"}
        elif name in lists:
            options |= {"type": _comma_separated(float), "metavar": "X,X"}
            options["help"] = f"values to sweep, comma-separated: {help_text}"
        else:
            options["type"] = kind
        group.add_argument(f"--{name.replace('_', '-')}", *f.metadata["flags"], **options)
    group.add_argument("--config", type=Path, help="start from a JSON config (flags override it)")
    group.add_argument("--codelab", action="store_true", help="start from the codelab's run")
    best = "start from the strongest recipe trained alone, TrainConfig.best() (400 epochs)"
    group.add_argument("--best", action="store_true", help=best)
    if distilled:
        group.add_argument(
            "--distilled",
            action="store_true",
            help="the strongest plain MLP, TrainConfig.distilled(): best() learning from a "
            "CNN teacher (trained first into OUT/teacher unless --teacher names one)",
        )


BASES = {
    "config": lambda args: TrainConfig.read(args.config),
    "codelab": lambda args: TrainConfig.codelab(),
    "best": lambda args: TrainConfig.best(),
    "distilled": lambda args: TrainConfig.distilled(),
}
"""The flags that choose the config the field flags change, and the config each gives."""


def given_flags(args: argparse.Namespace) -> list[str]:
    """The flags given on the command line that choose a new run (its config, members or
    teacher), as `--names`."""
    names = [*_FIELDS, "seeds", "teacher"]
    given = [f"--{n.replace('_', '-')}" for n in names if getattr(args, n, None) is not None]
    return given + [f"--{b}" for b in BASES if getattr(args, b, None) not in (None, False)]


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The config the flags describe: the one `--config`, `--codelab`, `--best` or
    `--distilled` gives (else the recipe, `TrainConfig()`), with every field flag given
    on top (`--steps` replaces the base's `epochs`)."""
    bases = [b for b in BASES if getattr(args, b, None) not in (None, False)]
    if len(bases) > 1:
        names = " and ".join(f"--{b}" for b in bases)
        raise ValueError(f"give one of --config, --codelab, --best and --distilled, not {names}.")
    base = BASES[bases[0]](args) if bases else TrainConfig()
    given = {name: getattr(args, name) for name in _FIELDS if getattr(args, name) is not None}
    return base.with_changes(**given)


def resumed(args: argparse.Namespace, kind: str) -> Training | None:
    """`--resume`'s run of `kind` (`Training.resume` with the folder's options), or `None`;
    the flags that would change its saved config are refused, and the data are loaded
    only for a checkpoint of that kind."""
    if not args.resume:
        return None
    if given := given_flags(args):
        drop = " ".join(given)
        raise UsageError(f"--resume continues the saved run with its saved config; drop {drop}.")
    options = folder_options(args) | {"out": args.out, "data": lambda: load_data(args)}
    return Training.resume(args.resume, kind=kind, **options)


def folder_options(args: argparse.Namespace) -> dict[str, typing.Any]:
    """The run folder's options from its flags, for `Training.new` and `Training.resume`."""
    return {
        "overwrite": args.overwrite,
        "checkpoint_every": args.checkpoint_every,  # None: a resume keeps its run's
        "tensorboard": getattr(args, "tensorboard", False),
    }
