"""The training state: everything that changes during training, as one PyTree.

[`init_state`][eqx_fmnist.state.init_state] builds one run's state;
[`init_members`][eqx_fmnist.state.init_members] builds many runs' states stacked on a
leading axis (`eqx.filter_vmap` over the same initialiser), which every compiled path
then runs under `eqx.filter_vmap` as one program. A stacked state is the *only*
difference between one run and many: `fit`, evaluation, calibration, checkpoints and
exports take either.
"""

import dataclasses
import typing
from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu
import numpy as np
import optax
from jaxtyping import Array, Float, Int, PRNGKeyArray, PyTree

from .augment import NONE, Augmentation, augmentation_of
from .config import BatchedHyperparameter, TrainConfig
from .hardware import warn_if_slower
from .model import CNN, MLP, Model, num_members
from .optim import make_optimizer, make_schedule
from .parallel import check_members_divide
from .precision import FLOAT32, DynamicLossScale, LossScale, NoOpLossScale, Policy


@dataclasses.dataclass(frozen=True)
class Settings:
    """What a state's compiled step is made of besides its arrays, as one static value
    (part of the compiled program, not an input of it).

    **Fields:** `optimizer` (an Optax transformation from
    [`make_optimizer`][eqx_fmnist.optim.make_optimizer]), `schedule` (the learning
    rate's multiplier by the optimiser's step count), `policy` (the precision policy),
    `skip_nonfinite` (skip a step whose loss or gradients are not finite),
    `augmentation` (what each step does to its batch), `ema_decay` (of the weight
    average; `0`: none) and `shared_batches` (members train on their first member's
    batches).
    """

    optimizer: optax.GradientTransformation
    schedule: optax.Schedule
    policy: Policy = FLOAT32
    skip_nonfinite: bool = False
    augmentation: Augmentation = NONE
    ema_decay: float = 0.0
    shared_batches: bool = False


class TrainState(eqx.Module):
    """Everything that changes during training, as one PyTree: one run, or many runs
    stacked on a leading axis (every array leaf then has one, of size `num_members`).

    `hyperparams` holds the run's numbers as arrays (the peak `learning_rate`,
    `weight_decay`, `label_smoothing`): inputs of the compiled program, not constants in
    it, so members of a sweep differ in them inside one program and a single run is the
    same program. Everything else the step is made of is one static value,
    [`settings`][eqx_fmnist.state.Settings]: part of the compiled program.
    """

    model: Model
    opt_state: PyTree
    step: Int[Array, ""]
    key: PRNGKeyArray
    loss_scale: LossScale
    hyperparams: dict[str, Float[Array, ""]]
    average: Model | None
    settings: Settings = eqx.field(static=True)

    def __init__(
        self,
        model: Model,
        optimizer: optax.GradientTransformation,
        *,
        key: PRNGKeyArray,
        hyperparams: dict[str, Float[Array, ""]],
        schedule: optax.Schedule | None = None,
        policy: Policy = FLOAT32,
        loss_scale: LossScale | None = None,
        skip_nonfinite: bool = False,
        augmentation: Augmentation = NONE,
        ema_decay: float = 0.0,
        shared_batches: bool = False,
    ):
        """**Arguments:**

        - `model`: the model; its inexact arrays are the trained parameters.
        - `optimizer`: an Optax transformation made by
            [`make_optimizer`][eqx_fmnist.optim.make_optimizer] (its `learning_rate`
            and `weight_decay` injected), initialised here on the parameters.
        - `key`: the run's PRNG key (it orders the batches).
        - `hyperparams`: `learning_rate` (the peak), `weight_decay` and
            `label_smoothing`, as float32 scalar arrays.
        - `schedule`: the learning rate's multiplier as a function of the optimiser's
            step count (see [`make_schedule`][eqx_fmnist.optim.make_schedule]).
            Defaults to a constant `1`.
        - `policy`: the precision policy. Defaults to float32.
        - `loss_scale`: defaults to a dynamic loss scale when the policy computes in
            float16, and to no scaling otherwise.
        - `skip_nonfinite`: skip (do not apply) a step whose loss or gradients are not
            finite. Defaults to `False`; float16 loss scaling skips overflows regardless.
        - `augmentation`: what each step does to its batch. Defaults to nothing.
        - `ema_decay`: with a decay in `(0, 1)`, `average` keeps an exponential moving
            average of the weights, updated after every step. Defaults to `0`: no
            average (`average` is `None`).
        - `shared_batches`: members train on the same batches. Defaults to `False`.
        """
        missing = set(HYPERPARAMS) - set(hyperparams)
        if missing:
            raise ValueError(f"`hyperparams` needs {', '.join(sorted(missing))}.")
        model = policy.cast_to_param(model)
        self.model = model
        # AdamW's moments are float32 whatever the parameters' dtype: a float16 second
        # moment (a squared gradient) underflows to zero, and the next update divides by it.
        params = eqx.filter(model, eqx.is_inexact_array)
        self.opt_state = optimizer.init(jtu.tree_map(lambda p: p.astype(jnp.float32), params))
        self.step = jnp.array(0, jnp.int32)
        self.key = key
        if loss_scale is None:
            loss_scale = DynamicLossScale() if policy.needs_loss_scale else NoOpLossScale()
        self.loss_scale = loss_scale
        self.hyperparams = {k: jnp.asarray(hyperparams[k], jnp.float32) for k in HYPERPARAMS}
        schedule = optax.constant_schedule(1.0) if schedule is None else schedule
        self.settings = Settings(
            optimizer,
            schedule,
            policy,
            bool(skip_nonfinite),
            augmentation,
            float(ema_decay),
            bool(shared_batches),
        )
        # A copy, not the same buffers: every compiled path donates the state, and one
        # buffer cannot be donated twice.
        self.average = jtu.tree_map(jnp.copy, model) if ema_decay > 0 else None

    @property
    def policy(self) -> Policy:
        """The precision policy (of [`settings`][eqx_fmnist.state.Settings])."""
        return self.settings.policy

    @property
    def num_members(self) -> int | None:
        """How many members the state holds, or `None` for one run's state (see
        [`num_members`][eqx_fmnist.model.num_members])."""
        return num_members(self.model)

    @property
    def eval_model(self) -> Model:
        """The weights to evaluate, calibrate, export and predict with: the average when
        the run keeps one (`ema_decay > 0`), else the trained weights."""
        return self.model if self.average is None else self.average

    @property
    def global_step(self) -> int:
        """The steps done (all members train in step), as a Python int: a host read
        (of this process's own members, where they are split over processes)."""
        step = self.step
        if isinstance(step, jax.Array) and not step.is_fully_addressable:
            step = step.addressable_data(0)
        return int(np.asarray(step).reshape(-1)[0])


HYPERPARAMS = typing.get_args(BatchedHyperparameter)
"""The numbers a state holds as arrays: `learning_rate`, `weight_decay`,
`label_smoothing` (from [`BatchedHyperparameter`][eqx_fmnist.config.BatchedHyperparameter])."""


ModelSource = Model | Callable[..., Model] | None
"""What `model=` takes: a model, a constructor called as `constructor(key=key)`, or
`None` for the config's."""


def init_state(config: TrainConfig, num_train: int, *, model: ModelSource = None) -> TrainState:
    """The initial [`TrainState`][eqx_fmnist.state.TrainState] of a run.

    **Arguments:**

    - `config`: the run's config; its seed gives the weights and the batch order.
    - `num_train`: training examples (the schedule's length depends on it).
    - `model`: a model of your own, or its constructor (see
        [`build_model`][eqx_fmnist.state.build_model]). Defaults to `None`: the one
        the config names.
    """
    numbers = np.array([getattr(config, k) for k in HYPERPARAMS], np.float32)
    seed = np.uint32(config.seed)
    warn_if_slower(config.policy)
    return _init_state(config, config.total_steps(num_train), seed, numbers, model)


def build_model(config: TrainConfig, key: PRNGKeyArray, model: ModelSource = None) -> Model:
    """A run's initial model.

    **Arguments:**

    - `config`: its `model` (`"mlp"` or `"cnn"`), `hidden_sizes` and `channels`.
    - `key`: the PRNG key for the weights.
    - `model`: one of your own instead: an `eqx.Module` (its weights are the initial
        ones; `key` is unused) or a constructor (a class or function) called as
        `model(key=key)`, the way Equinox layers take their key. It must map one image
        (`(784,)`, pixels in `[0, 1]`) to ten logits, and trains in float32. Defaults
        to `None`: the config's.
    """
    if isinstance(model, eqx.Module):
        return model
    if model is not None:
        return model(key=key)
    if config.model == "cnn":
        return CNN(config.channels, config.hidden_sizes, key=key)
    return MLP(hidden_sizes=config.hidden_sizes, key=key)


def check_own_model(config: TrainConfig, model: ModelSource) -> None:
    """Raise `ValueError` unless a model of your own (`model=`) can train under
    `config`: ten logits for an image of `(784,)`, float32, and the config's `model`
    left at its default."""
    if model is None:
        return
    if config.model != "mlp":
        raise ValueError(
            f"give a model of your own (model=...) or `model={config.model!r}` in the config, "
            "not both."
        )
    if config.policy != FLOAT32:
        raise ValueError(
            f"a model of your own trains in float32, not `precision={config.precision!r}`: "
            "the library's MLP and CNN apply a precision policy; use p=f32,c=f32,o=f32."
        )
    made = eqx.filter_eval_shape(build_model, config, jr.key(0), model)
    shape = jax.eval_shape(lambda m: m(jnp.zeros((784,), jnp.float32)), made).shape
    if shape != (10,):
        raise ValueError(
            f"the model maps one image of shape (784,) to logits of shape {shape}; it must "
            "give ten logits, (10,)."
        )
    if config.calibration_size and not hasattr(made, "hidden"):
        raise ValueError(
            "calibration fits the trust flag on a model's hidden activations: give the "
            "model a `hidden(x, *, policy)` method (a list of arrays), or train without "
            "--calibrate."
        )


@eqx.filter_jit
def _init_state(config: TrainConfig, total_steps: int, seed, numbers, model) -> TrainState:
    # One compiled program (kept by the persistent compilation cache): eagerly, each of
    # the initialisers' small operations is dispatched, and compiled, on its own.
    return _build(config, total_steps, seed, numbers, model)


def _build(config: TrainConfig, total_steps: int, seed, numbers, model=None) -> TrainState:
    """One member's state; `seed` and the `numbers` (one per `HYPERPARAMS`) may be
    traced."""
    model_key, data_key = jr.split(jr.PRNGKey(seed))
    return TrainState(
        build_model(config, model_key, model),
        make_optimizer(config),
        key=data_key,
        hyperparams=dict(zip(HYPERPARAMS, numbers, strict=True)),
        schedule=make_schedule(config, total_steps),
        policy=config.policy,
        skip_nonfinite=config.on_nonfinite == "skip",
        augmentation=augmentation_of(config),
        ema_decay=config.ema_decay,
        shared_batches=config.shared_batches,
    )


# --------------------------------------------------------------------------- members

BATCHED = HYPERPARAMS
"""The config fields members may differ in besides `seed`."""
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
    if configs[0].devices > 1:  # whole members on each device
        check_members_divide(len(configs), configs[0].devices)


def init_members(configs: Sequence[TrainConfig], num_train: int) -> TrainState:
    """The initial states of several runs, stacked on a leading axis of size
    `len(configs)`.

    Member `i` is [`init_state`][eqx_fmnist.state.init_state]`(configs[i], num_train)`
    with a leading axis: same weights, same batch key, same numbers. It is
    `eqx.filter_vmap` of the same initialiser over the seeds and the
    [`HYPERPARAMS`][eqx_fmnist.state.HYPERPARAMS] arrays, so each member's program is
    the single run's.

    **Arguments:**

    - `configs`: one config per member; see
        [`check_members`][eqx_fmnist.state.check_members].
    - `num_train`: training examples.

    **Raises:**

    `ValueError` from `check_members`.
    """
    check_members(configs)
    base = configs[0]
    seeds = np.array([c.seed for c in configs], np.uint32)  # on the host: nothing compiled
    numbers = np.array([[getattr(c, k) for k in HYPERPARAMS] for c in configs], np.float32)
    warn_if_slower(base.policy)
    return _init_members(base, base.total_steps(num_train), seeds, numbers)


@eqx.filter_jit
def _init_members(config: TrainConfig, total_steps: int, seeds, numbers) -> TrainState:
    return eqx.filter_vmap(lambda s, n: _build(config, total_steps, s, n))(seeds, numbers)


def select_members(tree: PyTree, index: int | Sequence[int]) -> PyTree:
    """Members of a stacked state (or model): with an int, that member as one run's
    state; with a list of ints, those members, still stacked (e.g. a sweep's
    [`top_members`][eqx_fmnist.ensemble.grid.SweepResult.top_members])."""
    take = index if isinstance(index, int) else np.asarray(index)
    arrays, static = eqx.partition(tree, eqx.is_array)
    if all(isinstance(x, jax.Array) for x in jtu.tree_leaves(arrays)):  # one program
        return eqx.combine(_members_at(arrays, jnp.asarray(take, jnp.int32)), static)
    return eqx.combine(jtu.tree_map(lambda x: x[take], arrays), static)


@jax.jit
def _members_at(arrays: PyTree, take: Int[Array, "*k"]) -> PyTree:
    return jtu.tree_map(lambda x: x[take], arrays)


def state_bytes(config: TrainConfig, num_train: int) -> int:
    """Bytes of one run's state (parameters, optimiser state, counters), from its
    shapes alone: nothing is allocated."""
    shapes = eqx.filter_eval_shape(init_state, config, num_train)
    leaves = jtu.tree_leaves(shapes, is_leaf=lambda x: isinstance(x, jax.ShapeDtypeStruct))
    return sum(
        int(np.prod(x.shape)) * x.dtype.itemsize
        for x in leaves
        if isinstance(x, jax.ShapeDtypeStruct) and not jnp.issubdtype(x.dtype, jax.dtypes.prng_key)
    )


def starting_state(
    configs: tuple[TrainConfig, ...],
    stacked: bool,
    state: TrainState | None,
    num_train: int,
    model: ModelSource = None,
) -> TrainState:
    """The state [`fit`][eqx_fmnist.train.fit] starts from: `state` (checked to hold as
    many members as there are `configs`, or one run when not `stacked`), or a new one:
    [`init_members`][eqx_fmnist.state.init_members] when `stacked`, else
    [`init_state`][eqx_fmnist.state.init_state] of the one config (and `model`, a model
    of your own: [`check_own_model`][eqx_fmnist.state.check_own_model])."""
    if model is not None and (stacked or state is not None):
        given = "members" if stacked else "a state"
        raise ValueError(
            f"give a model of your own (model=...) or {given}, not both: a model of your "
            "own trains as one run from its first step (a state already holds its model)."
        )
    check_own_model(configs[0], model)
    if state is None and stacked:
        return init_members(configs, num_train)
    if state is None:
        return init_state(configs[0], num_train, model=model)
    if state.num_members != (len(configs) if stacked else None):
        raise ValueError(
            f"`state` holds {state.num_members or 'one run, not'} members, but "
            f"{len(configs) if stacked else 'one config'} was given; pass the configs it "
            "was trained with (a checkpoint's `members`)."
        )
    return state
