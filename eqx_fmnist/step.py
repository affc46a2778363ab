"""The compiled training steps: one pure `_step`, and the ways to run it.

- [`train_step`][eqx_fmnist.step.train_step]: one AdamW step on one batch,
  `eqx.filter_jit` + `eqx.filter_value_and_grad`.
- [`train_steps`][eqx_fmnist.step.train_steps] /
  [`train_epoch`][eqx_fmnist.step.train_epoch]: the fast path. Many steps in one
  compiled call, as a `lax.scan` in which each step computes its own batch's indices
  ([`batch_indices`][eqx_fmnist.dataset.batch_indices]), gathers those rows on the
  device and moves, mirrors, erases or mixes them as the state's augmentation says
  ([`augment`][eqx_fmnist.augment.augment]), with the state's buffers donated. The host
  reads metrics once per call. A [`Teacher`][eqx_fmnist.distill.Teacher] adds its soft
  targets on the same batch; a state that keeps a weight average updates it every step.
- [`compile_steps`][eqx_fmnist.step.compile_steps]: the same chunk compiled ahead of
  time, so compiling can be timed apart from running.
- Given a stacked state (from [`init_members`][eqx_fmnist.state.init_members]), each
  runs under `eqx.filter_vmap`: many models, one compiled program, the training set
  shared. Over a `"members"` mesh the stack is split over the devices and each runs
  the vmapped chunk on its own members (`jax.shard_map`, no collective); members
  with `shared_batches` train on their first member's batches, prepared once a step.

The batch order and the augmentation are pure functions of the run's key and the global
step, so results do not depend on how steps are grouped into calls, a resumed run
continues exactly where it stopped, and a compiled call has no set-up that grows with
the data set.

The module is kept whole: the step and every way it is run, one program each, read in
one place.
"""

import functools
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu
import optax
from jax.sharding import PartitionSpec as P
from jaxtyping import Array, Int, Shaped

from .augment import augment
from .batches import augment_key, model_key, step_batch, step_inputs
from .checks import door
from .chunk import Chunk
from .dataset import ArrayDataset, steps_per_epoch
from .distill import Teacher, TeacherTable
from .losses import Loss, recipe_loss
from .optim import apply_optimizer, averaged, optimizer_count
from .parallel import MEMBERS, batch_sharding, replicated
from .precision import NoOpLossScale, all_finite
from .state import TrainState


def _objective(state: TrainState, x, y, loss: Loss | None, teacher, read):
    """The step's loss function of the model, and its inputs: `loss` (a user's) as it
    is; else the recipe's, bound to the state's policy and label smoothing, mixup's
    share of each image and distillation's soft targets (a live teacher's on the batch,
    or a table's from what the batch `read` of it: `teacher.soft`)."""
    x, share = step_inputs(state, x)  # a teacher answers on the same (mixed) images
    if loss is not None:
        return loss, x
    soft = None
    if teacher is not None:
        with jax.named_scope("teacher"):
            soft = teacher.soft(x, read)
    bound = functools.partial(
        recipe_loss,
        policy=state.policy,
        label_smoothing=state.hyperparams["label_smoothing"],
        soft=soft,
        share=share,
    )
    return bound, x


def _step(
    state: TrainState,
    x,
    y,
    teacher: Teacher | TeacherTable | None = None,
    read=None,
    loss: Loss | None = None,
) -> tuple[TrainState, dict[str, Array]]:
    """One optimiser step: the pure function every compiled path is made of. `x` are
    the batch's pixels as gathered (and augmented); `loss` a user's
    [`Loss`][eqx_fmnist.losses.Loss] (else the recipe's); a teacher adds its soft
    targets, a live one's on the batch, a table's from the rows the batch `read` of
    it."""
    objective, x = _objective(state, x, y, loss, teacher, read)
    key = model_key(state)

    def scaled(model):
        out = objective(model, x, y, key=key)
        value, aux = out if isinstance(out, tuple) else (out, {})
        return state.loss_scale.scale(value), (value, aux)

    grad_fn = eqx.filter_value_and_grad(scaled, has_aux=True)
    (_, (value, aux)), grads = grad_fn(state.model)
    with jax.named_scope("optimizer"):
        # The optimiser works in float32 (its moments are, see TrainState): a float16
        # gradient squared underflows, and unscaling by 1/32768 is a subnormal multiply.
        grads = jtu.tree_map(lambda g: g.astype(jnp.float32), grads)
        grads = state.loss_scale.unscale(grads)
        model, opt_state, rate = apply_optimizer(
            state.settings, state.opt_state, state.hyperparams, grads, state.model
        )
    if isinstance(state.loss_scale, NoOpLossScale) and not state.settings.skip_nonfinite:
        finite = jnp.array(True)
    else:
        # A float16 overflow (or, with skip_nonfinite, any NaN/inf): keep the old
        # parameters and optimiser state; the loss scale, if any, shrinks.
        finite = all_finite(grads)
        if state.settings.skip_nonfinite:
            finite = finite & jnp.isfinite(value)
        new, static = eqx.partition((model, opt_state), eqx.is_array)
        old = eqx.filter((state.model, state.opt_state), eqx.is_array)
        kept = jtu.tree_map(lambda n, o: jnp.where(finite, n, o), new, old)
        model, opt_state = eqx.combine(kept, static)
    with jax.named_scope("average"):
        count = optimizer_count(state.opt_state, state.step)
        average = averaged(state.average, model, count, state.settings.ema_decay)
    new_state = eqx.tree_at(
        lambda s: (s.model, s.opt_state, s.step, s.loss_scale, s.average),
        state,
        (model, opt_state, state.step + 1, state.loss_scale.adjust(finite), average),
        is_leaf=lambda x: x is None,
    )
    metrics = {
        "loss": jnp.asarray(value, jnp.float32),
        "accuracy": jnp.asarray(jnp.nan, jnp.float32),
        **{k: jnp.asarray(v, jnp.float32) for k, v in aux.items()},
        "grad_norm": optax.tree.norm(grads),
        "skipped": ~finite,
        "learning_rate": rate,
    }
    return new_state, metrics


def _step_on_batch(batch, state, loss=None):
    x, y = batch
    _train_step_takes(state, x, y)  # as it is traced: free at every later call
    return _step(state, _augmented(state, x), y, loss=loss)


def _takes(state: TrainState, x: Shaped[Array, "batch features"], y: Int[Array, " batch"]):
    """What `train_step` takes (`train_step`'s own arguments, checked by `door`)."""


_train_step_takes = door(_takes, "train_step")


# Traces are counted (not limited) so that tests can pin "compiled once".
_step_traced = eqx.debug.assert_max_traces(_step_on_batch, max_traces=None)
_train_step_jit = eqx.filter_jit(_step_traced, donate="all-except-first")


def train_step(
    state: TrainState,
    x: Shaped[Array, "batch features"],
    y: Int[Array, " batch"],
    *,
    loss: Loss | None = None,
) -> tuple[TrainState, dict[str, Array]]:
    """One compiled optimiser step on one batch.

    **Arguments:**

    - `state`: the current state. Its buffers are donated: do not use it afterwards.
    - `x`: images of shape `(batch, features)` (`(batch, 784)` for Fashion-MNIST),
        `uint8` pixels or floats.
    - `y`: labels of shape `(batch,)`.
    - `loss`: a [`Loss`][eqx_fmnist.losses.Loss] of your own. Defaults to `None`: the
        recipe's ([`recipe_loss`][eqx_fmnist.losses.recipe_loss]).

    The state's augmentation (its config's `shift`, `mirror`, `erase`) is applied to
    `x` first, with the same key a fused step would use, so a loop of `train_step` over
    the batches [`batch_indices`][eqx_fmnist.dataset.batch_indices] names makes the
    same run as [`train_steps`][eqx_fmnist.step.train_steps]. A state whose config
    does not augment trains on `x` as given.

    **Returns:**

    `(new_state, metrics)`, where `metrics` holds scalar arrays `loss`, `accuracy` (NaN
    where a loss of your own does not return one in its `aux`), the `aux`'s other
    scalars, `grad_norm`, `skipped` (a float16 step skipped for non-finite gradients)
    and `learning_rate` (the rate this step used; NaN where an optimiser of your own
    does not say).

    !!! warning

        Calling this once per batch from Python costs a dispatch per step. For
        training, use [`train_steps`][eqx_fmnist.step.train_steps], which runs many
        steps in one compiled call.
    """
    return _train_step_jit((x, y), state, loss)


# --------------------------------------------------------------------------- fused steps


def _augmented(st: TrainState, x):
    """The batch `x` moved, mirrored or erased as the state's augmentation says, by the
    key of the state's step."""
    return augment(jr.fold_in(augment_key(st.key), st.step), x, st.settings.augmentation)


def _scan(f, state: TrainState, xs):
    """`jax.lax.scan(f, state, xs)` for a state whose model holds more than arrays (an
    activation function, `Dropout`'s `inference` flag): only its arrays are carried,
    the rest is combined back inside the body (`eqx.partition` / `eqx.combine`)."""
    arrays, static = eqx.partition(state, eqx.is_array)

    def body(carry, x):
        new, out = f(eqx.combine(carry, static), x)
        return eqx.filter(new, eqx.is_array), out

    arrays, out = jax.lax.scan(body, arrays, xs)
    return eqx.combine(arrays, static), out


def _steps(chunk: Chunk, state: TrainState, shared=None):
    """The chunk: `num_steps` steps of `state`, each on its own batch. `shared`, for
    members that share their batches, is `(key, step)` of their first member, outside
    the members' `vmap`: each batch is then prepared once for all of them."""
    teacher = chunk.teacher
    mesh = chunk.mesh
    block = chunk.block

    def one(st, batch):
        x, y, read = batch  # read: a teacher's table's rows of the batch, or None
        if mesh is not None:
            # Split the batch over the devices; the state is replicated, so XLA's
            # SPMD partitioner all-reduces the gradients.
            x = jax.lax.with_sharding_constraint(x, batch_sharding(mesh, 2))
            y = jax.lax.with_sharding_constraint(y, batch_sharding(mesh, 1))
        return _step(st, x, y, teacher, read, chunk.loss)

    def batches(st, first, count):  # steps first .. first + count - 1, in one pass
        key = None
        if shared is not None:
            key = shared[0]
            first = shared[1] + first
        steps = first + jnp.arange(count, dtype=jnp.int32)

        def batch(s):
            return step_batch(st, s, chunk.dataset, chunk.batch_size, teacher, chunk.subsets, key)

        return jax.vmap(batch)(steps)

    def steps_of_block(st, i):
        # The block's batches in one vectorised pass (the same bits as one by one; on a
        # CPU a block is one step), then its steps.
        first = st.step if shared is None else i * block
        return _scan(one, st, batches(st, first, block))

    if not chunk.scanned:  # the steps written out, one after the other (see Chunk)
        outs = []
        for i in range(chunk.num_steps):
            first = state.step if shared is None else jnp.int32(i)
            batch = jtu.tree_map(lambda b: b[0], batches(state, first, 1))
            state, out = one(state, batch)
            outs.append(out)
        return state, jtu.tree_map(lambda *m: jnp.stack(m), *outs)
    blocks = jnp.arange(chunk.num_steps // block, dtype=jnp.int32)
    state, metrics = _scan(steps_of_block, state, blocks)
    return state, jtu.tree_map(lambda m: m.reshape(chunk.num_steps, *m.shape[2:]), metrics)


_steps_traced = eqx.debug.assert_max_traces(_steps, max_traces=None)


def _members_steps(chunk: Chunk, state: TrainState, shared=None):
    """The chunk of a stack of members: the same chunk, vmapped over the state's leading
    axis and each member's row table (in the chunk, which is never donated); the data
    are shared (`shared`: their first member's `(key, step)`, for members that share
    their batches)."""
    in_axes = (chunk.member_axes(), eqx.if_array(0), None)
    return eqx.filter_vmap(_steps_traced, in_axes=in_axes)(chunk, state, shared)


def _members_over_mesh(chunk: Chunk, state: TrainState, shared=None):
    """Members split over a mesh's `"members"` axis: each device runs the vmapped chunk
    on its own members and their row tables, the data, a teacher and the first member's
    `shared` key and step replicated. The body is each device's own program
    (`jax.shard_map`): nothing crosses devices."""
    local = chunk.on_each_device()
    arrays, rest = eqx.partition((local, state, shared), eqx.is_array)
    own = P(MEMBERS)
    specs = (
        local.member_specs(arrays[0]),
        jtu.tree_map(lambda _: own, arrays[1]),
        jtu.tree_map(lambda _: P(), arrays[2]),
    )

    def each_device(arrays):
        new, metrics = _members_steps(*eqx.combine(arrays, rest))
        return eqx.filter((new, metrics), eqx.is_array)

    mesh = chunk.mesh
    done = jax.shard_map(each_device, mesh=mesh, in_specs=(specs,), out_specs=own)(arrays)
    new_arrays, metrics = done
    return eqx.combine(new_arrays, eqx.filter(state, eqx.is_array, inverse=True)), metrics


_CHUNKS = {
    (kind, donate): eqx.filter_jit(
        {"one": _steps_traced, "members": _members_steps, "sharded": _members_over_mesh}[kind],
        donate="all-except-first" if donate else "none",
    )
    for kind in ("one", "members", "sharded")
    for donate in (False, True)
}


def _chunk_fn(chunk: Chunk, donate: bool = True):
    """The compiled chunk for one run, for a stack of members, or for members split
    over a mesh (the one place the step asks), with the state's buffers donated or
    kept."""
    if chunk.members is None:
        return _CHUNKS[("one", donate)]
    return _CHUNKS[("members" if chunk.mesh is None else "sharded", donate)]


@door
def train_steps(
    state: TrainState,
    dataset: ArrayDataset,
    *,
    batch_size: int,
    num_steps: int,
    mesh: jax.sharding.Mesh | None = None,
    teacher: Teacher | TeacherTable | None = None,
    subsets: Int[Array, "members m"] | None = None,
    loss: Loss | None = None,
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
    - `teacher`: a [`Teacher`][eqx_fmnist.distill.Teacher] whose soft targets on each
        step's batch the loss adds (distillation), or a
        [`TeacherTable`][eqx_fmnist.distill.TeacherTable] of its answers computed once,
        read by (image, view). Defaults to `None`.
    - `subsets`: for a stacked state, the rows of `dataset` each member trains on
        ([`Subsets.train`][eqx_fmnist.subsets.Subsets]): member `i`'s batches are its
        own keyed order over `subsets[i]`. Defaults to `None`: all of them.
    - `loss`: a [`Loss`][eqx_fmnist.losses.Loss] of your own, `loss(model, x, y, *,
        key)`. Defaults to `None`: the recipe's.

    On a CPU, a model whose forward pass calls XLA's convolution runs its steps a few
    per compiled call instead (see [`Chunk`][eqx_fmnist.chunk.Chunk]).

    A stacked `state` (from [`init_members`][eqx_fmnist.state.init_members]) runs every
    member's own steps on its own batches, all in one program (`eqx.filter_vmap` of the
    same chunk); the data are shared.

    **Returns:**

    `(new_state, metrics)`; each metric is an array of shape `(num_steps,)`, or
    `(members, num_steps)` for a stacked state.
    """
    chunk = Chunk.of(
        state,
        dataset,
        batch_size=batch_size,
        num_steps=num_steps,
        mesh=mesh,
        teacher=teacher,
        subsets=subsets,
        loss=loss,
    )
    return _run(_chunk_fn(chunk), chunk, state)


def _run(program, chunk: Chunk, state: TrainState):
    """The chunk's `calls` calls of `program` (one, unless its steps are written out a
    few at a time), their metrics joined along the steps."""
    outs = []
    for _ in range(chunk.calls):
        state, metrics = program(chunk, state, _shared(state, chunk.mesh))
        outs.append(metrics)
    if len(outs) == 1:
        return state, outs[0]
    return state, jtu.tree_map(lambda *m: jnp.concatenate(m, axis=-1), *outs)


def _shared(state: TrainState, mesh=None):
    """Members that share their batches: their first member's `(key, step)`, where
    every device has it; else `None`."""
    if state.num_members is None or not state.settings.shared_batches:
        return None
    return _first_member(mesh)(state.key, state.step)


@functools.cache
def _first_member(mesh):
    """The compiled read of the first member's `(key, step)`, one per mesh (each chunk
    call uses it: made once, not traced again)."""
    first = replicated(mesh) if mesh is not None else None
    return jax.jit(lambda key, step: (key[0], step[0]), out_shardings=first)


def compile_steps(
    state: TrainState,
    dataset: ArrayDataset,
    *,
    batch_size: int,
    num_steps: int,
    mesh: jax.sharding.Mesh | None = None,
    teacher: Teacher | TeacherTable | None = None,
    subsets: Int[Array, "members m"] | None = None,
    loss: Loss | None = None,
    donate: bool = True,
) -> "CompiledSteps":
    """Compile [`train_steps`][eqx_fmnist.step.train_steps] ahead of time, for states
    shaped like `state`.

    The arguments are those of `train_steps`; `state` is only looked at (its shapes,
    dtypes and shardings), not donated. Compiling apart from running lets a caller time
    the two separately, and read XLA's own cost estimate of the chunk. With `donate`
    left at `True` each call donates the state it is given; `False` keeps it valid, so
    that a caller can use one interval's state while the next chunk runs (as
    [`fit`][eqx_fmnist.train.fit] does).

    **Returns:**

    A [`CompiledSteps`][eqx_fmnist.step.CompiledSteps] `run`: `run(state)` returns
    `(new_state, metrics)` without tracing or compiling again, and
    `run.compiled` is the XLA executable, for example `run.compiled.cost_analysis()`
    or `run.compiled.as_text()`.
    """
    settings = dict(batch_size=batch_size, num_steps=num_steps, mesh=mesh, teacher=teacher)
    return lower_steps(state, dataset, **settings, subsets=subsets, loss=loss, donate=donate)()


def lower_steps(
    state: TrainState, dataset: ArrayDataset, **settings
) -> "Callable[[], CompiledSteps]":
    """[`compile_steps`][eqx_fmnist.step.compile_steps] in two parts: the chunk is traced
    and lowered now (the keyword arguments are `compile_steps`'), and its compile is
    returned, a call without arguments that gives the `CompiledSteps` (`fit` traces its
    programs in turn, then compiles them at once in threads: XLA compiles, and a chip
    loads a program, without holding Python's lock)."""
    donate = settings.pop("donate", True)
    chunk = Chunk.of(state, dataset, **settings)
    program = _chunk_fn(chunk, donate)
    lowered = program.lower(chunk, state, _shared(state, chunk.mesh))  # pyright: ignore[reportFunctionMemberAccess]
    return lambda: CompiledSteps(lowered.compile(), chunk)


class CompiledSteps:
    """A chunk of steps compiled ahead of time by
    [`compile_steps`][eqx_fmnist.step.compile_steps]: call it with a state."""

    def __init__(self, program, chunk: Chunk):
        self._program = program
        self.chunk = chunk
        """The [`Chunk`][eqx_fmnist.chunk.Chunk] it runs on."""
        self.compiled: jax.stages.Compiled = program.compiled
        """The XLA executable (`cost_analysis()`, `as_text()`)."""

    def __call__(self, state: TrainState) -> tuple[TrainState, dict[str, Array]]:
        """Run the chunk on `state` (donated, unless compiled with `donate=False`);
        returns the new state and the metrics. The call returns once the work is queued
        on the device: the arrays it returns are ready when they are read."""
        return _run(self._program, self.chunk, state)


@door
def train_epoch(
    state: TrainState,
    dataset: ArrayDataset,
    *,
    batch_size: int,
    mesh: jax.sharding.Mesh | None = None,
    teacher: Teacher | TeacherTable | None = None,
) -> tuple[TrainState, dict[str, Array]]:
    """One epoch (`len(dataset) // batch_size` steps) in one compiled call; see
    [`train_steps`][eqx_fmnist.step.train_steps]."""
    spe = steps_per_epoch(len(dataset), batch_size)
    return train_steps(
        state, dataset, batch_size=batch_size, num_steps=spe, mesh=mesh, teacher=teacher
    )
