"""The training state: everything that changes during training, as one PyTree.

[`init_state`][eqx_fmnist.state.init_state] builds one run's state;
[`init_members`][eqx_fmnist.state.init_members] builds many runs' states stacked on a
leading axis (`eqx.filter_vmap` over the same initialiser), which every compiled path
then runs under `eqx.filter_vmap` as one program. A stacked state is the *only*
difference between one run and many: `fit`, evaluation, calibration, checkpoints and
exports take either.

The module is kept whole: the state, one run's or many members', how it starts and how
members are checked and taken apart.
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

from .augment import NONE, Augmentation, augmentation_of
from .build import FASHION, Examples, ModelSource, build_model, check_model
from .config import BatchedHyperparameter, TrainConfig
from .hardware import warn_if_slower
from .model import Model, Stack, num_members
from .optim import make_optimizer, make_schedule
from .parallel import check_members_divide
from .precision import FLOAT32, DynamicLossScale, LossScale, NoOpLossScale, Policy


@dataclasses.dataclass(frozen=True)
class Settings:
    """What a state's compiled step is made of besides its arrays, as one static value
    (part of the compiled program, not an input of it).

    **Fields:** `optimizer` (any Optax transformation; the recipe's from
    [`make_optimizer`][eqx_fmnist.optim.make_optimizer]), `schedule` (for the recipe's,
    the learning rate's multiplier by the optimiser's step count, written into its
    injected hyperparameters each step; `None`: the optimiser's schedule is its own),
    `policy` (the precision policy),
    `skip_nonfinite` (skip a step whose loss or gradients are not finite),
    `augmentation` (what each step does to its batch), `ema_decay` (of the weight
    average; `0`: none) and `shared_batches` (members train on their first member's
    batches).
    """

    optimizer: optax.GradientTransformation
    schedule: optax.Schedule | None
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
        - `optimizer`: any Optax transformation, initialised here on the parameters
            (in float32).
        - `key`: the run's PRNG key (it orders the batches).
        - `hyperparams`: `learning_rate` (the peak), `weight_decay` and
            `label_smoothing`, as float32 scalar arrays.
        - `schedule`: for an optimiser made by
            [`make_optimizer`][eqx_fmnist.optim.make_optimizer] (its `learning_rate`
            and `weight_decay` injected), the learning rate's multiplier as a function
            of the optimiser's step count (see
            [`make_schedule`][eqx_fmnist.optim.make_schedule]): each step writes
            `learning_rate * schedule(count)` and `weight_decay` from `hyperparams`
            into the optimiser's state. Defaults to `None`: the optimiser runs as it is,
            its schedule its own.
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
        copy = lambda x: jnp.copy(x) if eqx.is_array(x) else x  # noqa: E731
        self.average = jtu.tree_map(copy, model) if ema_decay > 0 else None

    @property
    def policy(self) -> Policy:
        """The precision policy (of [`settings`][eqx_fmnist.state.Settings])."""
        return self.settings.policy

    @property
    def num_members(self) -> int | None:
        """How many members the state holds (the length of its step counter's axis), or
        `None` for one run's state."""
        shape = tuple(self.step.shape)
        return int(shape[0]) if shape else None

    @property
    def eval_model(self) -> Model:
        """The weights to evaluate, calibrate, export and predict with: the average when
        the run keeps one (`ema_decay > 0`), else the trained weights. Members of a
        model of your own come as a [`Stack`][eqx_fmnist.model.Stack]."""
        model = self.model if self.average is None else self.average
        count = self.num_members
        if count is not None and num_members(model) is None:
            return Stack(model, count)
        return model

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


def init_state(
    config: TrainConfig,
    num_train: int,
    *,
    model: ModelSource = None,
    optimizer: optax.GradientTransformation | None = None,
    examples: Examples = FASHION,
) -> TrainState:
    """The initial [`TrainState`][eqx_fmnist.state.TrainState] of a run.

    **Arguments:**

    - `config`: the run's config; its seed gives the weights and the batch order.
    - `num_train`: training examples (the schedule's length depends on it).
    - `model`: a model of your own, or its constructor (see
        [`build_model`][eqx_fmnist.build.build_model]). Defaults to `None`: the one
        the config names.
    - `optimizer`: any Optax transformation, its schedule its own. Defaults to `None`:
        the recipe's AdamW and schedule from the config
        ([`make_optimizer`][eqx_fmnist.optim.make_optimizer]).
    - `examples`: what the library's model is built for (the data's
        [`Examples`][eqx_fmnist.build.Examples]). Defaults to Fashion-MNIST's.
    """
    numbers = np.array([getattr(config, k) for k in HYPERPARAMS], np.float32)
    seed = np.uint32(config.seed)
    warn_if_slower(config.policy)
    total = config.total_steps(num_train)
    return _init_state(config, total, seed, numbers, model, optimizer, examples)


@eqx.filter_jit
def _init_state(config, total_steps: int, seed, numbers, model, optimizer, examples) -> TrainState:
    # One compiled program (kept by the persistent compilation cache): eagerly, each of
    # the initialisers' small operations is dispatched, and compiled, on its own.
    return _build(config, total_steps, seed, numbers, model, optimizer, examples)


def _build(
    config: TrainConfig,
    total_steps: int,
    seed,
    numbers,
    model=None,
    optimizer=None,
    examples: Examples = FASHION,
) -> TrainState:
    """One member's state; `seed` and the `numbers` (one per `HYPERPARAMS`) may be
    traced."""
    model_key, data_key = jr.split(jr.PRNGKey(seed))
    schedule = None
    if optimizer is None:  # the recipe's: AdamW, its rate and decay injected each step
        optimizer = make_optimizer(config)
        schedule = make_schedule(config, total_steps)
    return TrainState(
        build_model(config, model_key, model, examples),
        optimizer,
        key=data_key,
        hyperparams=dict(zip(HYPERPARAMS, numbers, strict=True)),
        schedule=schedule,
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


def check_members(configs: Sequence[TrainConfig], fixed: Sequence[str] = ()) -> None:
    """Raise `ValueError` unless `configs` can train as members of one program: at least
    one, all agreeing on every field but `seed` and the
    [`BATCHED`][eqx_fmnist.state.BATCHED] numbers (and on those named in `fixed`:
    numbers of the recipe that an optimiser or a loss of your own replaces), on one
    device."""
    if not configs:
        raise ValueError("members: give at least one config (or seed).")
    free = [k for k in PER_MEMBER if k not in fixed]
    base = dataclasses.replace(configs[0], **{k: getattr(TrainConfig(), k) for k in free})
    for i, c in enumerate(configs):
        other = dataclasses.replace(c, **{k: getattr(TrainConfig(), k) for k in free})
        if other != base:
            diff = [
                f.name
                for f in dataclasses.fields(TrainConfig)
                if getattr(other, f.name) != getattr(base, f.name)
            ]
            why = (
                "the others change the program's shapes or structure"
                if not set(diff) & set(fixed)
                else "an optimiser or a loss of your own replaces the recipe's numbers"
            )
            raise ValueError(
                f"members 0 and {i} differ in {', '.join(diff)}: members of one program may "
                f"differ only in {', '.join(free)}, because {why}. Train one program per "
                "value instead."
            )
    if configs[0].devices > 1:  # whole members on each device
        check_members_divide(len(configs), configs[0].devices)


def init_members(
    configs: Sequence[TrainConfig],
    num_train: int,
    *,
    model: ModelSource = None,
    optimizer: optax.GradientTransformation | None = None,
    examples: Examples = FASHION,
) -> TrainState:
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
    - `model`, `optimizer`, `examples`: as for `init_state`; a model of your own is
        given as its constructor (each member draws its own weights from its seed).

    **Raises:**

    `ValueError` from `check_members`, or for a model of your own given as a module.
    """
    if isinstance(model, eqx.Module):
        raise ValueError(
            "members of a model of your own draw their own weights: give its constructor "
            "(model=MyModel, or a function of key=), not a built module."
        )
    check_members(configs, _fixed(optimizer is not None))
    base = configs[0]
    seeds = np.array([c.seed for c in configs], np.uint32)  # on the host: nothing compiled
    numbers = np.array([[getattr(c, k) for k in HYPERPARAMS] for c in configs], np.float32)
    warn_if_slower(base.policy)
    total = base.total_steps(num_train)
    return _init_members(base, total, seeds, numbers, model, optimizer, examples)


def _fixed(own_optimizer: bool, own_loss: bool = False) -> tuple[str, ...]:
    """The recipe's numbers members must share when its optimiser or loss is replaced."""
    return (("learning_rate", "weight_decay") if own_optimizer else ()) + (
        ("label_smoothing",) if own_loss else ()
    )


@eqx.filter_jit
def _init_members(config, total_steps: int, seeds, numbers, model, optimizer, examples):
    def member(s, n):
        return _build(config, total_steps, s, n, model, optimizer, examples)

    return eqx.filter_vmap(member)(seeds, numbers)


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


def with_optimizer(state: TrainState, optimizer: optax.GradientTransformation) -> TrainState:
    """`state` to be trained on by `optimizer` (an Optax transformation of your own, given
    again to continue a run: a loaded state's functions are not saved). `ValueError`
    unless the state's optimiser state has the structure and shapes `optimizer.init`
    gives: another optimiser's state is never fed to it."""
    params = eqx.filter(state.model, eqx.is_inexact_array)
    one = params if state.num_members is None else select_members(params, 0)
    want = eqx.filter_eval_shape(optimizer.init, jtu.tree_map(lambda p: p.astype(jnp.float32), one))
    have = state.opt_state if state.num_members is None else select_members(state.opt_state, 0)
    shapes = lambda t: jtu.tree_map(lambda x: (tuple(x.shape), str(x.dtype)), t)  # noqa: E731
    if jtu.tree_structure(want) != jtu.tree_structure(have) or shapes(want) != shapes(have):
        raise ValueError(
            "the state's optimiser state is not what `optimizer` makes: give the optimiser "
            "the run was trained with (the same Optax transformation and settings)."
        )
    settings = dataclasses.replace(state.settings, optimizer=optimizer, schedule=None)
    return eqx.tree_at(lambda s: s.settings, state, settings)


def starting_state(
    configs: tuple[TrainConfig, ...],
    stacked: bool,
    state: TrainState | None,
    num_train: int,
    *,
    model: ModelSource = None,
    optimizer: optax.GradientTransformation | None = None,
    own_loss: bool = False,
    examples: Examples = FASHION,
) -> TrainState:
    """The state [`fit`][eqx_fmnist.train.fit] starts from: `state` (checked to hold as
    many members as there are `configs`, or one run when not `stacked`; given
    `optimizer`, checked to be its state: [`with_optimizer`][eqx_fmnist.state.with_optimizer]),
    or a new one: [`init_members`][eqx_fmnist.state.init_members] when `stacked`, else
    [`init_state`][eqx_fmnist.state.init_state] of the one config, with `model`,
    `optimizer` and `examples` (checked: [`check_model`][eqx_fmnist.build.check_model])."""
    if model is not None and state is not None:
        raise ValueError(
            "give a model of your own (model=...) or a state, not both: a state already "
            "holds its model."
        )
    check_model(configs[0], model, examples)
    if state is None and stacked:
        check_members(configs, _fixed(optimizer is not None, own_loss))
        return init_members(configs, num_train, model=model, optimizer=optimizer, examples=examples)
    if state is None:
        return init_state(
            configs[0], num_train, model=model, optimizer=optimizer, examples=examples
        )
    if state.num_members != (len(configs) if stacked else None):
        raise ValueError(
            f"`state` holds {state.num_members or 'one run, not'} members, but "
            f"{len(configs) if stacked else 'one config'} was given; pass the configs it "
            "was trained with (a checkpoint's `members`)."
        )
    return state if optimizer is None else with_optimizer(state, optimizer)
