"""ONNX, written node by node with the `onnx` package's `helper` API (no converter).

The graph takes `images uint8[b, 784]` (a named symbolic batch), normalises inside,
runs each member as `Gemm` + `Gelu` (tanh form, as `jax.nn.gelu`) per layer, and
outputs `logits` and `probabilities` (divided by the calibrated temperature); an
ensemble also outputs `member_probabilities` and its logits are the log of the mean
probability; a calibrated model also outputs `trust_score` and `unusual`, computed as
[`Trust.flags`][eqx_fmnist.trust.Trust.flags] does, and `prediction_set` when its
calibration has conformal sets ([`prediction_sets`][eqx_fmnist.conformal.prediction_sets]).

`Gelu` is an ONNX operator from opset 20 (onnxruntime runs it from 1.17). A runtime
without it gets the tanh formula written out at opset 18: `gelu="formula"`, which
[`to_onnx`][eqx_fmnist.export.onnx.to_onnx] falls back to when the installed onnxruntime
cannot load the operator.

Needs the optional extra: `pip install 'eqx_fmnist[onnx]'`.
"""

import math
from typing import Any, Literal

import numpy as np

from .format import ExportFormat, ExportInputs, Outputs
from .manifest import ExportError
from .portable import Portable

GeluForm = Literal["op", "formula"]
OPSETS = {"op": 20, "formula": 18}
IR_VERSION = 9  # what opset 18-20 need; older runtimes refuse newer IR versions
BATCH = "batch"


def require_onnx():
    """`(onnx, onnxruntime)`, or an `ExportError` naming the extra to install."""
    try:
        import onnx
        import onnxruntime
    except ImportError as e:
        raise ExportError(
            f"--format onnx needs the optional extra 'onnx' ({e.name} is not installed): "
            "pip install 'eqx_fmnist[onnx]'"
        ) from None
    return onnx, onnxruntime


class _Graph:
    """Nodes and initializers under unique names."""

    def __init__(self, helper, numpy_helper):
        self.helper = helper
        self.numpy_helper = numpy_helper
        self.nodes = []
        self.initializers = []

    def const(self, name: str, value) -> str:
        """An initializer (once: a name asked for again is the same constant)."""
        if name not in {t.name for t in self.initializers}:
            self.initializers.append(self.numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(self, op_type: str, inputs: list[str], name: str, **attrs) -> str:
        self.nodes.append(self.helper.make_node(op_type, inputs, [name], name=name, **attrs))
        return name

    def gelu(self, x: str, name: str, form: GeluForm) -> str:
        if form == "op":
            return self.op("Gelu", [x], name, approximate="tanh")
        # 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
        cube = self.op("Mul", [self.op("Mul", [x, x], f"{name}/x2"), x], f"{name}/x3")
        inner = self.op("Add", [x, self.op("Mul", [cube, "c_0.044715"], f"{name}/a")], f"{name}/b")
        t = self.op("Tanh", [self.op("Mul", [inner, "c_sqrt_2_over_pi"], f"{name}/c")], f"{name}/t")
        half_x = self.op("Mul", [x, "c_0.5"], f"{name}/h")
        return self.op("Mul", [half_x, self.op("Add", [t, "c_1"], f"{name}/u")], name)


def onnx_model(portable: Portable, *, gelu: GeluForm = "op"):
    """The `onnx.ModelProto` of `portable`; see the module's description."""
    onnx, _ = require_onnx()
    from onnx import TensorProto, helper, numpy_helper

    g = _Graph(helper, numpy_helper)
    f32 = np.float32
    g.const("c_255", f32(255.0))
    if gelu == "formula":
        for name, v in {
            "c_0.5": 0.5,
            "c_1": 1.0,
            "c_0.044715": 0.044715,
            "c_sqrt_2_over_pi": math.sqrt(2 / math.pi),
        }.items():
            g.const(name, f32(v))
    x = g.op("Div", [g.op("Cast", ["images"], "pixels", to=TensorProto.FLOAT), "c_255"], "x")
    logits, feats = _member_nodes(g, portable, x, _view_nodes(g, portable.views, x), gelu)
    outputs = [
        ("logits", [BATCH, 10], TensorProto.FLOAT),
        ("probabilities", [BATCH, 10], TensorProto.FLOAT),
    ]
    if portable.ensemble:
        outputs.append(_ensemble_nodes(g, logits))
    else:
        g.op("Identity", [logits[0]], "logits")
    scaled = g.op("Div", ["logits", g.const("temperature", f32(portable.temperature))], "scaled")
    g.op("Softmax", [scaled], "probabilities", axis=1)
    if portable.trust is not None:
        _trust_nodes(g, portable, feats)
        outputs += [
            ("trust_score", [BATCH], TensorProto.FLOAT),
            ("unusual", [BATCH], TensorProto.BOOL),
        ]
    if portable.set_thresholds is not None:
        outputs.append(_set_nodes(g, portable.set_thresholds))
    graph = helper.make_graph(
        g.nodes,
        "eqx_fmnist",
        [helper.make_tensor_value_info("images", TensorProto.UINT8, [BATCH, 784])],
        [helper.make_tensor_value_info(n, t, s) for n, s, t in outputs],
        initializer=g.initializers,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSETS[gelu])],
        ir_version=IR_VERSION,
        producer_name="eqx_fmnist",
        doc_string="Fashion-MNIST MLP: uint8 pixels in, 0-255.",
    )
    onnx.checker.check_model(model, full_check=True)
    return model


def _member_nodes(
    g: _Graph, portable: Portable, x: str, views: list[str], gelu: GeluForm
) -> tuple[list[str], list[str]]:
    """Each member's logits (with views: the log of its mean probability over them) and
    its hidden features, as node names."""
    k = portable.num_members
    logits = []
    feats = []
    for m, member in enumerate(portable.layers):
        weights = [
            (g.const(f"{p}/weight", w), g.const(f"{p}/bias", b))
            for (w, b), p in (
                (wb, f"member{m}/layer{i}" if k > 1 else f"layer{i}") for i, wb in enumerate(member)
            )
        ]

        def forward(h, name, weights=weights):
            hidden = []
            for i, (w, b) in enumerate(weights):
                h = g.op("Gemm", [h, w, b], f"{name}/layer{i}/gemm", transB=1)
                if i < len(weights) - 1:
                    h = g.gelu(h, f"{name}/layer{i}/gelu", gelu)
                    hidden.append(h)
            return h, hidden

        h, hidden = forward(x, f"member{m}")
        if views:  # the log of the member's mean probability over the views
            each = [forward(v, f"member{m}/view{j}")[0] for j, v in enumerate(views)]
            h = _log_mean_prob(g, each, f"member{m}/views")
        logits.append(h)
        feats.append(g.op("Concat", hidden, f"member{m}/features", axis=1))
    return logits, feats


def _ensemble_nodes(g: _Graph, logits: list[str]):
    """`logits`: the log of the members' mean probability; `member_probabilities`."""
    from onnx import TensorProto

    zero = g.const("axis_0", np.array([0], np.int64))
    each = [
        g.op(
            "Unsqueeze",
            [g.op("LogSoftmax", [z], f"member{m}/log_probs", axis=1), zero],
            f"member{m}/log_probs_1",
        )
        for m, z in enumerate(logits)
    ]
    stacked = g.op("Concat", each, "member_log_probs", axis=0)
    g.op("Exp", [stacked], "member_probabilities")
    total = g.op("ReduceLogSumExp", [stacked, zero], "log_total", keepdims=0)
    g.op("Sub", [total, g.const("log_members", np.float32(math.log(len(logits))))], "logits")
    return ("member_probabilities", [len(logits), BATCH, 10], TensorProto.FLOAT)


def _view_nodes(g: _Graph, views: np.ndarray | None, x: str) -> list[str]:
    """Test-time augmentation's views of `x`: a zero appended to each image, then one
    `Gather` of the view's pixel table each."""
    if views is None:
        return []
    padded = g.op("Pad", [x, g.const("view_pads", np.array([0, 0, 0, 1], np.int64))], "x_blank")
    return [
        g.op("Gather", [padded, g.const(f"view{j}/pixels", v.astype(np.int64))], f"view{j}", axis=1)
        for j, v in enumerate(views)
    ]


def _log_mean_prob(g: _Graph, logits: list[str], name: str) -> str:
    """The log of the mean of `softmax` over `logits` (each `(b, 10)`)."""
    zero = g.const("axis_0", np.array([0], np.int64))
    each = [
        g.op(
            "Unsqueeze",
            [g.op("LogSoftmax", [z], f"{name}/{j}/log_probs", axis=1), zero],
            f"{name}/{j}/log_probs_1",
        )
        for j, z in enumerate(logits)
    ]
    total = g.op(
        "ReduceLogSumExp",
        [g.op("Concat", each, f"{name}/log_probs", axis=0), zero],
        f"{name}/log_total",
        keepdims=0,
    )
    return g.op(
        "Sub",
        [total, g.const(f"{name}/log_count", np.float32(math.log(len(logits))))],
        f"{name}/log_mean_prob",
    )


def _set_nodes(g: _Graph, thresholds: np.ndarray):
    """`prediction_set`: class k when `1 - p_k <= thresholds[k]`, or the top class."""
    from onnx import TensorProto

    unsure = g.op("Sub", [g.const("one", np.float32(1.0)), "probabilities"], "unsure")
    sure = g.op("LessOrEqual", [unsure, g.const("set_thresholds", thresholds[None])], "sure")
    top = g.op("ArgMax", ["probabilities"], "top_class", axis=1, keepdims=1)
    classes = g.const("classes", np.arange(len(thresholds), dtype=np.int64)[None])
    g.op("Or", [sure, g.op("Equal", [classes, top], "is_top")], "prediction_set")
    return ("prediction_set", [BATCH, 10], TensorProto.BOOL)


def _trust_nodes(g: _Graph, portable: Portable, feats: list[str]) -> None:
    from onnx import TensorProto

    t = portable.trust
    assert t is not None, "trust nodes are built for a calibrated model"
    last = g.const("axis_-1", np.array([-1], np.int64))
    one = g.const("axis_1", np.array([1], np.int64))
    scores = []
    for m, f in enumerate(feats):
        white = g.op("MatMul", [f, g.const(f"member{m}/whiten", t.whiten[m])], f"member{m}/white")
        diff = g.op(
            "Sub",
            [
                g.op("Unsqueeze", [white, one], f"member{m}/white_1"),
                g.const(f"member{m}/centres", t.centres[m]),
            ],
            f"member{m}/diff",
        )
        d = g.op("ReduceSumSquare", [diff, last], f"member{m}/distances", keepdims=0)
        scores.append(g.op("ReduceMin", [d, one], f"member{m}/score", keepdims=0))
    total = scores[0] if len(scores) == 1 else g.op("Sum", scores, "score_total")
    score = g.op("Div", [total, g.const("c_members", np.float32(len(scores)))], "trust_score")
    # The amount of ink as an exact sum of pixel values; the contrast in float64.
    sums = g.op("ReduceSum", ["pixels", one], "ink_sum", keepdims=0)
    low, high = (
        g.const(n, np.float32(v))
        for n, v in zip(("ink_low", "ink_high"), t.ink_sum_range, strict=True)
    )
    x64 = g.op(
        "Div",
        [
            g.op("Cast", ["images"], "pixels64", to=TensorProto.DOUBLE),
            g.const("c_255_64", np.float64(255.0)),
        ],
        "x64",
    )
    centred = g.op("Sub", [x64, g.op("ReduceMean", [x64, one], "mean64", keepdims=1)], "centred64")
    spread = g.op(
        "Sqrt",
        [g.op("ReduceMean", [g.op("Mul", [centred, centred], "sq64"), one], "var64", keepdims=0)],
        "contrast",
    )
    checks = [
        g.op("Less", [sums, low], "too_dark"),
        g.op("Greater", [sums, high], "too_bright"),
        g.op("Less", [spread, g.const("min_contrast", np.float64(t.min_contrast))], "flat"),
        g.op("Greater", [score, g.const("threshold", np.float32(t.threshold))], "far"),
    ]
    g.op("Or", [g.op("Or", checks[:2], "ink"), g.op("Or", checks[2:], "flat_or_far")], "unusual")


def to_onnx(portable: Portable, *, gelu: GeluForm | None = None) -> tuple[bytes, GeluForm]:
    """The serialised ONNX model and the GELU form it was written with: the `Gelu`
    operator when the installed onnxruntime runs it (or `gelu` when given), else the
    tanh formula."""
    _, ort = require_onnx()
    forms: list[GeluForm] = [gelu] if gelu else ["op", "formula"]

    def checked(form: GeluForm) -> bytes:
        blob = onnx_model(portable, gelu=form).SerializeToString()
        _session(ort, blob)
        return blob

    for form in forms[:-1]:
        try:
            return checked(form), form
        except Exception:  # NOT_IMPLEMENTED or INVALID_GRAPH from an older runtime
            continue
    return checked(forms[-1]), forms[-1]


def _session(ort, blob: bytes):
    options = ort.SessionOptions()
    options.log_severity_level = 3  # errors only: the library does not print
    return ort.InferenceSession(blob, options, providers=["CPUExecutionProvider"])


def run_onnx(blob: bytes, images: np.ndarray, *, chunk: int = 2000) -> dict[str, np.ndarray]:
    """Run a serialised model with onnxruntime (CPU) on `uint8` images `(n, 784)`:
    every output by name, the images taken `chunk` at a time."""
    _, ort = require_onnx()
    session = _session(ort, blob)
    names = [o.name for o in session.get_outputs()]
    parts = [
        session.run(None, {"images": images[i : i + chunk]}) for i in range(0, len(images), chunk)
    ]
    axis = {n: (1 if n == "member_probabilities" else 0) for n in names}
    return {n: np.concatenate([p[j] for p in parts], axis=axis[n]) for j, n in enumerate(names)}


def _build(inputs: ExportInputs) -> tuple[bytes, dict[str, Any]]:
    blob, gelu = to_onnx(inputs.portable)
    return blob, {"opset": OPSETS[gelu], "gelu": gelu}


def _run(blob: bytes, images: np.ndarray, inputs: ExportInputs) -> tuple[Outputs, dict[str, Any]]:
    import onnxruntime

    return run_onnx(blob, images), {"checked_by": f"onnxruntime {onnxruntime.__version__}"}


FORMAT = ExportFormat("onnx", ".onnx", _build, _run, member_outputs=True, require=require_onnx)
"""ONNX: a graph for onnxruntime in any language (the optional extra `onnx`)."""
