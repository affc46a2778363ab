"""What an export format is: one record, [`ExportFormat`][eqx_fmnist.export.format.ExportFormat],
that [`export_model`][eqx_fmnist.export.check.export_model] reads.

A format module (`stablehlo`, `safetensors`, `onnx`, `html`) builds its bytes and runs
them back for the check, and ends with its `FORMAT`; `check.FORMATS` lists the modules'
records. A new format is one module and one line there.
"""

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from ..config import TrainConfig
from ..model import Model
from ..precision import Policy
from .portable import Portable

Outputs = dict[str, np.ndarray]
"""An artifact's outputs by name: `logits`, `probabilities` and, with a trust flag,
`trust_score` and `unusual`."""


@dataclasses.dataclass(frozen=True)
class ExportInputs:
    """Everything a format may build from: the model (or the stack of members, on this
    host), its policy and config, its [`Portable`][eqx_fmnist.export.portable.Portable]
    arrays (with the temperature and the trust flag, if calibrated), and what the
    caller says about the run (`about`: e.g. `test_accuracy`, for the page)."""

    models: Model
    policy: Policy
    config: TrainConfig
    portable: Portable
    about: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class ExportFormat:
    """One export format.

    **Fields:**

    - `name`: what `--format` calls it; `suffix`: the artifact's file suffix.
    - `build(inputs) -> (bytes, info)`: the artifact, and manifest entries about how it
        was built.
    - `run(blob, images, inputs) -> (outputs, info)`: the artifact's own answer for
        `uint8` images, as a consumer runs it (the check), and manifest entries about
        what ran it.
    - `serves`: whether the artifact computes outputs itself (weights alone do not:
        their check runs them through the numpy reference).
    - `trust`: whether it computes a calibrated run's trust flag.
    - `keeps_policy`: whether it runs the model's precision policy (else float32
        weights, checked against the library in float32).
    - `member_outputs`: whether an ensemble's artifact also returns
        `member_probabilities`.
    - `require()`: raises an `ExportError` naming what to install, before any work.
    - `any_model`: whether it carries any model (a compiled program), or the MLP's
        layers alone.
    """

    name: str
    suffix: str
    build: Callable[[ExportInputs], tuple[bytes, dict[str, Any]]]
    run: Callable[[bytes, np.ndarray, ExportInputs], tuple[Outputs, dict[str, Any]]]
    serves: bool = True
    trust: bool = True
    keeps_policy: bool = False
    member_outputs: bool = False
    require: Callable[[], Any] = lambda: None
    any_model: bool = False
