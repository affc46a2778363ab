"""safetensors: the weights, named `layers.0.weight`, `layers.0.bias`, ... (an ensemble's
as `members.0.layers.0.weight`, ...), with the config in the metadata; `torch_state_dict`
renames them for the equivalent PyTorch `nn.Sequential`."""

import numpy as np

from ..config import TrainConfig
from ..model import MLP, num_members
from ..parallel import to_local


def weight_arrays(models: MLP) -> dict[str, np.ndarray]:
    """The weights by name: `layers.{i}.weight` of shape `(out, in)` and
    `layers.{i}.bias` (PyTorch's `nn.Linear` layout); `members.{k}.` in front for an
    ensemble."""
    models = to_local(models)
    arrays, members = {}, num_members(models) is not None
    for i, layer in enumerate(models.layers):
        weight, bias = np.asarray(layer.weight, np.float32), np.asarray(layer.bias, np.float32)
        if not members:
            arrays[f"layers.{i}.weight"], arrays[f"layers.{i}.bias"] = weight, bias
            continue
        for k in range(weight.shape[0]):
            arrays[f"members.{k}.layers.{i}.weight"] = weight[k]
            arrays[f"members.{k}.layers.{i}.bias"] = bias[k]
    return arrays


def to_safetensors(models: MLP, config: TrainConfig) -> bytes:
    """The weights as a safetensors file, the config (JSON) in its metadata."""
    from safetensors.numpy import save

    meta = {"config": config.to_json(), "activation": "gelu_tanh", "format": "eqx_fmnist"}
    return save(weight_arrays(models), metadata=meta)


def numpy_forward(arrays: dict[str, np.ndarray], images: np.ndarray) -> np.ndarray:
    """Logits from named weights with numpy alone (an ensemble: log mean probabilities):
    the reference that checks a safetensors export, independent of JAX and Equinox."""
    prefixes = sorted({k.rsplit("layers.", 1)[0] for k in arrays})
    probs, x = [], images.astype(np.float32)
    for prefix in prefixes:
        x = images.astype(np.float32) / 255.0
        n = len({k for k in arrays if k.startswith(prefix + "layers.")}) // 2
        for i in range(n):
            x = x @ arrays[f"{prefix}layers.{i}.weight"].T + arrays[f"{prefix}layers.{i}.bias"]
            if i < n - 1:  # GELU, tanh form (jax.nn.gelu's default)
                x = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
        e = np.exp(x - x.max(axis=1, keepdims=True))
        probs.append(e / e.sum(axis=1, keepdims=True))
    if len(prefixes) == 1 and prefixes[0] == "":
        return x
    return np.log(np.mean(probs, axis=0))


def torch_state_dict(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One model's weights renamed for `nn.Sequential(Linear, GELU("tanh"), Linear,
    GELU("tanh"), Linear)`: layer `i` is module `2 * i`."""
    renamed = {}
    for name, array in arrays.items():
        _, i, kind = name.split(".")
        renamed[f"{2 * int(i)}.{kind}"] = array
    return renamed
