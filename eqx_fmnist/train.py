"""Training: the config, the state, one compiled step, fused multi-step scans, and `fit`.

The pieces, smallest first:

- [`TrainConfig`][eqx_fmnist.train.TrainConfig]: every choice of a run, validated,
  JSON-serialisable.
- [`TrainState`][eqx_fmnist.train.TrainState]: a PyTree of model, optimiser state, step,
  PRNG key and loss scale. Each step is a pure function `state -> state`.
- [`train_step`][eqx_fmnist.train.train_step]: one AdamW step on one batch,
  `eqx.filter_jit` + `eqx.filter_value_and_grad`.
- [`train_steps`][eqx_fmnist.train.train_steps] /
  [`train_epoch`][eqx_fmnist.train.train_epoch]: the fast path. Many steps in one
  compiled call, as a `lax.scan` over batches gathered on the device, shuffled on the
  device, with the state's buffers donated. The host reads metrics once per call.
- [`fit`][eqx_fmnist.train.fit]: loads data, trains with the fast path, reports
  progress through a callback, evaluates, and returns a
  [`TrainResult`][eqx_fmnist.train.TrainResult].

The batch order is a pure function of the run's key and the global step (see
[`batch_indices`][eqx_fmnist.dataset.batch_indices]): each step computes its own
batch's indices with a keyed bijection and gathers those rows, so results do not depend
on how steps are grouped into calls, a resumed run continues exactly where it stopped,
and a compiled call has no set-up that grows with the data set.
"""

import dataclasses
import json
import logging
import math
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu
import numpy as np
import optax
from jaxtyping import Array, Int, PRNGKeyArray, PyTree, Shaped

from .data import FashionMNIST, load_fashion_mnist
from .dataset import ArrayDataset, batch_indices, normalize, steps_per_epoch, to_datasets
from .evaluate import EvalResult, evaluate
from .losses import accuracy, cross_entropy
from .model import MLP
from .parallel import batch_sharding, check_divisible, make_mesh, replicate
from .precision import (
    FLOAT32,
    DynamicLossScale,
    LossScale,
    NoOpLossScale,
    Policy,
    all_finite,
)

logger = logging.getLogger(__name__)

SCHEDULES = ("constant", "cosine", "warmup_cosine")
ON_NONFINITE = ("raise", "skip")


class NonFiniteError(FloatingPointError):
    """Training produced a NaN or infinite loss or gradient.

    `step` is the first bad step (1-based, as in the history) and `metric` the metric
    that was not finite. The state of the last completed interval before it is the last
    good one.
    """

    def __init__(self, message: str, *, step: int, metric: str):
        super().__init__(message)
        self.step = step
        self.metric = metric


DEFAULT_EPOCHS = 30
VALIDATION_SEED = 20_241_130
"""Fixed seed of the validation split, so every training seed sees the same split."""


# --------------------------------------------------------------------------- config


def _positive_int(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"`{name}` must be a positive int, but got {value!r}.")


def _number(name: str, value: Any, *, low: float, high: float = math.inf, low_open=False):
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (value > low if low_open else value >= low) and value <= high
    if not ok:
        bound = f"{'>' if low_open else '>='} {low}" + (
            f" and <= {high}" if high < math.inf else ""
        )
        raise ValueError(f"`{name}` must be a finite number {bound}, but got {value!r}.")


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Every choice of a training run, validated when made.

    The defaults are the library's recommended recipe for the 784-256-128-10 MLP:
    30 epochs of warmup-cosine AdamW (peak 3e-3, weight decay 5e-2, batch 512) with
    label smoothing 0.1, chosen on a validation split (`benchmarks/tune_recipe.py`).
    [`TrainConfig.codelab()`][eqx_fmnist.train.TrainConfig.codelab] is the codelab's
    reference run.

    **Fields:**

    - `epochs`: passes over the training set. Give `epochs` or `steps`, not both;
        with neither, `epochs = 30`.
    - `steps`: optimiser steps, instead of `epochs`.
    - `batch_size`: examples per step. Defaults to `512`.
    - `learning_rate`: peak AdamW learning rate. Defaults to `3e-3`.
    - `weight_decay`: AdamW's decoupled weight decay. Defaults to `5e-2`.
    - `schedule`: `"constant"`, `"cosine"` (decay to 0) or `"warmup_cosine"` (linear
        warm-up, then cosine decay to 0). Defaults to `"warmup_cosine"`.
    - `warmup_steps`: warm-up length for `"warmup_cosine"`; `None` means 5% of the
        steps. Defaults to `None`.
    - `hidden_sizes`: hidden layer widths. Defaults to `(256, 128)`.
    - `precision`: a [`Policy`][eqx_fmnist.precision.Policy] string such as
        `"p=f32,c=bf16,o=f32"`. Defaults to float32 throughout.
    - `seed`: seeds the initial weights and the batch order. Defaults to `0`.
    - `log_every`: steps per logging interval, i.e. per compiled call and per host
        read of the metrics; `None` means once per epoch. Defaults to `None`.
    - `grad_clip`: clip gradients to this global norm; `None` for no clipping.
    - `label_smoothing`: label smoothing of the cross-entropy. Defaults to `0.1`.
    - `validation_size`: training examples held out (a fixed random split) to tune on;
        `0` trains on all 60,000. Defaults to `0`.
    - `devices`: data-parallel over this many devices (the first of `jax.devices()`);
        `batch_size` must be a multiple of it. Defaults to `1`.
    - `on_nonfinite`: what a NaN or infinite loss or gradient does. `"raise"` stops
        `fit` with a [`NonFiniteError`][eqx_fmnist.train.NonFiniteError] naming the step
        and the metric, before the bad interval is reported or saved. `"skip"` skips the
        step inside the compiled loop (parameters and optimiser state unchanged) and
        counts it in the history's `skipped`. Steps that the float16 loss scaler skips
        for overflowing gradients are never an error. Defaults to `"raise"`.
    """

    epochs: int | None = None
    steps: int | None = None
    batch_size: int = 512
    learning_rate: float = 3e-3
    weight_decay: float = 5e-2
    schedule: str = "warmup_cosine"
    warmup_steps: int | None = None
    hidden_sizes: tuple[int, ...] = (256, 128)
    precision: str = "p=f32,c=f32,o=f32"
    seed: int = 0
    log_every: int | None = None
    grad_clip: float | None = None
    label_smoothing: float = 0.1
    validation_size: int = 0
    devices: int = 1
    on_nonfinite: str = "raise"

    def __post_init__(self):
        if self.epochs is not None and self.steps is not None:
            raise ValueError(
                f"give `epochs` or `steps`, not both (got epochs={self.epochs}, "
                f"steps={self.steps})."
            )
        if self.epochs is None and self.steps is None:
            object.__setattr__(self, "epochs", DEFAULT_EPOCHS)
        for name in ("epochs", "steps", "warmup_steps", "log_every"):
            if getattr(self, name) is not None:
                _positive_int(name, getattr(self, name))
        _positive_int("batch_size", self.batch_size)
        _number("learning_rate", self.learning_rate, low=0.0, low_open=True)
        _number("weight_decay", self.weight_decay, low=0.0)
        _number("label_smoothing", self.label_smoothing, low=0.0, high=1.0)
        if self.grad_clip is not None:
            _number("grad_clip", self.grad_clip, low=0.0, low_open=True)
        if self.on_nonfinite not in ON_NONFINITE:
            raise ValueError(
                f"`on_nonfinite` must be one of {', '.join(ON_NONFINITE)}, "
                f"but got {self.on_nonfinite!r}."
            )
        if self.schedule not in SCHEDULES:
            raise ValueError(
                f"`schedule` must be one of {', '.join(SCHEDULES)}, but got {self.schedule!r}."
            )
        hidden = self.hidden_sizes
        if isinstance(hidden, list):
            object.__setattr__(self, "hidden_sizes", hidden := tuple(hidden))
        if not isinstance(hidden, tuple) or not all(
            isinstance(h, int) and not isinstance(h, bool) and h > 0 for h in hidden
        ):
            raise ValueError(
                f"`hidden_sizes` must be a tuple of positive ints such as (256, 128), "
                f"but got {hidden!r}."
            )
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0:
            raise ValueError(f"`seed` must be a non-negative int, but got {self.seed!r}.")
        _positive_int("devices", self.devices)
        if self.batch_size % self.devices:
            lower = self.batch_size - self.batch_size % self.devices
            raise ValueError(
                f"`batch_size` {self.batch_size} does not split evenly over {self.devices} "
                f"`devices`; use a multiple of {self.devices} such as {max(lower, self.devices)} "
                f"or {lower + self.devices}."
            )
        if not isinstance(self.validation_size, int) or self.validation_size < 0:
            raise ValueError(
                f"`validation_size` must be a non-negative int, but got {self.validation_size!r}."
            )
        self.policy  # noqa: B018  (parses the precision string, raising ValueError)

    @property
    def policy(self) -> Policy:
        """The [`Policy`][eqx_fmnist.precision.Policy] named by `precision`."""
        return Policy.from_string(self.precision)

    @classmethod
    def codelab(cls, **overrides) -> "TrainConfig":
        """The codelab's reference run: AdamW at a constant 3e-3, weight decay 1e-4,
        batch 512, 400 steps, float32, no label smoothing, a log line every 50 steps."""
        base = dict(
            steps=400,
            batch_size=512,
            learning_rate=3e-3,
            weight_decay=1e-4,
            schedule="constant",
            label_smoothing=0.0,
            log_every=50,
        )
        return cls(**(base | overrides))

    def total_steps(self, num_train: int) -> int:
        """Optimiser steps of the whole run for a training set of `num_train` examples."""
        if self.steps is not None:
            return self.steps
        return self.epochs * steps_per_epoch(num_train, self.batch_size)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (tuples become lists)."""
        d = dataclasses.asdict(self)
        d["hidden_sizes"] = list(self.hidden_sizes)
        return d

    @classmethod
    def from_dict(cls, d: Any) -> "TrainConfig":
        """Rebuild from [`to_dict`][eqx_fmnist.train.TrainConfig.to_dict]'s output.

        **Raises:**

        `ValueError` naming unknown keys and listing the valid ones.
        """
        if not isinstance(d, dict):
            raise ValueError(
                f"a TrainConfig must come from a JSON object, but got {type(d).__name__}."
            )
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(d) - set(names))
        if unknown:
            raise ValueError(f"unknown TrainConfig fields {unknown}; valid fields are {names}.")
        d = dict(d)
        if isinstance(d.get("hidden_sizes"), list):
            d["hidden_sizes"] = tuple(d["hidden_sizes"])
        for f in dataclasses.fields(cls):
            if f.name in d:
                d[f.name] = _coerce_field(f.name, _FIELD_KINDS[f.name], d[f.name])
        return cls(**d)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_json(cls, text: str) -> "TrainConfig":
        try:
            d = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"TrainConfig JSON is not valid JSON: {e}") from e
        return cls.from_dict(d)


_FIELD_KINDS = {
    "epochs": "int?",
    "steps": "int?",
    "batch_size": "int",
    "learning_rate": "float",
    "weight_decay": "float",
    "schedule": "str",
    "warmup_steps": "int?",
    "hidden_sizes": "ints",
    "precision": "str",
    "seed": "int",
    "log_every": "int?",
    "grad_clip": "float?",
    "label_smoothing": "float",
    "validation_size": "int",
    "devices": "int",
    "on_nonfinite": "str",
}


def _coerce_field(name: str, kind: str, value: Any) -> Any:
    """Check a JSON value's type for a config field (ValueError, never TypeError)."""
    if kind.endswith("?"):
        if value is None:
            return None
        kind = kind[:-1]
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if kind == "int" and is_int:
        return value
    if kind == "float" and (is_int or isinstance(value, float)):
        try:
            return float(value)
        except OverflowError:
            pass
    if kind == "str" and isinstance(value, str):
        return value
    if kind == "ints" and isinstance(value, tuple | list):
        if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return tuple(value)
    expected = {"int": "an int", "float": "a number", "str": "a string", "ints": "a list of ints"}
    raise ValueError(f"TrainConfig field `{name}` must be {expected[kind]}, but got {value!r}.")


def make_schedule(config: TrainConfig, total_steps: int) -> optax.Schedule:
    """The learning rate as a function of the step, from the config's `schedule`.

    **Arguments:**

    - `config`: the run's config.
    - `total_steps`: the run's length, over which `"cosine"` and `"warmup_cosine"` decay.
    """
    lr = config.learning_rate
    if config.schedule == "constant":
        return optax.constant_schedule(lr)
    if config.schedule == "cosine":
        return optax.cosine_decay_schedule(lr, total_steps)
    warmup = config.warmup_steps or max(1, round(0.05 * total_steps))
    return optax.warmup_cosine_decay_schedule(
        0.0, lr, min(warmup, total_steps), total_steps, end_value=0.0
    )


def make_optimizer(config: TrainConfig, total_steps: int) -> optax.GradientTransformation:
    """AdamW with the config's schedule (and optional global-norm clipping).

    **Arguments:**

    - `config`: the run's config.
    - `total_steps`: the run's length, over which the schedule decays.

    **Returns:**

    An Optax `GradientTransformation`. Its step count lives in its state as an array,
    so the learning rate changes every step without recompiling.
    """
    tx = optax.adamw(make_schedule(config, total_steps), weight_decay=config.weight_decay)
    if config.grad_clip is not None:
        tx = optax.chain(optax.clip_by_global_norm(config.grad_clip), tx)
    return tx


def learning_rate_at(config: TrainConfig, total_steps: int, step: int) -> float:
    """The learning rate the config's schedule gives at `step` (for logs and plots)."""
    return float(make_schedule(config, total_steps)(step))


# --------------------------------------------------------------------------- state


class TrainState(eqx.Module):
    """Everything that changes during training, as one PyTree.

    `optimizer`, `policy` and `label_smoothing` are static: they are part of the
    compiled program, not its inputs.
    """

    model: MLP
    opt_state: PyTree
    step: Int[Array, ""]
    key: PRNGKeyArray
    loss_scale: LossScale
    optimizer: optax.GradientTransformation = eqx.field(static=True)
    policy: Policy = eqx.field(static=True)
    label_smoothing: float = eqx.field(static=True)
    skip_nonfinite: bool = eqx.field(static=True)

    def __init__(
        self,
        model: MLP,
        optimizer: optax.GradientTransformation,
        *,
        key: PRNGKeyArray,
        policy: Policy = FLOAT32,
        loss_scale: LossScale | None = None,
        label_smoothing: float = 0.0,
        skip_nonfinite: bool = False,
    ):
        """**Arguments:**

        - `model`: the model; its inexact arrays are the trained parameters.
        - `optimizer`: an Optax transformation, initialised here on the parameters.
        - `key`: the run's PRNG key (it orders the batches).
        - `policy`: the precision policy. Defaults to float32.
        - `loss_scale`: defaults to a dynamic loss scale when the policy computes in
            float16, and to no scaling otherwise.
        - `label_smoothing`: of the cross-entropy. Defaults to `0`.
        - `skip_nonfinite`: skip (do not apply) a step whose loss or gradients are not
            finite. Defaults to `False`; float16 loss scaling skips overflows regardless.
        """
        model = policy.cast_to_param(model)
        self.model = model
        self.opt_state = optimizer.init(eqx.filter(model, eqx.is_inexact_array))
        self.step = jnp.array(0, jnp.int32)
        self.key = key
        if loss_scale is None:
            loss_scale = DynamicLossScale() if policy.needs_loss_scale else NoOpLossScale()
        self.loss_scale = loss_scale
        self.optimizer = optimizer
        self.policy = policy
        self.label_smoothing = float(label_smoothing)
        self.skip_nonfinite = bool(skip_nonfinite)


def init_state(config: TrainConfig, num_train: int) -> TrainState:
    """The initial [`TrainState`][eqx_fmnist.train.TrainState] of a run.

    **Arguments:**

    - `config`: the run's config; its seed gives the weights and the batch order.
    - `num_train`: training examples (the schedule's length depends on it).
    """
    return _init_state(config, config.total_steps(num_train))


@eqx.filter_jit
def _init_state(config: TrainConfig, total_steps: int) -> TrainState:
    # One compiled program (kept by the persistent compilation cache): eagerly, each of
    # the initialisers' small operations is dispatched, and compiled, on its own.
    model_key, data_key = jr.split(jr.PRNGKey(config.seed))
    return TrainState(
        MLP(hidden_sizes=config.hidden_sizes, key=model_key),
        make_optimizer(config, total_steps),
        key=data_key,
        policy=config.policy,
        label_smoothing=config.label_smoothing,
        skip_nonfinite=config.on_nonfinite == "skip",
    )


# --------------------------------------------------------------------------- one step


def _loss(model, x, y, policy, label_smoothing, loss_scale):
    # Profiles show these operations as `forward`, and their gradients as
    # `transpose(jvp(forward))`: the backward pass.
    with jax.named_scope("forward"):
        logits = jax.vmap(partial(model, policy=policy))(normalize(x))
        loss = cross_entropy(logits, y, label_smoothing=label_smoothing)
        return loss_scale.scale(loss), (loss, accuracy(logits, y))


def _step(state: TrainState, x, y) -> tuple[TrainState, dict[str, Array]]:
    """One optimiser step: the pure function every compiled path is made of."""
    grad_fn = eqx.filter_value_and_grad(_loss, has_aux=True)
    (_, (loss, acc)), grads = grad_fn(
        state.model, x, y, state.policy, state.label_smoothing, state.loss_scale
    )
    with jax.named_scope("optimizer"):
        grads = state.loss_scale.unscale(grads)
        params = eqx.filter(state.model, eqx.is_inexact_array)
        updates, opt_state = state.optimizer.update(grads, state.opt_state, params)
        model = eqx.apply_updates(state.model, updates)
    if isinstance(state.loss_scale, NoOpLossScale) and not state.skip_nonfinite:
        finite = jnp.array(True)
    else:
        # A float16 overflow (or, with skip_nonfinite, any NaN/inf): keep the old
        # parameters and optimiser state; the loss scale, if any, shrinks.
        finite = all_finite(grads)
        if state.skip_nonfinite:
            finite = finite & jnp.isfinite(loss)
        model, opt_state = jtu.tree_map(
            lambda new, old: jnp.where(finite, new, old),
            (model, opt_state),
            (state.model, state.opt_state),
        )
    new_state = eqx.tree_at(
        lambda s: (s.model, s.opt_state, s.step, s.loss_scale),
        state,
        (model, opt_state, state.step + 1, state.loss_scale.adjust(finite)),
    )
    metrics = {
        "loss": loss,
        "accuracy": acc,
        "grad_norm": optax.tree.norm(grads),
        "skipped": ~finite,
    }
    return new_state, metrics


def _step_on_batch(batch, state):
    return _step(state, *batch)


# Traces are counted (not limited) so that tests can pin "compiled once".
_step_traced = eqx.debug.assert_max_traces(_step_on_batch, max_traces=None)
_train_step_jit = eqx.filter_jit(_step_traced, donate="all-except-first")


def train_step(
    state: TrainState,
    x: Shaped[Array, "batch 784"],
    y: Int[Array, " batch"],
) -> tuple[TrainState, dict[str, Array]]:
    """One compiled AdamW step on one batch.

    **Arguments:**

    - `state`: the current state. Its buffers are donated: do not use it afterwards.
    - `x`: images of shape `(batch, 784)`, `uint8` pixels or floats in `[0, 1]`.
    - `y`: labels of shape `(batch,)`.

    **Returns:**

    `(new_state, metrics)`, where `metrics` holds scalar arrays `loss`, `accuracy`,
    `grad_norm` and `skipped` (a float16 step skipped for non-finite gradients).

    !!! warning

        Calling this once per batch from Python costs a dispatch per step. For
        training, use [`train_steps`][eqx_fmnist.train.train_steps], which runs many
        steps in one compiled call.
    """
    return _train_step_jit((x, y), state)


# --------------------------------------------------------------------------- fused steps


def _steps(static, state: TrainState):
    dataset, batch_size, num_steps, mesh = static
    n = len(dataset)

    def body(st, _):
        with jax.named_scope("gather"):
            idx = batch_indices(st.key, st.step, n, batch_size)
            x, y = dataset.images[idx], dataset.labels[idx]
            if mesh is not None:
                # Split the batch over the devices; the state is replicated, so XLA's
                # SPMD partitioner all-reduces the gradients.
                x = jax.lax.with_sharding_constraint(x, batch_sharding(mesh, 2))
                y = jax.lax.with_sharding_constraint(y, batch_sharding(mesh, 1))
        return _step(st, x, y)

    return jax.lax.scan(body, state, length=num_steps)


_steps_traced = eqx.debug.assert_max_traces(_steps, max_traces=None)
_train_steps_jit = eqx.filter_jit(_steps_traced, donate="all-except-first")


def train_steps(
    state: TrainState,
    dataset: ArrayDataset,
    *,
    batch_size: int,
    num_steps: int,
    mesh: jax.sharding.Mesh | None = None,
) -> tuple[TrainState, dict[str, Array]]:
    """`num_steps` training steps in one compiled call: the library's fast path.

    Each step computes its batch's indices on the device (see
    [`batch_indices`][eqx_fmnist.dataset.batch_indices]) and gathers those rows, the
    steps run as one `lax.scan`, and the state's buffers are donated. Each distinct
    `num_steps` (and dataset shape) compiles once.

    **Arguments:**

    - `state`: the current state. Its buffers are donated: do not use it afterwards.
    - `dataset`: the training set, on the device.
    - `batch_size`: examples per step.
    - `num_steps`: steps to run.
    - `mesh`: a [`make_mesh`][eqx_fmnist.parallel.make_mesh] mesh to split each batch
        over (data parallel; `state` and `dataset` should be replicated on it). Defaults
        to `None`: wherever the arrays are.

    **Returns:**

    `(new_state, metrics)`; each metric is an array of shape `(num_steps,)`.
    """
    _check_chunk(dataset, batch_size, num_steps, mesh)
    return _train_steps_jit((dataset, batch_size, num_steps, mesh), state)


def _check_chunk(dataset: ArrayDataset, batch_size: int, num_steps: int, mesh) -> None:
    _positive_int("num_steps", num_steps)
    steps_per_epoch(len(dataset), batch_size)  # validates batch_size
    if mesh is not None:
        check_divisible(batch_size, mesh)


def compile_steps(
    state: TrainState,
    dataset: ArrayDataset,
    *,
    batch_size: int,
    num_steps: int,
    mesh: jax.sharding.Mesh | None = None,
) -> Callable[[TrainState], tuple[TrainState, dict[str, Array]]]:
    """Compile [`train_steps`][eqx_fmnist.train.train_steps] ahead of time, for states
    shaped like `state`.

    The arguments are those of `train_steps`; `state` is only looked at (its shapes,
    dtypes and shardings), not donated. Compiling apart from running lets a caller time
    the two separately, and read XLA's own cost estimate of the chunk.

    **Returns:**

    A function `run(state) -> (new_state, metrics)` that runs the chunk without
    tracing or compiling again (it donates `state`), with the compiled XLA executable
    (a `jax.stages.Compiled`) as `run.compiled`: for example
    `run.compiled.cost_analysis()["flops"]` or `run.compiled.as_text()`.
    """
    _check_chunk(dataset, batch_size, num_steps, mesh)
    static = (dataset, batch_size, num_steps, mesh)
    compiled = _train_steps_jit.lower(static, state).compile()

    def run(state: TrainState) -> tuple[TrainState, dict[str, Array]]:
        return compiled(static, state)

    run.compiled = compiled.compiled  # type: ignore[attr-defined]  (a jax.stages.Compiled)
    return run


def train_epoch(
    state: TrainState,
    dataset: ArrayDataset,
    *,
    batch_size: int,
    mesh: jax.sharding.Mesh | None = None,
) -> tuple[TrainState, dict[str, Array]]:
    """One epoch (`len(dataset) // batch_size` steps) in one compiled call; see
    [`train_steps`][eqx_fmnist.train.train_steps]."""
    spe = steps_per_epoch(len(dataset), batch_size)
    return train_steps(state, dataset, batch_size=batch_size, num_steps=spe, mesh=mesh)


# --------------------------------------------------------------------------- fit


@dataclasses.dataclass
class TrainResult:
    """What [`fit`][eqx_fmnist.train.fit] returns.

    **Fields:**

    - `state`: the final [`TrainState`][eqx_fmnist.train.TrainState].
    - `config`: the run's config.
    - `history`: one dict per logging interval: `step`, `epoch`, `loss`, `accuracy`,
        `grad_norm` (means over the interval), `skipped` (float16 steps skipped),
        `learning_rate` (at the interval's last step), `seconds` and
        `examples_per_sec` (of the interval, compile excluded), and
        `valid_loss`/`valid_accuracy` when a validation set is held out.
    - `test`: [`EvalResult`][eqx_fmnist.evaluate.EvalResult] on all test images.
    - `validation`: the same on the held-out validation set, or `None`.
    - `compile_seconds`: time spent compiling the training calls.
    - `train_seconds`: time spent running them.
    - `load_seconds`: time spent loading data and moving it to the device.
    """

    state: TrainState
    config: TrainConfig
    history: list[dict[str, float | int]]
    test: EvalResult
    validation: EvalResult | None
    compile_seconds: float
    train_seconds: float
    load_seconds: float

    @property
    def model(self) -> MLP:
        """The trained model."""
        return self.state.model

    @property
    def examples_per_sec(self) -> float:
        """Training throughput over the whole run, compile excluded."""
        steps = sum(h["steps"] for h in self.history)
        return steps * self.config.batch_size / max(self.train_seconds, 1e-9)


Callback = Callable[[dict[str, float | int], TrainState], None]
"""`callback(interval_metrics, state)`, called once per logging interval."""


def _check_finite(metrics: dict[str, np.ndarray], *, first_step: int, policy: str) -> None:
    """Raise `NonFiniteError` for the first step whose loss or (unskipped) gradient is
    NaN or infinite. Skipped steps were not applied, so they are not errors."""
    if policy != "raise":
        return
    bad_loss = ~np.isfinite(metrics["loss"])
    bad_grad = ~np.isfinite(metrics["grad_norm"]) & ~metrics["skipped"]
    bad = bad_loss | bad_grad
    if bad.any():
        i = int(np.argmax(bad))
        metric = "loss" if bad_loss[i] else "gradient norm"
        value = metrics["loss"][i] if bad_loss[i] else metrics["grad_norm"][i]
        raise NonFiniteError(
            f"step {first_step + i}: the {metric} is {value}; training stopped before this "
            "interval was reported or saved. Lower the learning rate, clip gradients "
            "(grad_clip), or pass on_nonfinite='skip' to skip such steps.",
            step=first_step + i,
            metric=metric,
        )


def _split_data(
    config: TrainConfig, data: FashionMNIST | tuple[ArrayDataset, ArrayDataset] | None
) -> tuple[ArrayDataset, ArrayDataset | None, ArrayDataset]:
    if data is None:
        data = load_fashion_mnist()
    train, test = to_datasets(data) if isinstance(data, FashionMNIST) else data
    valid = None
    if config.validation_size:
        train, valid = train.split(config.validation_size, key=jr.PRNGKey(VALIDATION_SEED))
    return train, valid, test


def fit(
    config: TrainConfig = TrainConfig(),
    data: FashionMNIST | tuple[ArrayDataset, ArrayDataset] | None = None,
    *,
    state: TrainState | None = None,
    callback: Callback | None = None,
    eval_batch_size: int = 1000,
) -> TrainResult:
    """Train the MLP with the fast path and evaluate it on the whole test set.

    **Arguments:**

    - `config`: the run. Defaults to the recommended recipe.
    - `data`: a [`FashionMNIST`][eqx_fmnist.data.FashionMNIST] or `(train, test)`
        [`ArrayDataset`][eqx_fmnist.dataset.ArrayDataset]s. Defaults to
        `load_fashion_mnist()`.
    - `state`: a state to continue from, e.g. from
        [`load_checkpoint`][eqx_fmnist.checkpoint.load_checkpoint]; training resumes
        at `state.step` and stops at the config's total steps. Its buffers are donated.
        Defaults to a fresh [`init_state`][eqx_fmnist.train.init_state].
    - `callback`: called as `callback(metrics, state)` after each logging interval,
        e.g. to draw a progress bar or save a checkpoint. `metrics` is that interval's
        `history` entry. Defaults to `None`.
    - `eval_batch_size`: batch size of the evaluations. Defaults to `1000`.

    **Returns:**

    A [`TrainResult`][eqx_fmnist.train.TrainResult].

    !!! example

        ```python
        import eqx_fmnist as ef

        result = ef.fit(ef.TrainConfig(epochs=5))
        result.test.accuracy  # 0.88 here, on all 10,000 test images
        ```
    """
    t_load = time.perf_counter()
    train, valid, test = _split_data(config, data)
    if state is None:
        state = init_state(config, len(train))
    mesh = None
    if config.devices > 1 or jax.process_count() > 1:
        mesh = make_mesh(config.devices)
        check_divisible(config.batch_size, mesh)
        train, valid, test, state = replicate((train, valid, test, state), mesh)
    jax.block_until_ready((train, test, state))
    load_seconds = time.perf_counter() - t_load

    total = config.total_steps(len(train))
    spe = steps_per_epoch(len(train), config.batch_size)
    interval = config.log_every or spe
    step = int(state.step)
    if step > total:
        raise ValueError(f"the state is at step {step}, past this config's {total} steps.")
    # The learning rate of every step, computed once (for the history), not per interval.
    learning_rates = np.asarray(
        jax.jit(jax.vmap(make_schedule(config, total)))(jnp.arange(max(total, 1)))
    )
    history: list[dict[str, float | int]] = []
    compiled: dict[int, Any] = {}
    compile_seconds = train_seconds = 0.0
    while step < total:
        # Intervals end on multiples of `interval`, so a resumed run logs (and saves)
        # at the same steps as one that never stopped.
        k = min(interval - step % interval, total - step)
        if k not in compiled:  # compile ahead of time, so compiling is timed on its own
            t = time.perf_counter()
            compiled[k] = compile_steps(
                state, train, batch_size=config.batch_size, num_steps=k, mesh=mesh
            )
            compile_seconds += time.perf_counter() - t
        t = time.perf_counter()
        state, metrics = compiled[k](state)
        metrics = jax.device_get(metrics)  # the one host sync of the interval
        seconds = time.perf_counter() - t
        train_seconds += seconds
        _check_finite(metrics, first_step=step + 1, policy=config.on_nonfinite)
        step += k
        entry = {
            "step": step,
            "epoch": step / spe,
            "steps": k,
            "loss": float(np.mean(metrics["loss"])),
            "accuracy": float(np.mean(metrics["accuracy"])),
            "grad_norm": float(np.mean(metrics["grad_norm"])),
            "skipped": int(np.sum(metrics["skipped"])),
            "learning_rate": float(learning_rates[step - 1]),
            "seconds": seconds,
            "examples_per_sec": k * config.batch_size / seconds,
        }
        if valid is not None:
            v = evaluate(
                state.model, valid, policy=state.policy, batch_size=eval_batch_size, mesh=mesh
            )
            entry |= {"valid_loss": v.loss, "valid_accuracy": v.accuracy}
        history.append(entry)
        logger.info(
            "step %d/%d loss %.4f acc %.4f %.0f ex/s",
            step,
            total,
            entry["loss"],
            entry["accuracy"],
            entry["examples_per_sec"],
        )
        if callback is not None:
            callback(entry, state)
    test_result = evaluate(
        state.model, test, policy=state.policy, batch_size=eval_batch_size, mesh=mesh
    )
    valid_result = (
        None
        if valid is None
        else evaluate(
            state.model, valid, policy=state.policy, batch_size=eval_batch_size, mesh=mesh
        )
    )
    return TrainResult(
        state=state,
        config=config,
        history=history,
        test=test_result,
        validation=valid_result,
        compile_seconds=compile_seconds,
        train_seconds=train_seconds,
        load_seconds=load_seconds,
    )
