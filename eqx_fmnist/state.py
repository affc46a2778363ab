"""The training state: everything that changes during training, as one PyTree.

[`init_state`][eqx_fmnist.state.init_state] builds one run's state;
[`init_members`][eqx_fmnist.state.init_members] builds many runs' states stacked on a
leading axis (`eqx.filter_vmap` over the same initialiser), which every compiled path
then runs under `eqx.filter_vmap` as one program.
"""

import dataclasses
import typing
from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu
import numpy as np
import optax
from jaxtyping import Array, Float, Int, PRNGKeyArray, PyTree

from .config import BatchedHyperparameter, TrainConfig, make_optimizer
from .model import MLP
from .precision import FLOAT32, DynamicLossScale, LossScale, NoOpLossScale, Policy


class TrainState(eqx.Module):
    """Everything that changes during training, as one PyTree.

    `optimizer`, `policy` and `label_smoothing` are static: they are part of the
    compiled program, not its inputs. `hyperparams` holds the numbers that are inputs
    instead: empty for one run; `{"label_smoothing": ...}` for members of a sweep that
    differ in it (a sweep's learning rate and weight decay live in the optimiser's state,
    `opt_state.hyperparams`).
    """

    model: MLP
    opt_state: PyTree
    step: Int[Array, ""]
    key: PRNGKeyArray
    loss_scale: LossScale
    hyperparams: dict[str, Float[Array, ""]]
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
        hyperparams: dict[str, Float[Array, ""]] | None = None,
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
        - `hyperparams`: numbers held as arrays rather than compiled in; only
            `"label_smoothing"` is read (it then replaces `label_smoothing`). Defaults to
            none.
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
        self.hyperparams = dict(hyperparams or {})


def init_state(config: TrainConfig, num_train: int) -> TrainState:
    """The initial [`TrainState`][eqx_fmnist.state.TrainState] of a run.

    **Arguments:**

    - `config`: the run's config; its seed gives the weights and the batch order.
    - `num_train`: training examples (the schedule's length depends on it).
    """
    return _init_state(config, config.total_steps(num_train))


@eqx.filter_jit
def _init_state(config: TrainConfig, total_steps: int) -> TrainState:
    # One compiled program (kept by the persistent compilation cache): eagerly, each of
    # the initialisers' small operations is dispatched, and compiled, on its own.
    return _build(config, total_steps, config.seed, {})


def _build(config: TrainConfig, total_steps: int, seed, batched: dict) -> TrainState:
    """One member's state; `seed` and the `batched` numbers may be traced."""
    model_key, data_key = jr.split(jr.PRNGKey(seed))
    inject = "learning_rate" in batched or "weight_decay" in batched
    state = TrainState(
        MLP(hidden_sizes=config.hidden_sizes, key=model_key),
        make_optimizer(config, total_steps, inject=inject),
        key=data_key,
        policy=config.policy,
        label_smoothing=config.label_smoothing,
        skip_nonfinite=config.on_nonfinite == "skip",
        hyperparams={k: v for k, v in batched.items() if k == "label_smoothing"},
    )
    if inject:
        held = state.opt_state.hyperparams
        numbers = {k: batched.get(k, held[k]).astype(held[k].dtype) for k in held}
        state = eqx.tree_at(lambda s: s.opt_state.hyperparams, state, numbers)
    return state


# --------------------------------------------------------------------------- members

BATCHED = typing.get_args(BatchedHyperparameter)
"""The config fields members may differ in besides `seed` (from
[`BatchedHyperparameter`][eqx_fmnist.config.BatchedHyperparameter])."""
PER_MEMBER = ("seed", *BATCHED)


def check_members(configs: Sequence[TrainConfig]) -> None:
    """Raise `ValueError` unless `configs` can train as members of one program: at least
    one, all agreeing on every field but `seed` and the
    [`BATCHED`][eqx_fmnist.state.BATCHED] numbers, on one device."""
    if not configs:
        raise ValueError("members: give at least one config (or seed).")
    base = dataclasses.replace(configs[0], **{k: getattr(TrainConfig(), k) for k in PER_MEMBER})
    for i, c in enumerate(configs):
        other = dataclasses.replace(c, **{k: getattr(TrainConfig(), k) for k in PER_MEMBER})
        if other != base:
            diff = [
                f.name
                for f in dataclasses.fields(TrainConfig)
                if getattr(other, f.name) != getattr(base, f.name)
            ]
            raise ValueError(
                f"members 0 and {i} differ in {', '.join(diff)}: members of one program may "
                f"differ only in {', '.join(PER_MEMBER)}, because the others change the "
                "program's shapes or structure. Train one program per value instead."
            )
    if configs[0].calibration_size:
        raise ValueError(
            "members are not calibrated yet: train them with `calibration_size` = 0, or "
            "calibrate one run at a time."
        )
    if configs[0].devices > 1:
        raise ValueError(
            f"members cannot be combined with `devices` = {configs[0].devices} (data "
            "parallelism): train the members on one device (`devices=1`), or one run at "
            "a time over several devices."
        )


def init_members(configs: Sequence[TrainConfig], num_train: int) -> TrainState:
    """The initial states of several runs, stacked on a leading axis of size
    `len(configs)`.

    Member `i` is [`init_state`][eqx_fmnist.state.init_state]`(configs[i], num_train)`
    with a leading axis: same weights, same batch key. Numbers that differ between
    members (`learning_rate`, `weight_decay`, `label_smoothing`) become arrays in the
    state (see [`TrainState`][eqx_fmnist.state.TrainState] and
    [`make_optimizer`][eqx_fmnist.config.make_optimizer]`(inject=True)`); when only the
    seeds differ, each member's program is exactly the single run's.

    **Arguments:**

    - `configs`: one config per member; see
        [`check_members`][eqx_fmnist.state.check_members].
    - `num_train`: training examples.

    **Raises:**

    `ValueError` from `check_members`.
    """
    check_members(configs)
    base = configs[0]
    seeds = jnp.array([c.seed for c in configs], jnp.uint32)
    batched = {
        name: jnp.array([getattr(c, name) for c in configs], jnp.float32)
        for name in BATCHED
        if len({getattr(c, name) for c in configs}) > 1
    }
    return _init_members(base, base.total_steps(num_train), seeds, batched)


@eqx.filter_jit
def _init_members(config: TrainConfig, total_steps: int, seeds, batched) -> TrainState:
    return eqx.filter_vmap(lambda s, b: _build(config, total_steps, s, b))(seeds, batched)


def num_members(state: TrainState) -> int | None:
    """The size of a stacked state's leading axis, or `None` for one run's state."""
    return None if state.step.ndim == 0 else int(state.step.shape[0])


def member(state: TrainState, i: int) -> TrainState:
    """Member `i` of a stacked state, as one run's state."""
    arrays, static = eqx.partition(state, eqx.is_array)
    return eqx.combine(jtu.tree_map(lambda x: x[i], arrays), static)


def state_bytes(config: TrainConfig, num_train: int) -> int:
    """Bytes of one run's state (parameters, optimiser state, counters), from its
    shapes alone: nothing is allocated."""
    shapes = eqx.filter_eval_shape(init_state, config, num_train)
    leaves = jtu.tree_leaves(shapes, is_leaf=lambda x: isinstance(x, jax.ShapeDtypeStruct))
    return sum(
        int(np.prod(x.shape)) * x.dtype.itemsize
        for x in leaves
        if isinstance(x, jax.ShapeDtypeStruct)
        and not jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)
    )
