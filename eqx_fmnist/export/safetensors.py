"""safetensors: the weights, named `layers.0.weight`, `layers.0.bias`, ... (an ensemble's
as `members.0.layers.0.weight`, ...), with the config in the metadata; `torch_state_dict`
renames them for the equivalent PyTorch `nn.Sequential`."""

import dataclasses
from typing import Any

import numpy as np

from ..config import TrainConfig
from ..model import MLP, num_members
from .format import ExportFormat, ExportInputs, Outputs
from .portable import Portable, numpy_serve


def weight_arrays(models: MLP) -> dict[str, np.ndarray]:
    """The weights by name: `layers.{i}.weight` of shape `(out, in)` and
    `layers.{i}.bias` (PyTorch's `nn.Linear` layout); `members.{k}.` in front for an
    ensemble. Each array is C-contiguous: `safetensors.numpy.save` copies from the
    array's data pointer, and an array fetched from a TPU can come back in another
    memory order (the first TPU export wrote transposed weights)."""
    arrays = {}
    members = num_members(models) is not None

    def c_order(array) -> np.ndarray:
        return np.ascontiguousarray(array, np.float32)

    for i, layer in enumerate(models.layers):
        weight, bias = np.asarray(layer.weight, np.float32), np.asarray(layer.bias, np.float32)
        if not members:
            arrays[f"layers.{i}.weight"], arrays[f"layers.{i}.bias"] = (
                c_order(weight),
                c_order(bias),
            )
            continue
        for k in range(weight.shape[0]):
            arrays[f"members.{k}.layers.{i}.weight"] = c_order(weight[k])
            arrays[f"members.{k}.layers.{i}.bias"] = c_order(bias[k])
    return arrays


def to_safetensors(models: MLP, config: TrainConfig) -> bytes:
    """The weights as a safetensors file, the config (JSON) in its metadata."""
    from safetensors.numpy import save

    meta = {"config": config.to_json(), "activation": "gelu_tanh", "format": "eqx_fmnist"}
    return save(weight_arrays(models), metadata=meta)


def portable_of_weights(arrays: dict[str, np.ndarray], temperature: float = 1.0) -> Portable:
    """The [`Portable`][eqx_fmnist.export.portable.Portable] arrays that named weights
    describe (what [`weight_arrays`][eqx_fmnist.export.safetensors.weight_arrays]
    wrote), read back by their names alone: the numpy reference then checks a
    safetensors export, independent of JAX and Equinox."""
    prefixes = sorted(
        {k.rsplit("layers.", 1)[0] for k in arrays}, key=lambda p: int(p.split(".")[1]) if p else -1
    )
    layers = []
    for prefix in prefixes:
        n = len({k for k in arrays if k.startswith(prefix + "layers.")}) // 2
        layers.append(
            [
                (arrays[f"{prefix}layers.{i}.weight"], arrays[f"{prefix}layers.{i}.bias"])
                for i in range(n)
            ]
        )
    return Portable(layers, prefixes != [""], float(temperature), None)


def torch_state_dict(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One model's weights renamed for `nn.Sequential(Linear, GELU("tanh"), Linear,
    GELU("tanh"), Linear)`: layer `i` is module `2 * i`."""
    renamed = {}
    for name, array in arrays.items():
        _, i, kind = name.split(".")
        renamed[f"{2 * int(i)}.{kind}"] = array
    return renamed


def _build(inputs: ExportInputs) -> tuple[bytes, dict[str, Any]]:
    assert isinstance(inputs.models, MLP), "export_model refuses another model"
    return to_safetensors(inputs.models, inputs.config), {}


def _run(blob: bytes, images: np.ndarray, inputs: ExportInputs) -> tuple[Outputs, dict[str, Any]]:
    from safetensors.numpy import load

    weights = portable_of_weights(load(blob), inputs.portable.temperature)
    # The views are how a consumer runs the weights: checked with the export's own.
    return numpy_serve(dataclasses.replace(weights, views=inputs.portable.views), images), {}


FORMAT = ExportFormat("safetensors", ".safetensors", _build, _run, serves=False, trust=False)
"""safetensors: the weights by name, checked through the numpy reference."""
