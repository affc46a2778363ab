"""The library's models, `eqx.Module`s that map one image to ten logits: the multilayer
perceptron ([`MLP`][eqx_fmnist.model.MLP]) and a small convolutional network
([`CNN`][eqx_fmnist.model.CNN]) that sees shapes, the MLP's teacher; and the helpers that
treat one model and a stack of members alike, a model of your own among them.

The module is kept whole: the library's two models and the one way every other module
calls a model, one or a stack, its own or yours.
"""

import inspect
import math
from collections.abc import Callable, Sequence
from functools import partial
from typing import Literal, TypeAlias

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu
from jaxtyping import Array, Float, PRNGKeyArray, PyTree

from .checks import check_features, door
from .fashion import SIDE
from .precision import FLOAT32, Policy

Model: TypeAlias = eqx.Module
"""What the library trains, evaluates and explains: an `eqx.Module` that maps one image
(`(784,)`, pixels in `[0, 1]`) to ten logits — an [`MLP`][eqx_fmnist.model.MLP], a
[`CNN`][eqx_fmnist.model.CNN], one of your own, or a stack of members of the first two."""


class MLP(eqx.Module):
    """A fully connected network: `Linear -> activation` per hidden layer, then `Linear`."""

    layers: tuple[eqx.nn.Linear, ...]
    activation: Callable[[Array], Array] = eqx.field(static=True)
    in_size: int = eqx.field(static=True)
    hidden_sizes: tuple[int, ...] = eqx.field(static=True)
    out_size: int = eqx.field(static=True)

    def __init__(
        self,
        in_size: int = 784,
        hidden_sizes: Sequence[int] = (256, 128),
        out_size: int = 10,
        activation: Callable[[Array], Array] = jax.nn.gelu,
        *,
        key: PRNGKeyArray,
    ):
        """**Arguments:**

        - `in_size`: input features. Defaults to `784` (a flattened 28 x 28 image).
        - `hidden_sizes`: width of each hidden layer. Defaults to `(256, 128)`.
        - `out_size`: number of logits. Defaults to `10`.
        - `activation`: applied after each hidden layer. Defaults to `jax.nn.gelu`
            (the tanh approximation, as in the codelab).
        - `key`: the PRNG key for the weights.

        Weights are He-normal, `normal * sqrt(2 / fan_in)`; biases are zero. Parameters
        are float32; cast them with `Policy.cast_to_param` for another storage dtype.
        """
        hidden_sizes = tuple(hidden_sizes)
        sizes = (in_size, *hidden_sizes, out_size)
        if any(not isinstance(s, int) or s < 1 for s in sizes):
            raise ValueError(
                f"layer sizes must be positive ints, but got in_size={in_size}, "
                f"hidden_sizes={hidden_sizes}, out_size={out_size}."
            )
        keys = jr.split(key, len(sizes) - 1)
        layers = []
        for k, fan_in, fan_out in zip(keys, sizes[:-1], sizes[1:], strict=True):
            # Equinox's layer for its structure only (shapes, no draw), then the values,
            # drawn once from `k`.
            layer = eqx.filter_eval_shape(eqx.nn.Linear, fan_in, fan_out, key=k)
            weight = jr.normal(k, (fan_out, fan_in), jnp.float32) * math.sqrt(2.0 / fan_in)
            bias = jnp.zeros((fan_out,), jnp.float32)
            layers.append(eqx.tree_at(lambda lin: (lin.weight, lin.bias), layer, (weight, bias)))
        self.layers = tuple(layers)
        self.activation = activation
        self.in_size = in_size
        self.hidden_sizes = hidden_sizes
        self.out_size = out_size

    @door
    def __call__(
        self, x: Float[Array, " in_size"], *, policy: Policy = FLOAT32
    ) -> Float[Array, " out_size"]:
        """Logits for one example; batches go through `jax.vmap`.

        **Arguments:**

        - `x`: one flattened image, shape `(784,)`, pixels in `[0, 1]`.
        - `policy`: the precision policy. Each matmul multiplies in its compute dtype
            and accumulates in its accumulation dtype (float32 for bfloat16 or float16;
            see [`Policy.matmul`][eqx_fmnist.precision.Policy.matmul]); biases and
            activations stay in the accumulation dtype; the logits come out in its
            output dtype. Defaults to float32 throughout.

        **Returns:**

        The logits, shape `(10,)`, in `policy.output_dtype`.
        """
        check_features("MLP", x, self.in_size)
        last = self.layers[-1]
        x = self.hidden(x, policy=policy)[-1]
        x = policy.matmul(last.weight, x) + _bias(last).astype(policy.accumulate_dtype)
        return x.astype(policy.output_dtype)

    def forward_batch(
        self, x: Float[Array, "batch in_size"], *, policy: Policy = FLOAT32
    ) -> Float[Array, "batch out_size"]:
        """Logits for a whole batch, as training computes them.

        With a float32 policy this is `jax.vmap(model)(x)`, exactly. With a bfloat16 or
        float16 compute dtype each layer's matmul is written for the batch
        ([`Policy.dense`][eqx_fmnist.precision.Policy.dense]), so that the backward
        pass multiplies in the compute dtype too, and each gradient stays one matmul
        over the batch. (A hand-written gradient on the one-example matmul would, under
        `vmap`, turn the weight gradient into per-example outer products.) The
        activation must act elementwise, as GELU does.

        **Arguments:**

        - `x`: flattened images, shape `(batch, 784)`, pixels in `[0, 1]`.
        - `policy`: the precision policy, as for `__call__`. Defaults to float32.

        **Returns:**

        The logits, shape `(batch, 10)`, in `policy.output_dtype`.
        """
        if not policy.lowers_matmuls:
            return jax.vmap(lambda e: self(e, policy=policy))(x)
        acc = policy.accumulate_dtype
        for layer in self.layers[:-1]:
            x = self.activation(policy.dense(x, layer.weight) + _bias(layer).astype(acc)[None])
        last = self.layers[-1]
        x = policy.dense(x, last.weight) + _bias(last).astype(acc)[None]
        return x.astype(policy.output_dtype)

    def hidden(
        self, x: Float[Array, " in_size"], *, policy: Policy = FLOAT32
    ) -> list[Float[Array, " _"]]:
        """Every hidden layer's activations for one example, first to last, in the
        policy's accumulation dtype; arguments as for `__call__`."""
        acc = policy.accumulate_dtype
        out = []
        for layer in self.layers[:-1]:
            # Multiply in the compute dtype, accumulate in float32 (for bf16/f16), and
            # keep the bias, the activation and the next layer's input sum there.
            x = self.activation(policy.matmul(layer.weight, x) + _bias(layer).astype(acc))
            out.append(x)
        return out


ConvForm = Literal["patches", "native", "native_forward"]


def conv_stride2(
    y: Float[Array, "batch side side cin"],
    kernel: Float[Array, "3 3 cin cout"],
    policy: Policy = FLOAT32,
    form: ConvForm | None = None,
) -> Float[Array, "batch half half cout"]:
    """A 3 x 3 convolution of stride 2 (zero padding of one pixel; `half = (side + 1) //
    2`), in the policy's accumulation dtype, in forms that agree within float32's rounding:

    - `"patches"`: one matmul of the batch's 3 x 3 patches by the kernel
        ([`Policy.dense`][eqx_fmnist.precision.Policy.dense]). XLA's convolution gradient
        runs many times slower on a CPU inside a `lax.scan` (jax-ml/jax#12868).
    - `"native"`: XLA's convolution at a float32 policy's precision, both ways: on a
        TPU v5e the CNN's training program took minutes to compile.
    - `"native_forward"`: XLA's convolution where nothing differentiates it (a
        teacher's answers, evaluation); differentiated, the patches both ways.

    `form=None` (the default) chooses when the program is lowered: patches on a CPU and
    for low-precision policies, `"native_forward"` elsewhere.
    """
    n = y.shape[0]
    half = (y.shape[1] + 1) // 2
    c_in = y.shape[-1]

    def patches(y, kernel):
        padded = jnp.pad(y, ((0, 0), (1, 1), (1, 1), (0, 0)))
        taps = [padded[:, i : i + 2 * half : 2, j : j + 2 * half : 2] for i, j in _TAPS]
        flat = jnp.concatenate(taps, axis=-1).reshape(n * half * half, 9 * c_in)
        out = policy.dense(flat, kernel.reshape(9 * c_in, -1).T)
        return out.astype(policy.accumulate_dtype).reshape(n, half, half, -1)

    def native(y, kernel):
        y, kernel = policy.cast_to_compute(y), policy.cast_to_compute(kernel)
        conv = partial(jax.lax.conv_general_dilated, precision=policy.matmul_precision)
        out = conv(y, kernel, (2, 2), ((1, 1), (1, 1)), dimension_numbers=_NHWC_HWIO)
        return out.astype(policy.accumulate_dtype)

    native_forward = jax.custom_vjp(native)
    # Differentiated, the patches run both ways: their forward value and their pullback.
    native_forward.defvjp(lambda y, kernel: jax.vjp(patches, y, kernel), lambda pull, g: pull(g))
    forms = {"patches": patches, "native": native, "native_forward": native_forward}
    if form is not None and form not in forms:
        raise ValueError(f"`form` must be one of {', '.join(forms)} or None, not {form!r}.")
    if form is not None and form != "patches" and policy.lowers_matmuls:
        raise ValueError(f"the native convolution is a float32 policy's, not {policy}.")
    if form is not None or policy.lowers_matmuls:
        return forms[form or "patches"](y, kernel)
    return jax.lax.platform_dependent(y, kernel, cpu=patches, default=native_forward)


_TAPS = [(i, j) for i in range(3) for j in range(3)]
_NHWC_HWIO = ("NHWC", "HWIO", "NHWC")


class CNN(eqx.Module):
    """A small convolutional network: per entry of `channels`, a 3 x 3 convolution of
    stride 2 (each halves the side: 28, 14, 7, 4) and the activation; then the flattened
    maps go through an [`MLP`][eqx_fmnist.model.MLP] head. It sees shapes that an MLP
    must learn pixel by pixel, which makes it the MLP's teacher. The default, channels
    `(32, 64)` and a `(256, 128)` head, has 856,074 parameters.

    Strided convolutions rather than pooling: on a CPU the gradient of a full-size
    convolution costs several times its forward pass.
    """

    kernels: tuple[Float[Array, "3 3 cin cout"], ...]
    biases: tuple[Float[Array, " cout"], ...]
    head: MLP
    activation: Callable[[Array], Array] = eqx.field(static=True)
    channels: tuple[int, ...] = eqx.field(static=True)
    in_size: int = eqx.field(static=True)
    out_size: int = eqx.field(static=True)

    def __init__(
        self,
        channels: Sequence[int] = (32, 64),
        hidden_sizes: Sequence[int] = (256, 128),
        out_size: int = 10,
        activation: Callable[[Array], Array] = jax.nn.gelu,
        *,
        key: PRNGKeyArray,
    ):
        """**Arguments:**

        - `channels`: output channels of each convolution, one to three of them.
            Defaults to `(32, 64)`.
        - `hidden_sizes`, `out_size`, `activation`: the head's, as for the `MLP`.
        - `key`: the PRNG key for the weights.

        Kernels are He-normal (`fan_in = 9 * channels in`), biases zero, float32.
        """
        channels = tuple(channels)
        if not 1 <= len(channels) <= 3 or any(not isinstance(c, int) or c < 1 for c in channels):
            raise ValueError(
                f"`channels` must be one to three positive ints, but got {channels!r}."
            )
        keys = jr.split(key, len(channels) + 1)
        kernels = []
        biases = []
        c_in = 1
        side = SIDE
        for k, c in zip(keys, channels, strict=False):
            kernels.append(jr.normal(k, (3, 3, c_in, c), jnp.float32) * math.sqrt(2 / (9 * c_in)))
            biases.append(jnp.zeros((c,), jnp.float32))
            c_in = c
            side = (side + 1) // 2
        self.kernels, self.biases = tuple(kernels), tuple(biases)
        self.head = MLP(c_in * side * side, hidden_sizes, out_size, activation, key=keys[-1])
        self.activation = activation
        self.channels = channels
        self.in_size = SIDE * SIDE
        self.out_size = out_size

    def maps(self, x: Float[Array, " 784"], *, policy: Policy = FLOAT32) -> Float[Array, " _"]:
        """The last convolution's maps for one image, flattened: what the head reads."""
        return self.maps_batch(x[None], policy=policy)[0]

    def maps_batch(
        self, x: Float[Array, "batch 784"], *, policy: Policy = FLOAT32
    ) -> Float[Array, "batch _"]:
        """[`maps`][eqx_fmnist.model.CNN.maps] for a batch. Each convolution (the image
        padded by a pixel of zeros on every side, stride 2) is one matmul of the batch's
        3 x 3 patches by the kernel on a CPU; elsewhere XLA's convolution, differentiated
        as the patches ([`conv_stride2`][eqx_fmnist.model.conv_stride2])."""
        y = x.reshape(-1, SIDE, SIDE, 1).astype(policy.accumulate_dtype)
        for kernel, bias in zip(self.kernels, self.biases, strict=True):
            out = conv_stride2(y, kernel, policy)
            flat = out.reshape(-1, out.shape[-1])  # the bias's gradient: one sum over rows
            flat = flat + bias.astype(policy.accumulate_dtype)[None]
            y = self.activation(flat).reshape(out.shape)
        return y.reshape(y.shape[0], -1)

    @door
    def __call__(
        self, x: Float[Array, " in_size"], *, policy: Policy = FLOAT32
    ) -> Float[Array, " out_size"]:
        """Logits for one image (`(784,)`, pixels in `[0, 1]`), in the policy's output
        dtype; batches go through `jax.vmap`."""
        check_features("CNN", x, self.in_size)
        return self.head(self.maps(x, policy=policy), policy=policy)

    def forward_batch(
        self, x: Float[Array, "batch in_size"], *, policy: Policy = FLOAT32
    ) -> Float[Array, "batch out_size"]:
        """Logits for a whole batch, as training computes them (the head as the MLP's
        [`forward_batch`][eqx_fmnist.model.MLP.forward_batch])."""
        return self.head.forward_batch(self.maps_batch(x, policy=policy), policy=policy)

    def hidden(
        self, x: Float[Array, " in_size"], *, policy: Policy = FLOAT32
    ) -> list[Float[Array, " _"]]:
        """The head's hidden activations for one image (what the trust flag measures)."""
        return self.head.hidden(self.maps(x, policy=policy), policy=policy)


def _bias(layer: eqx.nn.Linear) -> Array:
    """A layer's bias: every layer of an `MLP` has one (`eqx.nn.Linear` types it optional)."""
    assert layer.bias is not None, "an MLP layer without a bias"
    return layer.bias


def count_params(model: PyTree) -> int:
    """The number of scalar parameters (inexact array elements) in `model`."""
    return sum(x.size for x in jtu.tree_leaves(eqx.filter(model, eqx.is_inexact_array)))


class Stack(eqx.Module):
    """Members of a model of your own, stacked on a leading axis: what a run of
    `Seeds(k)` over a model of your own evaluates, calibrates and saves. (The library's
    `MLP` and `CNN` say how many members they stack themselves; a module of yours
    cannot, so its stack carries the count.) [`per_member`][eqx_fmnist.model.per_member]
    unwraps it."""

    members: PyTree
    count: int = eqx.field(static=True)


def num_members(model: PyTree) -> int | None:
    """How many members a stacked model holds (the size of its leading axis, as
    [`init_members`][eqx_fmnist.state.init_members] builds it), or `None` for one model.

    This is the library's one way to ask "is this a stack of members?": a state, a
    checkpoint, an export and an evaluation all ask it of their model. A model of your
    own is one model, unless it comes as a [`Stack`][eqx_fmnist.model.Stack].
    """
    if isinstance(model, Stack):
        return model.count
    mlp = model.head if isinstance(model, CNN) else model
    if not isinstance(mlp, MLP):
        return None
    bias = _bias(mlp.layers[0])
    return None if bias.ndim == 1 else int(bias.shape[0])


def takes(model: PyTree, name: str) -> bool:
    """Whether the model's `__call__` has a parameter `name`: `key` (a model that draws,
    as `eqx.nn.Dropout` and a module holding one do) or `policy` (a model that computes
    in a precision policy, as the library's do). Read at trace time only."""
    try:
        return callable(model) and name in inspect.signature(model).parameters
    except (TypeError, ValueError):  # a builtin without a signature
        return False


def logits_of(model: PyTree, x: Float[Array, " features"], policy: Policy = FLOAT32) -> Array:
    """One model's logits for one example: `model(x, policy=policy)` for a model that
    takes a policy (the library's), `model(x)` otherwise (one of yours, in float32)."""
    return model(x, policy=policy) if takes(model, "policy") else model(x)


def batch_logits(
    model: PyTree,
    x: Float[Array, "batch features"],
    policy: Policy = FLOAT32,
    *,
    key: PRNGKeyArray | None = None,
) -> Array:
    """One model's logits for a batch, as training computes them: a model's own
    `forward_batch(x, policy=...)` where it has one (the library's: one matmul per layer
    for the batch); else `jax.vmap(model)`, with a key of its own for each example where
    the model takes `key=` (`key` split over the batch)."""
    if hasattr(model, "forward_batch"):
        return model.forward_batch(x, policy=policy)
    if key is not None and takes(model, "key"):
        keys = jr.split(key, x.shape[0])
        return jax.vmap(lambda e, k: model(e, key=k))(x, keys)
    return jax.vmap(model)(x)


def per_member(fn: Callable[..., PyTree], model: PyTree, *args) -> PyTree:
    """`fn(member, *args)` for every member of a stack, each output with the members on
    a leading axis (`eqx.filter_vmap` over the model; `args` are shared); one model
    counts as a stack of one (`fn(model, *args)` with a leading axis of 1).

    The one place the library vmaps over members outside the training step: an
    evaluation, the trust flag's features, a teacher and an export all call it.
    """
    if num_members(model) is None:
        return jtu.tree_map(lambda x: x[None], fn(model, *args))
    if isinstance(model, Stack):
        model = model.members
    return eqx.filter_vmap(lambda m: fn(m, *args))(model)


def ensemble_log_probs(
    logits: Float[Array, "members *batch classes"],
) -> Float[Array, "*batch classes"]:
    """The log of the mean of the members' probabilities (the ensemble's prediction),
    computed stably from each member's logits; already normalised."""
    log_p = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    return jax.nn.logsumexp(log_p, axis=0) - jnp.log(jnp.float32(log_p.shape[0]))


def combine(
    model: PyTree, outputs: Float[Array, "members *batch classes"]
) -> Float[Array, "*batch classes"]:
    """The one rule that combines what [`per_member`][eqx_fmnist.model.per_member] gave:
    one model's own logits, or a stack's ensemble log mean probabilities
    ([`ensemble_log_probs`][eqx_fmnist.model.ensemble_log_probs]), float32."""
    if num_members(model) is None:
        return outputs[0].astype(jnp.float32)
    return ensemble_log_probs(outputs)
