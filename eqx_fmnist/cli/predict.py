"""`eqx-fmnist predict`: users' photos prepared as Fashion-MNIST was made, calibrated
probabilities, and a flag for inputs unlike the training data."""

import argparse
import dataclasses
import json
from pathlib import Path

import jax.numpy as jnp
import numpy as np
from PIL import Image

from .. import data as data_mod
from ..checkpoint import load_checkpoint
from ..evaluation import member_probabilities, predict_proba
from ..trust import features
from .common import UsageError, checkpoint_path, console
from .evaluate import load_calibration
from .export import is_artifact, predict_with_artifact

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
    p.add_argument("--invert", action=argparse.BooleanOptionalAction, default=None,
                   help="negate the photo (default: when its background is light)")  # fmt: skip
    p.add_argument("--top", type=int, default=3, help="classes to show per image (3)")
    p.add_argument("--members", action="store_true", help="an ensemble's: each member's guess")
    p.add_argument("--json", action="store_true", help="one JSON object per image, for scripts")
    p.add_argument("--show", metavar="DIR", nargs="?", const=Path("."), type=Path,
                   help="save what the model saw, IMAGE.prepared.png, in DIR (default: .)")  # fmt: skip


@dataclasses.dataclass
class _Answers:
    """What a checkpoint or an artifact says of the prepared images."""

    probs: np.ndarray
    scores: np.ndarray | None = None
    flags: np.ndarray | None = None
    threshold: float | None = None
    members: list[str] | None = None  # an ensemble's guesses, one line per image
    uncalibrated: bool = False  # a checkpoint without a calibration


def _from_artifact(artifact: str, flat: np.ndarray) -> _Answers:
    """An exported model's answer: no checkpoint, no model code."""
    outputs, manifest = predict_with_artifact(artifact, flat)
    if outputs.get("probabilities") is None:  # every artifact returns them (export checks)
        raise UsageError(f"{artifact}: the artifact returned no probabilities.")
    threshold = manifest["trust"]["threshold"] if manifest.get("trust") else None
    return _Answers(outputs["probabilities"], outputs.get("trust_score"), outputs.get("unusual"),
                    threshold)  # fmt: skip


def _from_checkpoint(where: str, flat: np.ndarray, members: bool) -> _Answers:
    """One model's calibrated probabilities, or the ensemble's (the mean of its
    members'), with the trust flag when the run was calibrated."""
    path = checkpoint_path(where)
    ckpt, calibration = load_checkpoint(path), load_calibration(path)
    model, policy, x = ckpt.state.eval_model, ckpt.state.policy, jnp.asarray(flat)
    temperature = calibration.temperature if calibration else 1.0
    out = _Answers(np.asarray(predict_proba(model, x, policy=policy, temperature=temperature)),
                   uncalibrated=calibration is None)  # fmt: skip
    if ckpt.members is not None and members:
        guesses = np.asarray(member_probabilities(model, x, policy=policy)).argmax(axis=-1)
        out.members = [", ".join(data_mod.CLASS_NAMES[c] for c in g) for g in guesses.T]
    if calibration is not None:
        feats = features(model, x, policy=policy)
        out.scores, out.flags = calibration.trust.scores(feats), calibration.trust.flags(feats, flat)
        out.threshold = calibration.trust.threshold
    return out


def cmd_predict(args: argparse.Namespace) -> int:
    if args.top < 1:
        raise ValueError(f"--top must be at least 1, but got {args.top}.")
    prepared = [data_mod.prepare_image(p, invert=args.invert) for p in args.images]
    flat = np.stack([p.pixels.reshape(-1) for p in prepared])
    if is_artifact(args.checkpoint):
        ans = _from_artifact(args.checkpoint, flat)
    else:
        ans = _from_checkpoint(args.checkpoint, flat, args.members)
    if args.show is not None:
        args.show.mkdir(parents=True, exist_ok=True)
    for i, (path, p) in enumerate(zip(args.images, ans.probs, strict=True)):
        top = np.argsort(p)[::-1][: args.top]
        record = {
            "path": str(path),
            "top": [{"class": data_mod.CLASS_NAMES[c], "probability": float(p[c])} for c in top],
            "calibrated": ans.threshold is not None,
            "unusual": None if ans.flags is None else bool(ans.flags[i]),
            "score": None if ans.scores is None else float(ans.scores[i]),
            "threshold": ans.threshold,
            "inverted": prepared[i].inverted,
        }
        if args.show is not None:
            shown = args.show / f"{Path(path).stem}.prepared.png"
            save_figure_png(prepared[i].pixels, shown)
            record["prepared"] = str(shown)
        if ans.members:
            record["members"] = ans.members[i]
        if args.json:
            print(json.dumps(record))
            continue
        guesses = ", ".join(f"{t['class']} {t['probability']:.1%}" for t in record["top"])
        notes = [f"members: {ans.members[i]}"] if ans.members else []
        if record["unusual"]:
            notes.append("UNUSUAL INPUT: unlike the training images, do not trust this answer")
        notes += ["inverted"] * prepared[i].inverted + (
            [f"saw {record['prepared']}"] if args.show else []
        )
        # One line per image whatever the terminal's width: scripts read it line by line.
        console.print(f"{path}: {guesses}" + (f" ({'; '.join(notes)})" if notes else ""),
                      markup=False, highlight=False, soft_wrap=True)  # fmt: skip
    if not args.json and ans.uncalibrated:
        console.print(f"({NOT_CALIBRATED})", markup=False, highlight=False)
    return 0


def save_figure_png(pixels: np.ndarray, path: Path) -> None:
    """The 28 x 28 input, enlarged 8x without smoothing, as a PNG (atomically)."""
    from ..fileio import atomic_write

    big = Image.fromarray(pixels).resize((224, 224), Image.Resampling.NEAREST)
    with atomic_write(path) as f:
        big.save(f, format="PNG")
