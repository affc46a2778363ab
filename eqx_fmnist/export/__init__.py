"""Artifacts that run without this library: StableHLO, safetensors, ONNX and a one-file
web page.

- **StableHLO** (`jax.export`): the whole forward pass (`uint8` pixels in, normalisation
  inside, logits and probabilities out) with a symbolic batch size, lowered for CPU and
  CUDA. It runs with `jax` alone: `jax.export.deserialize(blob).call(images)`.
- **safetensors**: the weights, named `layers.0.weight`, `layers.0.bias`, ... (an
  ensemble's as `members.0.layers.0.weight`, ...), with the config in the metadata;
  `torch_state_dict` renames them for the equivalent PyTorch `nn.Sequential`.
- **ONNX**: a graph written with the `onnx` package's `helper` API (`Gemm` + `Gelu` per
  layer), for onnxruntime in any language; the optional extra `onnx`.
- **A web page**: one HTML file with the weights inside and the forward pass in plain
  JavaScript; draw an item or drop a photo, offline, from `file://`.

A calibrated run's StableHLO, ONNX and page also compute the trust flag
(`trust_score`, `unusual`), exactly as [`Trust.flags`][eqx_fmnist.calibration.Trust.flags]
does, from the arrays of [`to_portable`][eqx_fmnist.export.portable.to_portable].

Every export is **checked before it is written**: it runs on the images it is given
(all 10,000 test images, from the command line) and must predict the same class as the
library for every one, and give the same trust verdict; the largest differences go into
the manifest, a JSON file beside the artifact (`PATH.manifest.json`) with the class
names, the input and output specs, the artifact's SHA-256 and size, the versions, the
run's config and test accuracy. An export that fails the check raises
[`ExportError`][eqx_fmnist.export.manifest.ExportError] and writes nothing.
"""

from .check import (
    SUFFIXES as SUFFIXES,
    Format as Format,
    Parity as Parity,
    check_parity as check_parity,
    export_model as export_model,
    library_outputs as library_outputs,
)
from .manifest import (
    MANIFEST_SUFFIX as MANIFEST_SUFFIX,
    ExportError as ExportError,
    manifest_path as manifest_path,
)
from .onnx_graph import (
    onnx_model as onnx_model,
    require_onnx as require_onnx,
    run_onnx as run_onnx,
    to_onnx as to_onnx,
)
from .portable import (
    Portable as Portable,
    PortableTrust as PortableTrust,
    numpy_serve as numpy_serve,
    to_portable as to_portable,
)
from .stablehlo import (
    OUTPUTS as OUTPUTS,
    PLATFORMS as PLATFORMS,
    Artifact as Artifact,
    load_artifact as load_artifact,
    run_stablehlo as run_stablehlo,
    serving_function as serving_function,
    to_stablehlo as to_stablehlo,
)
from .web_page import (
    MAX_PAGE_MEMBERS as MAX_PAGE_MEMBERS,
    embedded_spec as embedded_spec,
    page_spec as page_spec,
    portable_of_page as portable_of_page,
    run_page as run_page,
    to_html as to_html,
)
from .weights import (
    numpy_forward as numpy_forward,
    to_safetensors as to_safetensors,
    torch_state_dict as torch_state_dict,
    weight_arrays as weight_arrays,
)
