"""`eqx-fmnist export`: a run's model (or ensemble) as an artifact that runs without this
library, checked on all 10,000 test images before it is written."""

import argparse
import functools

from ..export import FORMATS, manifest_path
from ..runs import Run
from .common import console, load_data
from .flags import add_data_args, add_tta_arg, out_path


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
    p.add_argument(
        "--format",
        choices=list(FORMATS),
        default="stablehlo",
        help="stablehlo (runs with jax alone; default), safetensors (weights), onnx "
        "(onnxruntime; pip install 'eqx_fmnist[onnx]') or html (one page that runs "
        "in a browser, offline)",
    )
    p.add_argument("--out", type=out_path, help="the artifact (default: RUN/model.<format>)")
    p.add_argument("--overwrite", action="store_true", help="replace an artifact already there")
    add_tta_arg(p)
    add_data_args(p)


def cmd_export(args: argparse.Namespace) -> int:
    run = Run.open(args.run)
    with console.status("exporting and checking on the test images ..."):  # after the checks
        options = {"tta": args.tta, "overwrite": args.overwrite, "format": args.format}
        out, manifest = run.export(args.out, data=functools.partial(load_data, args), **options)
    parity = manifest["parity"]
    console.print(
        f"wrote {out} ({manifest['bytes']:,} bytes) and {manifest_path(out).name}: "
        f"{parity['mismatches']} of {parity['images']:,} test images predicted differently "
        f"from the library{_ties(parity)}, largest logit difference {parity['max_logit_difference']:.1e}; "
        f"{manifest['export_seconds']:.1f} s"
    )
    if parity["flag_mismatches"] is not None:
        console.print(
            f"the trust flag: {parity['flag_mismatches']} verdicts differ, largest relative "
            f"score difference {parity['max_score_difference']:.1e}"
        )
    if args.format == "html":
        console.print(f"open it in a browser: {out.resolve().as_uri()}")
    return 0


def _ties(parity: dict) -> str:
    """What of the differing classes the check's rounding explains, when any does."""
    tied = parity.get("tied", 0)
    return f" ({tied} of them near ties of two classes)" if tied else ""
