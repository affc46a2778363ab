"""Artifacts that run without this library: StableHLO, safetensors, ONNX and a one-file
web page.

- **StableHLO** (`jax.export`): the whole forward pass (`uint8` pixels in, normalisation
  inside, logits and probabilities out) with a symbolic batch size, lowered for CPU,
  CUDA and TPU. It runs with `jax` alone: `jax.export.deserialize(blob).call(images)`.
- **safetensors**: the weights, named `layers.0.weight`, `layers.0.bias`, ... (an
  ensemble's as `members.0.layers.0.weight`, ...), with the config in the metadata;
  `torch_state_dict` renames them for the equivalent PyTorch `nn.Sequential`.
- **ONNX**: a graph written with the `onnx` package's `helper` API (`Gemm` + `Gelu` per
  layer), for onnxruntime in any language; the optional extra `onnx`.
- **A web page**: one HTML file with the weights inside and the forward pass in plain
  JavaScript; draw an item or drop a photo, offline, from `file://`.

A calibrated run's StableHLO, ONNX and page also compute the trust flag
(`trust_score`, `unusual`), exactly as [`Trust.flags`][eqx_fmnist.trust.Trust.flags]
does, from the arrays of [`to_portable`][eqx_fmnist.export.portable.to_portable].

Every export is **checked before it is written**: it runs on the images it is given
(all 10,000 test images, from the command line) and must predict the same class as the
library for every one, and give the same trust verdict; the largest differences go into
the manifest, a JSON file beside the artifact (`PATH.manifest.json`) with the class
names, the input and output specs, the artifact's SHA-256 and size, the versions, the
run's config and test accuracy. An export that fails the check raises
[`ExportError`][eqx_fmnist.export.manifest.ExportError] and writes nothing.

A format is one record, [`ExportFormat`][eqx_fmnist.export.format.ExportFormat] (its
suffix, what it carries, how to build it and how to run it back), in the module named
after it (`stablehlo`, `safetensors`, `onnx`, `html`); `FORMATS` lists them. One numpy
reference, [`numpy_serve`][eqx_fmnist.export.portable.numpy_serve], is what every
artifact must reproduce.
"""

from .check import FORMATS as FORMATS, export_model as export_model
from .format import ExportFormat as ExportFormat
from .html import run_page as run_page
from .manifest import (
    ExportError as ExportError,
    is_export as is_export,
    manifest_path as manifest_path,
    read_manifest as read_manifest,
)
from .onnx import run_onnx as run_onnx
from .portable import Portable as Portable, numpy_serve as numpy_serve, to_portable as to_portable
from .safetensors import torch_state_dict as torch_state_dict, weight_arrays as weight_arrays
from .stablehlo import Artifact as Artifact, load_artifact as load_artifact
