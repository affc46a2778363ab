"""Mixed precision as a value: a `Policy` of three dtypes, and loss scaling for float16.

A [`Policy`][eqx_fmnist.precision.Policy] says which dtype parameters are stored in
(`param_dtype`), which the matmuls multiply in (`compute_dtype`) and which the logits
come out in (`output_dtype`). A matmul in a lower-precision compute dtype accumulates
and returns float32 ([`Policy.matmul`][eqx_fmnist.precision.Policy.matmul]), so biases,
activations and the loss stay in float32. Parameters and optimiser state stay in the
parameter dtype; only the matmuls are cast, so gradients come back in the parameter
dtype. In training, [`Policy.dense`][eqx_fmnist.precision.Policy.dense] writes each
layer's matmul for the whole batch with its own backward pass, so that the gradient
matmuls multiply in the compute dtype too (JAX would otherwise transpose a dot that
accumulates in float32 into float32 x float32 dots).

float16 has a narrow exponent range, so small gradients underflow to zero. A loss
scale multiplies the loss before differentiation and divides the gradients after;
[`DynamicLossScale`][eqx_fmnist.precision.DynamicLossScale] finds the largest scale
that does not overflow. Every scale is a JAX array, so changing it never recompiles.

Mixed precision is one concept here, kept whole: the policy's
dtypes, how its matmuls run, and the loss scale that float16 needs are read together.
"""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
from jax.typing import DTypeLike
from jaxtyping import Array, Bool, Float, Int, PyTree

_SHORT = {"float32": "f32", "bfloat16": "bf16", "float16": "f16", "float64": "f64"}
_DTYPES: dict[str, np.dtype] = {n: jnp.dtype(k) for k, v in _SHORT.items() for n in (k, v)}
_KEYS = {"p": "param", "params": "param", "c": "compute", "compute": "compute"}
_KEYS |= {"o": "output", "output": "output"}


def _to_dtype(value, what: str) -> np.dtype:
    if isinstance(value, str):
        if value.lower() not in _DTYPES:
            raise ValueError(
                f"{what}: unknown dtype {value!r}; valid names are {', '.join(_DTYPES)}."
            )
        dtype = _DTYPES[value.lower()]
    elif value is None:
        raise TypeError(f"{what} must be a dtype or its name ({', '.join(_DTYPES)}), not None.")
    else:
        dtype = jnp.dtype(value)
    if dtype.name not in _DTYPES:
        raise ValueError(
            f"{what}: {dtype.name} is not a floating dtype; use one of {', '.join(_DTYPES)}."
        )
    if dtype.name == "float64" and not jax.config.jax_enable_x64:  # pyright: ignore[reportAttributeAccessIssue]
        raise ValueError(
            f"{what}: float64 needs JAX's 64-bit mode (jax.config.update('jax_enable_x64', "
            "True) before any array is made); without it JAX computes in float32."
        )
    return dtype


FLOAT16_OVERFLOW = 65520.0
"""The smallest magnitude that float16 rounds to infinity (its largest finite is 65504)."""


def astype(x: Array | np.ndarray, dtype: DTypeLike) -> Array | np.ndarray:
    """`x.astype(dtype)`, overflowing to infinity as IEEE float16 does on every backend.

    A TPU's float16 values may keep float32's range (on a v5e, 2^40 cast to float16 and
    back came back 2^40), so a loss scale never saw the overflow it exists to catch:
    magnitudes float16 rounds to infinity are set to it first. Elsewhere no bit changes.
    """
    dtype = jnp.dtype(dtype)
    if dtype == jnp.float16 and x.dtype != dtype and jnp.issubdtype(x.dtype, jnp.floating):
        x = jnp.where(jnp.abs(x) < FLOAT16_OVERFLOW, x, x * jnp.inf)
    return x.astype(dtype)


def _cast(tree: PyTree, dtype: np.dtype) -> PyTree:
    """The floating-point array leaves of `tree` cast to `dtype` by `astype`."""

    def cast(x):
        if isinstance(x, jax.Array | np.ndarray) and jnp.issubdtype(x.dtype, jnp.floating):
            return astype(x, dtype)
        return x

    return jtu.tree_map(cast, tree)


class Policy(eqx.Module):
    """Which dtype parameters are stored in, computed in, and output in."""

    param_dtype: np.dtype = eqx.field(static=True)
    compute_dtype: np.dtype = eqx.field(static=True)
    output_dtype: np.dtype = eqx.field(static=True)

    def __init__(
        self,
        param_dtype: DTypeLike = "float32",
        compute_dtype: DTypeLike | None = None,
        output_dtype: DTypeLike | None = None,
    ):
        """**Arguments:**

        - `param_dtype`: storage dtype of parameters and optimiser state. Defaults to
            `float32`.
        - `compute_dtype`: dtype of the forward pass. Defaults to `param_dtype`.
        - `output_dtype`: dtype of the logits. Defaults to `param_dtype`.

        Each may be a dtype or a name: `float32`/`f32`, `bfloat16`/`bf16`,
        `float16`/`f16`, `float64`/`f64`.
        """
        self.param_dtype = _to_dtype(param_dtype, "param_dtype")
        self.compute_dtype = _to_dtype(
            param_dtype if compute_dtype is None else compute_dtype, "compute_dtype"
        )
        self.output_dtype = _to_dtype(
            param_dtype if output_dtype is None else output_dtype, "output_dtype"
        )

    @classmethod
    def from_string(cls, spec: str) -> "Policy":
        """Parse a jmp-style policy: `"p=f32,c=bf16,o=f32"`, or with long keys
        `"params=float32,compute=bfloat16,output=float32"`, or a single dtype name for
        all three (`"float32"`).

        Keys left out: a missing `p` is float32, and a missing `c` or `o` is the
        *parameter* dtype, so `"p=bf16"` is bfloat16 throughout and `"c=bf16"` is
        float32 parameters and logits with bfloat16 matmuls. (jmp's defaulting rule
        differs; write all three keys to be unambiguous in both.)

        **Raises:**

        `ValueError` naming the bad part and listing the valid keys and dtype names.
        """
        if not isinstance(spec, str):
            raise TypeError(f"policy spec must be a str, but got {type(spec).__name__}.")
        spec = spec.strip()
        if "=" not in spec:
            return cls(_to_dtype(spec, f"policy {spec!r}"))
        found: dict[str, np.dtype] = {}
        for part in spec.split(","):
            key, sep, value = part.partition("=")
            key = key.strip().lower()
            if not sep or key not in _KEYS:
                raise ValueError(
                    f"policy {spec!r}: cannot read {part.strip()!r}; write key=dtype pairs "
                    f"with keys p/params, c/compute, o/output and dtypes {', '.join(_DTYPES)}, "
                    "e.g. 'p=f32,c=bf16,o=f32'."
                )
            if _KEYS[key] in found:
                raise ValueError(f"policy {spec!r}: {key!r} is given twice.")
            found[_KEYS[key]] = _to_dtype(value.strip(), f"policy {spec!r}")
        if "param" not in found:
            found["param"] = jnp.dtype("float32")
        return cls(found["param"], found.get("compute"), found.get("output"))

    def __str__(self) -> str:
        names = (self.param_dtype, self.compute_dtype, self.output_dtype)
        p, c, o = (_SHORT[d.name] for d in names)
        return f"p={p},c={c},o={o}"

    def cast_to_param(self, tree: PyTree) -> PyTree:
        """Cast the floating-point leaves of `tree` to `param_dtype`."""
        return _cast(tree, self.param_dtype)

    def cast_to_compute(self, tree: PyTree) -> PyTree:
        """Cast the floating-point leaves of `tree` to `compute_dtype`."""
        return _cast(tree, self.compute_dtype)

    @property
    def accumulate_dtype(self) -> np.dtype:
        """The dtype matmuls accumulate and return in: float32 for a bfloat16 or float16
        compute dtype, otherwise the compute dtype itself."""
        f32 = jnp.dtype("float32")
        return f32 if self.compute_dtype.itemsize < f32.itemsize else self.compute_dtype

    @property
    def matmul_precision(self) -> jax.lax.Precision:
        """The precision every matmul of the policy asks XLA for: `DEFAULT` for bfloat16
        (every backend multiplies its operands exactly, accumulating in float32);
        `HIGHEST` for the others, so that `c=f32` means float32 products everywhere (at
        JAX's default a TPU multiplies float32 in one bfloat16 pass, a recent NVIDIA GPU in
        TF32) and `c=f16` float16 ones (a TPU's default rounds them to bfloat16)."""
        if self.compute_dtype == jnp.bfloat16:
            return jax.lax.Precision.DEFAULT
        return jax.lax.Precision.HIGHEST

    @property
    def products(self) -> str:
        """What the matmuls multiply in, as a run's summary and the benchmarks record it:
        `"float32 (highest)"`, `"bfloat16 (default)"`, ..."""
        return f"{self.compute_dtype.name} ({self.matmul_precision.name.lower()})"

    def matmul(self, a: Float[Array, "*a"], b: Float[Array, "*b"]) -> Float[Array, "*c"]:
        """`a @ b` that multiplies in `compute_dtype` and accumulates in
        [`accumulate_dtype`][eqx_fmnist.precision.Policy.accumulate_dtype].

        Both inputs are cast to the compute dtype and the product is returned in the
        accumulation dtype (`preferred_element_type`), never rounded back: the form
        bfloat16 hardware runs fast (tensor cores, AMX), with float32's accuracy in every
        sum. With a float32 policy it is a float32 matmul at `HIGHEST`.
        """
        a, b = self.cast_to_compute(a), self.cast_to_compute(b)
        acc = self.accumulate_dtype
        preferred = None if acc == self.compute_dtype else acc
        return jnp.matmul(a, b, precision=self.matmul_precision, preferred_element_type=preferred)

    @property
    def lowers_matmuls(self) -> bool:
        """Whether the matmuls multiply in a narrower dtype than they accumulate in (a
        bfloat16 or float16 compute dtype)."""
        return self.accumulate_dtype != self.compute_dtype

    def dense(
        self, x: Float[Array, "batch in_size"], weight: Float[Array, "out_size in_size"]
    ) -> Float[Array, "batch out_size"]:
        """`x @ weight.T` for a whole batch, forward **and backward** in the compute
        dtype, accumulating in [`accumulate_dtype`][eqx_fmnist.precision.Policy.accumulate_dtype].

        Its gradient is written by hand (a `jax.custom_vjp`): the incoming gradient is
        cast to the compute dtype, and the input gradient `g @ weight` and the weight
        gradient `g.T @ x` are two matmuls of compute-dtype operands that accumulate in
        float32, each one matmul over the batch. (Left to autodiff, the transpose of a
        dot with `preferred_element_type=float32` multiplies the float32 gradient by a
        float32 copy of the operand.) With a float32 policy it is a float32 matmul at `HIGHEST`.
        """
        if not self.lowers_matmuls:
            x, weight = self.cast_to_compute(x), self.cast_to_compute(weight)
            return jnp.matmul(x, weight.T, precision=self.matmul_precision)
        return _dense(x, weight, self.compute_dtype, self.accumulate_dtype, self.matmul_precision)

    @property
    def needs_loss_scale(self) -> bool:
        """Whether the compute dtype is float16, whose gradients need a loss scale."""
        return self.compute_dtype == jnp.float16 or self.param_dtype == jnp.float16


_CONTRACT_LAST = (((1,), (1,)), ((), ()))  # (b, i) x (o, i) -> (b, o)
_CONTRACT_OUT = (((1,), (0,)), ((), ()))  # (b, o) x (o, i) -> (b, i)
_CONTRACT_INNER = (((1,), (0,)), ((), ()))  # (o, b) x (b, i) -> (o, i)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3, 4))
def _dense(x, weight, compute, accumulate, precision):
    return _dense_fwd(x, weight, compute, accumulate, precision)[0]


def _dense_fwd(x, weight, compute, accumulate, precision):
    xc, wc = astype(x, compute), astype(weight, compute)
    out = jax.lax.dot_general(
        xc, wc, _CONTRACT_LAST, precision=precision, preferred_element_type=accumulate
    )
    # The residuals are the compute-dtype copies: half the memory of float32 ones. A
    # zero-size array of each input's dtype tells the backward pass what to return.
    return out, (xc, wc, jnp.zeros((0,), x.dtype), jnp.zeros((0,), weight.dtype))


def _dense_bwd(compute, accumulate, precision, residuals, g):
    xc, wc, x_kind, w_kind = residuals
    gc = astype(g, compute)
    dx = jax.lax.dot_general(
        gc, wc, _CONTRACT_OUT, precision=precision, preferred_element_type=accumulate
    )
    # g.T @ x with g.T transposed before the cast (the barrier keeps XLA from folding it
    # into the dot): XLA's CPU runs the bf16 step at 1.2x a float32 one in this form, 1.14x
    # contracting both batch axes (benchmarks/results/step_costs.md); the same numbers.
    gt = astype(jax.lax.optimization_barrier(g.T), compute)
    dw = jax.lax.dot_general(
        gt, xc, _CONTRACT_INNER, precision=precision, preferred_element_type=accumulate
    )
    return astype(dx, x_kind.dtype), astype(dw, w_kind.dtype)


_dense.defvjp(_dense_fwd, _dense_bwd)

FLOAT32 = Policy("float32")
"""Everything float32: the default, and the codelab's."""
MIXED_BF16 = Policy("float32", "bfloat16", "float32")
"""float32 parameters, bfloat16 matmuls, float32 logits."""
MIXED_F16 = Policy("float32", "float16", "float32")
"""float32 parameters, float16 matmuls, float32 logits; train it with a loss scale."""


def optax_promotion():
    """JAX's standard dtype promotion, for calls into Optax.

    The library runs under `jax_numpy_dtype_promotion="strict"` (its tests do), but
    Optax's schedules and Adam's bias correction raise a Python float to the int32 step
    count, which strict promotion refuses; inside this context they promote as usual.
    """
    return jax.numpy_dtype_promotion("standard")


# --------------------------------------------------------------------------- loss scaling


def all_finite(tree: PyTree) -> Bool[Array, ""]:
    """Whether every floating-point leaf of `tree` is finite (no inf, no NaN)."""
    leaves = [
        jnp.all(jnp.isfinite(x))
        for x in jtu.tree_leaves(tree)
        if eqx.is_array(x) and jnp.issubdtype(x.dtype, jnp.inexact)
    ]
    return jnp.stack(leaves).all() if leaves else jnp.array(True)


class NoOpLossScale(eqx.Module):
    """No loss scaling: for float32 and bfloat16, whose exponent range is float32's."""

    def scale(self, tree: PyTree) -> PyTree:
        return tree

    def unscale(self, tree: PyTree) -> PyTree:
        return tree

    def adjust(self, grads_finite: Bool[Array, ""]) -> "NoOpLossScale":
        return self

    @property
    def loss_scale(self) -> Float[Array, ""]:
        return jnp.array(1.0, jnp.float32)


class _ScaledLoss(eqx.Module):
    """Multiplying by `self.loss_scale` and dividing by it, shared by the scales below."""

    loss_scale: eqx.AbstractVar[Float[Array, ""]]

    def scale(self, tree: PyTree) -> PyTree:
        """Multiply every leaf of `tree` (the loss) by the scale."""
        return jtu.tree_map(lambda x: x * self.loss_scale.astype(x.dtype), tree)

    def unscale(self, tree: PyTree) -> PyTree:
        """Divide every leaf of `tree` (the gradients) by the scale."""
        inv = 1.0 / self.loss_scale
        return jtu.tree_map(lambda x: x * inv.astype(x.dtype), tree)


class StaticLossScale(_ScaledLoss):
    """Multiply the loss by a fixed scale and divide the gradients by it."""

    loss_scale: Float[Array, ""]

    def __init__(self, loss_scale: float | Float[Array, ""] = 2.0**15):
        """**Arguments:** `loss_scale`, the scale. Defaults to `2 ** 15`."""
        self.loss_scale = jnp.asarray(loss_scale, jnp.float32)

    def adjust(self, grads_finite: Bool[Array, ""]) -> "StaticLossScale":
        return self


class DynamicLossScale(_ScaledLoss):
    """A loss scale that grows after `period` finite steps and halves on an overflow.

    A step whose gradients are not finite is skipped by the training step (parameters
    and optimiser state unchanged) and the scale is divided by `factor`.
    """

    loss_scale: Float[Array, ""]
    counter: Int[Array, ""]
    period: int = eqx.field(static=True)
    factor: float = eqx.field(static=True)
    min_loss_scale: float = eqx.field(static=True)

    def __init__(
        self,
        loss_scale: float | Float[Array, ""] = 2.0**15,
        counter: int | Int[Array, ""] = 0,
        *,
        period: int = 2000,
        factor: float = 2.0,
        min_loss_scale: float = 1.0,
    ):
        """**Arguments:**

        - `loss_scale`: the starting scale. Defaults to `2 ** 15`.
        - `counter`: finite steps since the last change. Defaults to `0`.
        - `period`: finite steps before the scale grows by `factor`. Defaults to `2000`.
        - `factor`: growth and shrink factor. Defaults to `2`.
        - `min_loss_scale`: the scale never drops below this. Defaults to `1`.
        """
        if period < 1 or factor <= 1 or min_loss_scale <= 0:
            raise ValueError(
                "DynamicLossScale needs period >= 1, factor > 1 and min_loss_scale > 0, "
                f"but got period={period}, factor={factor}, min_loss_scale={min_loss_scale}."
            )
        self.loss_scale = jnp.asarray(loss_scale, jnp.float32)
        self.counter = jnp.asarray(counter, jnp.int32)
        self.period = period
        self.factor = factor
        self.min_loss_scale = min_loss_scale

    def adjust(self, grads_finite: Bool[Array, ""]) -> "DynamicLossScale":
        """The scale for the next step, given whether this step's gradients were finite."""
        grow = grads_finite & (self.counter + 1 >= self.period)
        scale = jnp.where(
            grads_finite,
            jnp.where(grow, self.loss_scale * self.factor, self.loss_scale),
            jnp.maximum(self.loss_scale / self.factor, self.min_loss_scale),
        )
        counter = jnp.where(grads_finite & ~grow, self.counter + 1, 0)
        return eqx.tree_at(lambda s: (s.loss_scale, s.counter), self, (scale, counter))


LossScale = NoOpLossScale | StaticLossScale | DynamicLossScale
