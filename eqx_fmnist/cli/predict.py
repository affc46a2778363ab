"""`eqx-fmnist predict`: users' photos prepared as Fashion-MNIST was made, calibrated
probabilities, and a flag for inputs unlike the training data."""

import argparse
import json
from pathlib import Path

import numpy as np

from .. import data as data_mod
from ..answers import Answer
from ..export import is_export, load_artifact
from ..plots import plot_explanation, save_figure, save_pixels
from ..runs import Run, distinct_stems, refuse_overwriting
from .common import UsageError, console
from .flags import add_tta_arg

NOT_CALIBRATED = (
    "probabilities are not calibrated and unusual inputs are not flagged: train with "
    "--calibrate 5000 for both"
)


def add_predict_parser(sub) -> None:
    p = sub.add_parser(
        "predict",
        help="classify your own photos (PNG, JPEG, ...), saying how far to trust each answer",
        description="Each photo is prepared as Fashion-MNIST's images were made (trimmed, "
        "longest edge to 28, sharpened, centred, negated when the background is light), "
        "then classified. A run trained with --calibrate shows calibrated probabilities and "
        "flags inputs unlike the training data.",
    )
    p.set_defaults(func=cmd_predict, elsewhere="--show DIR, --explain DIR")
    p.add_argument("checkpoint", metavar="RUN_DIR_CHECKPOINT_OR_ARTIFACT")
    p.add_argument("images", metavar="IMAGE", nargs="+")
    p.add_argument(
        "--invert",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="negate the photo (default: when its background is light)",
    )
    p.add_argument("--top", type=int, default=3, help="classes to show per image (3)")
    p.add_argument("--members", action="store_true", help="an ensemble's: each member's guess")
    p.add_argument("--json", action="store_true", help="one JSON object per image, for scripts")
    p.add_argument("--overwrite", action="store_true", help="replace images --show writes")
    saves = {
        "--show": "what the model saw, IMAGE.prepared.png, in DIR (default: .)",
        "--explain": "which pixels made the model say it (integrated gradients), "
        "IMAGE.explained.png, in DIR (default: .); needs a checkpoint",
    }
    for flag, what in saves.items():
        p.add_argument(
            flag, metavar="DIR", nargs="?", const=Path("."), type=Path, help=f"save {what}"
        )
    add_tta_arg(p)


def _answer(where: str, flat: np.ndarray, args: argparse.Namespace) -> Answer:
    """What a run (its calibrated model, or ensemble) or an exported artifact says."""
    if not is_export(where):
        run = Run.open(where)
        explained = args.explain is not None
        return run.answer(flat, tta=args.tta, members=args.members, attributions=explained)
    if args.explain is not None:
        raise UsageError(
            f"{where}: --explain needs the model's gradients, which an exported "
            "artifact does not give: pass the run folder or its checkpoint."
        )
    return load_artifact(where).answer(flat, tta=args.tta)


def cmd_predict(args: argparse.Namespace) -> int:
    if args.top < 1:
        raise ValueError(f"--top must be at least 1, but got {args.top}.")
    names = distinct_stems(args.images)  # a/x.png and b/x.png: x and x-2
    saved = {"prepared": args.show, "explained": args.explain}
    writes = {k: [d / f"{n}.{k}.png" for n in names] for k, d in saved.items() if d is not None}
    refuse_overwriting([p for paths in writes.values() for p in paths], overwrite=args.overwrite)
    prepared = [data_mod.prepare_image(p, invert=args.invert) for p in args.images]
    flat = np.stack([p.pixels.reshape(-1) for p in prepared])
    ans = _answer(args.checkpoint, flat, args)
    for i, (path, p) in enumerate(zip(args.images, ans.probabilities, strict=True)):
        record = {"path": str(path), **ans.record(i, args.top), "inverted": prepared[i].inverted}
        if "prepared" in writes:
            record["prepared"] = str(save_pixels(prepared[i].pixels, writes["prepared"][i]))
        if (e := ans.explained) is not None and "explained" in writes:
            why = f"{Path(path).name}: why {data_mod.CLASS_NAMES[e.target[i]]}?"
            attributions = e.attributions[i].reshape(28, 28)
            figure = plot_explanation(
                prepared[i].pixels, attributions, p, int(e.target[i]), title=why
            )
            record["explained"] = str(save_figure(figure, writes["explained"][i]))
        if args.json:
            print(json.dumps(record))
            continue
        _print_line(record)
    if not args.json and not ans.calibrated and not is_export(args.checkpoint):
        console.print(f"({NOT_CALIBRATED})", markup=False)
    return 0


def _print_line(record: dict) -> None:
    """One line per image whatever the terminal's width: scripts read it line by line."""
    guesses = ", ".join(f"{t['class']} {t['probability']:.1%}" for t in record["top"])
    notes = [f"members: {record['members']}"] if "members" in record else []
    if record["set"] is not None:
        notes.append(f"{record['set_coverage']:.0%} set: {', '.join(record['set']) or 'empty'}")
    if record["unusual"]:
        notes.append("UNUSUAL INPUT: unlike the training images, do not trust this answer")
    if record["inverted"]:
        notes.append("inverted")
    if "prepared" in record:
        notes.append(f"saw {record['prepared']}")
    if "explained" in record:
        notes.append(f"why: {record['explained']}")
    line = f"{record['path']}: {guesses}" + (f" ({'; '.join(notes)})" if notes else "")
    console.print(line, markup=False)  # never broken: the console's rule
