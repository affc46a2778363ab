"""`eqx-fmnist export`: a run's model (or ensemble) as an artifact that runs without this
library, checked on all 10,000 test images before it is written."""

import argparse
import json
from pathlib import Path

import numpy as np

from ..checkpoint import load_checkpoint
from ..dataset import to_datasets
from ..evaluation import evaluate
from ..export import FORMATS, export_model, load_artifact, manifest_path
from .common import add_data_args, add_tta_arg, checkpoint_path, console, load_data, run_views
from .evaluate import load_calibration


def add_export_parser(sub) -> None:
    p = sub.add_parser(
        "export",
        help="write the model as StableHLO, safetensors, ONNX or a web page, checked on the "
        "test set first",
        description="The model (or ensemble) of a run as an artifact with a JSON manifest "
        "beside it. The artifact must predict the same class as the library on all 10,000 "
        "test images, or nothing is written.",
    )
    p.set_defaults(func=cmd_export)
    p.add_argument("run", metavar="RUN_DIR_OR_CHECKPOINT")
    p.add_argument("--format", choices=list(FORMATS), default="stablehlo",
                   help="stablehlo (runs with jax alone; default), safetensors (weights), onnx "
                   "(onnxruntime; pip install 'eqx_fmnist[onnx]') or html (one page that runs "
                   "in a browser, offline)")  # fmt: skip
    p.add_argument("--out", type=Path, help="the artifact (default: RUN/model.<format>)")
    add_tta_arg(p)
    add_data_args(p)


def cmd_export(args: argparse.Namespace) -> int:
    path = checkpoint_path(args.run)
    ckpt, calibration = load_checkpoint(path), load_calibration(path)
    views = run_views(args.tta, calibration, ckpt.config)
    fm = load_data(args)
    out = args.out or path.parent / f"model{FORMATS[args.format].suffix}"
    (_, test), state = to_datasets(fm), ckpt.state
    test_result = evaluate(state.eval_model, test, policy=state.policy, tta=views)
    with console.status(f"exporting and checking on {len(test):,} test images ..."):
        manifest = export_model(
            state.eval_model, state.policy, ckpt.config, out, format=args.format,
            calibration=calibration, tta=views or (),  # () : none, even if the config has some
            check_images=fm.test_images.reshape(len(fm.test_images), -1),
            extra={"test_accuracy": test_result.accuracy, "step": ckpt.step,
                   "trained": f"{ckpt.step:,} steps"},
        )  # fmt: skip
    parity = manifest["parity"]
    console.print(
        f"wrote {out} ({manifest['bytes']:,} bytes) and {manifest_path(out).name}: "
        f"{parity['mismatches']} of {parity['images']:,} test images predicted differently "
        f"from the library, largest logit difference {parity['max_logit_difference']:.1e}; "
        f"{manifest['export_seconds']:.1f} s",
        highlight=False,
    )
    if parity["flag_mismatches"] is not None:
        console.print(
            f"the trust flag: {parity['flag_mismatches']} verdicts differ, largest relative "
            f"score difference {parity['max_score_difference']:.1e}", highlight=False,
        )  # fmt: skip
    if args.format == "html":
        console.print(f"open it in a browser: {out.resolve().as_uri()}", highlight=False)
    return 0


def is_artifact(path: str) -> bool:
    """A StableHLO artifact (a file with a manifest beside it), not a checkpoint."""
    return Path(path).is_file() and manifest_path(path).is_file()


def predict_with_artifact(path: str, flat: np.ndarray) -> tuple[dict[str, np.ndarray], dict]:
    """Every output of a StableHLO artifact (probabilities and, for a calibrated run,
    the trust flag) and its manifest; only `jax` is needed to run it."""
    manifest = json.loads(manifest_path(path).read_text())
    if manifest.get("format") != "stablehlo":
        raise ValueError(
            f"{path} is a {manifest.get('format')} export; predict runs a StableHLO "
            "artifact or a run folder."
        )
    artifact = load_artifact(path)
    return artifact.run(np.asarray(flat)), artifact.manifest
