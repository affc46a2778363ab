"""`eqx-fmnist predict`: users' photos prepared as Fashion-MNIST was made, calibrated
probabilities, and a flag for inputs unlike the training data."""

import argparse
import json
from pathlib import Path

import numpy as np

from .. import data as data_mod
from ..answers import Answer
from ..attributions import Explanation
from ..export import is_export, load_artifact, read_manifest
from ..plots import plot_explanation, save_figure, save_pixels
from ..runs import Run
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
    p.set_defaults(func=cmd_predict)
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
    manifest = read_manifest(where)
    if manifest.get("format") != "stablehlo":
        raise UsageError(
            f"{where} is a {manifest.get('format')} export; predict runs a StableHLO "
            "artifact or a run folder."
        )
    artifact = load_artifact(where)
    if args.tta is not None and args.tta != artifact.views:
        raise UsageError(
            f"{where}: the artifact computes --tta {artifact.views}, not {args.tta} (its "
            "views are fixed when it is exported): leave --tta out."
        )
    return artifact.answer(flat)


def cmd_predict(args: argparse.Namespace) -> int:
    if args.top < 1:
        raise ValueError(f"--top must be at least 1, but got {args.top}.")
    prepared = [data_mod.prepare_image(p, invert=args.invert) for p in args.images]
    flat = np.stack([p.pixels.reshape(-1) for p in prepared])
    ans = _answer(args.checkpoint, flat, args)
    members = None
    if ans.member_probabilities is not None:
        guesses = ans.member_probabilities.argmax(axis=-1).T
        members = [", ".join(data_mod.CLASS_NAMES[c] for c in g) for g in guesses]
    for folder in (args.show, args.explain):
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
    for i, (path, p) in enumerate(zip(args.images, ans.probabilities, strict=True)):
        record = _record(ans, i, p, str(path), args.top, prepared[i].inverted)
        if args.show is not None:
            shown = args.show / f"{Path(path).stem}.prepared.png"
            save_pixels(prepared[i].pixels, shown)
            record["prepared"] = str(shown)
        if ans.explained is not None and args.explain is not None:
            shown = _save_explanation(ans.explained, i, prepared[i].pixels, p, path, args.explain)
            record["explained"] = str(shown)
        if members:
            record["members"] = members[i]
        if args.json:
            print(json.dumps(record))
            continue
        _print_line(record, members[i] if members else None, ans.coverage)
    if not args.json and not ans.calibrated and not is_export(args.checkpoint):
        console.print(f"({NOT_CALIBRATED})", markup=False, highlight=False)
    return 0


def _record(ans: Answer, i: int, p: np.ndarray, path: str, top: int, inverted: bool) -> dict:
    """Image `i`'s answer as `--json` prints it: the top classes, the flag, the set."""
    order = np.argsort(p)[::-1]
    in_set = None
    if ans.prediction_set is not None:  # most probable first
        in_set = [data_mod.CLASS_NAMES[c] for c in order if ans.prediction_set[i, c]]
    return {
        "path": path,
        "top": [
            {"class": data_mod.CLASS_NAMES[c], "probability": float(p[c])} for c in order[:top]
        ],
        "calibrated": ans.calibrated,
        "unusual": None if ans.unusual is None else bool(ans.unusual[i]),
        "score": None if ans.trust_score is None else float(ans.trust_score[i]),
        "threshold": ans.threshold,
        "inverted": inverted,
        "set": in_set,
        "set_coverage": ans.coverage,
    }


def _print_line(record: dict, members: str | None, coverage: float | None) -> None:
    """One line per image whatever the terminal's width: scripts read it line by line."""
    guesses = ", ".join(f"{t['class']} {t['probability']:.1%}" for t in record["top"])
    notes = [f"members: {members}"] if members else []
    if record["set"] is not None:
        notes.append(f"{coverage:.0%} set: {', '.join(record['set']) or 'empty'}")
    if record["unusual"]:
        notes.append("UNUSUAL INPUT: unlike the training images, do not trust this answer")
    notes += ["inverted"] * record["inverted"]
    notes += [f"saw {record['prepared']}"] if "prepared" in record else []
    notes += [f"why: {record['explained']}"] if "explained" in record else []
    console.print(
        f"{record['path']}: {guesses}" + (f" ({'; '.join(notes)})" if notes else ""),
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


def _save_explanation(e: Explanation, i: int, pixels, probs, path, folder: Path) -> Path:
    """Image `i`'s attribution figure, `IMAGE.explained.png` in `folder`."""
    fig = plot_explanation(
        pixels,
        e.attributions[i].reshape(28, 28),
        probs,
        int(e.target[i]),
        title=f"{Path(path).name}: why {data_mod.CLASS_NAMES[e.target[i]]}?",
    )
    return save_figure(fig, folder / f"{Path(path).stem}.explained.png")
