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
from ..attributions import Explanation, explain
from ..checkpoint import load_checkpoint
from ..evaluation import member_probabilities, predict_proba
from ..trust import features
from .common import UsageError, add_tta_arg, checkpoint_path, console, run_views
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
    p.add_argument("--explain", metavar="DIR", nargs="?", const=Path("."), type=Path,
                   help="save which pixels made the model say it (integrated gradients), "
                   "IMAGE.explained.png, in DIR (default: .); needs a checkpoint")  # fmt: skip
    add_tta_arg(p)


@dataclasses.dataclass
class _Answers:
    """What a checkpoint or an artifact says of the prepared images."""

    probs: np.ndarray
    scores: np.ndarray | None = None
    flags: np.ndarray | None = None
    threshold: float | None = None
    members: list[str] | None = None  # an ensemble's guesses, one line per image
    uncalibrated: bool = False  # a checkpoint without a calibration
    explained: Explanation | None = None  # with --explain: attributions of the top class
    sets: np.ndarray | None = None  # a calibrated run's conformal sets, (n, 10) booleans
    coverage: float | None = None  # what the sets promise


def _from_artifact(artifact: str, flat: np.ndarray, tta: str | None) -> _Answers:
    """An exported model's answer: no checkpoint, no model code."""
    outputs, manifest = predict_with_artifact(artifact, flat)
    computed = manifest.get("tta", {}).get("name", "none")  # absent before the views
    if tta is not None and tta != computed:
        raise UsageError(f"{artifact}: the artifact computes --tta {computed}, not {tta} (its "
                         "views are fixed when it is exported): leave --tta out.")  # fmt: skip
    if outputs.get("probabilities") is None:  # every artifact returns them (export checks)
        raise UsageError(f"{artifact}: the artifact returned no probabilities.")
    threshold = manifest["trust"]["threshold"] if manifest.get("trust") else None
    sets = manifest.get("prediction_sets")  # absent from artifacts made before the sets
    return _Answers(outputs["probabilities"], outputs.get("trust_score"), outputs.get("unusual"),
                    threshold, sets=outputs.get("prediction_set"),
                    coverage=sets["coverage"] if sets else None)  # fmt: skip


def _from_checkpoint(where: str, flat: np.ndarray, args: argparse.Namespace) -> _Answers:
    """One model's calibrated probabilities, or the ensemble's (the mean of its
    members'), with the trust flag when the run was calibrated."""
    path, members, explain_ = checkpoint_path(where), args.members, args.explain is not None
    ckpt, calibration = load_checkpoint(path), load_calibration(path)
    model, policy, x = ckpt.state.eval_model, ckpt.state.policy, jnp.asarray(flat)
    tta = run_views(args.tta, calibration, ckpt.config)
    temperature = calibration.temperature if calibration else 1.0
    probs = predict_proba(model, x, policy=policy, temperature=temperature, tta=tta)
    out = _Answers(np.asarray(probs), uncalibrated=calibration is None)
    if ckpt.members is not None and members:
        guesses = np.asarray(member_probabilities(model, x, policy=policy)).argmax(axis=-1)
        out.members = [", ".join(data_mod.CLASS_NAMES[c] for c in g) for g in guesses.T]
    if explain_:  # the class shown first: the temperature does not change the order
        out.explained = explain(model, x, target=out.probs.argmax(axis=-1), policy=policy)
    if calibration is not None:
        feats = features(model, x, policy=policy)
        out.scores, out.flags = calibration.trust.scores(feats), calibration.trust.flags(feats, flat)
        out.threshold = calibration.trust.threshold
        if calibration.sets is not None:
            out.sets, out.coverage = calibration.sets.sets(out.probs), calibration.sets.coverage
    return out


def cmd_predict(args: argparse.Namespace) -> int:
    if args.top < 1:
        raise ValueError(f"--top must be at least 1, but got {args.top}.")
    if args.explain is not None and is_artifact(args.checkpoint):
        raise UsageError(
            f"{args.checkpoint}: --explain needs the model's gradients, which an exported "
            "artifact does not give: pass the run folder or its checkpoint."
        )
    prepared = [data_mod.prepare_image(p, invert=args.invert) for p in args.images]
    flat = np.stack([p.pixels.reshape(-1) for p in prepared])
    if is_artifact(args.checkpoint):
        ans = _from_artifact(args.checkpoint, flat, args.tta)
    else:
        ans = _from_checkpoint(args.checkpoint, flat, args)
    for folder in (args.show, args.explain):
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
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
            "set": None if ans.sets is None else  # most probable first
            [data_mod.CLASS_NAMES[c] for c in np.argsort(p)[::-1] if ans.sets[i, c]],
            "set_coverage": ans.coverage,
        }  # fmt: skip
        if args.show is not None:
            shown = args.show / f"{Path(path).stem}.prepared.png"
            save_figure_png(prepared[i].pixels, shown)
            record["prepared"] = str(shown)
        if ans.explained is not None and args.explain is not None:
            shown = _save_explanation(ans, i, prepared[i].pixels, p, path, args.explain)
            record["explained"] = str(shown)
        if ans.members:
            record["members"] = ans.members[i]
        if args.json:
            print(json.dumps(record))
            continue
        guesses = ", ".join(f"{t['class']} {t['probability']:.1%}" for t in record["top"])
        notes = [f"members: {ans.members[i]}"] if ans.members else []
        if record["set"] is not None:
            notes.append(f"{ans.coverage:.0%} set: {', '.join(record['set']) or 'empty'}")
        if record["unusual"]:
            notes.append("UNUSUAL INPUT: unlike the training images, do not trust this answer")
        notes += ["inverted"] * prepared[i].inverted + (
            [f"saw {record['prepared']}"] if args.show else []
        ) + ([f"why: {record['explained']}"] if ans.explained is not None else [])
        # One line per image whatever the terminal's width: scripts read it line by line.
        console.print(f"{path}: {guesses}" + (f" ({'; '.join(notes)})" if notes else ""),
                      markup=False, highlight=False, soft_wrap=True)  # fmt: skip
    if not args.json and ans.uncalibrated:
        console.print(f"({NOT_CALIBRATED})", markup=False, highlight=False)
    return 0


def _save_explanation(ans: _Answers, i: int, pixels, probs, path, folder: Path) -> Path:
    """Image `i`'s attribution figure, `IMAGE.explained.png` in `folder`."""
    from ..plots import plot_explanation, save_figure

    assert ans.explained is not None
    e = ans.explained
    fig = plot_explanation(pixels, e.attributions[i].reshape(28, 28), probs, int(e.target[i]),
                           title=f"{Path(path).name}: why {data_mod.CLASS_NAMES[e.target[i]]}?")  # fmt: skip
    return save_figure(fig, folder / f"{Path(path).stem}.explained.png")


def save_figure_png(pixels: np.ndarray, path: Path) -> None:
    """The 28 x 28 input, enlarged 8x without smoothing, as a PNG (atomically)."""
    from ..fileio import atomic_write

    big = Image.fromarray(pixels).resize((224, 224), Image.Resampling.NEAREST)
    with atomic_write(path) as f:
        big.save(f, format="PNG")
