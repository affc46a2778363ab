"""The chunk: what one compiled call of training steps runs on, as a named PyTree.

A [`Chunk`][eqx_fmnist.chunk.Chunk] holds the training set, a teacher and the members'
row tables as array fields, and the batch size, the number of steps, the block of steps
whose batches are prepared at once, the members, the mesh and a loss of your own as
static fields, each by name, as Equinox's `_JitWrapper` names its settings (a static
field is part of the compiled program's key: a second loss never runs a program traced
for the first). Its checks run when it is made (`__check_init__`), and the members'
`vmap` axes and a `"members"` mesh's `shard_map` specs are built from it by name
(`eqx.tree_at`), so a new field is one line here and nowhere is a position counted.

On a CPU, a model whose forward pass calls XLA's convolution (`eqx.nn.Conv2d`) has its
steps written out a few at a time instead of scanned: XLA:CPU runs a convolution's
gradient many times slower inside a loop's body (jax-ml/jax#12868), so such a chunk is
several calls of [`UNROLLED_STEPS`][eqx_fmnist.chunk.UNROLLED_STEPS] steps each.
"""

import dataclasses
import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu
from jax.sharding import PartitionSpec as P
from jaxtyping import Array, Int

from .batches import block_steps, data_platform
from .dataset import ArrayDataset, steps_per_epoch
from .distill import Teacher, TeacherTable
from .losses import Loss
from .model import CNN, MLP, takes
from .parallel import MEMBERS, check_divisible, check_members_divide
from .state import TrainState

UNROLLED_STEPS = 4
"""At most this many steps are written out in one compiled call where a chunk is not
scanned (a model that convolves, on a CPU)."""


class Chunk(eqx.Module):
    """What a compiled chunk of steps runs on, by name: the data, a teacher and the
    members' row tables (arrays), the batch size, the number of steps, the block of
    steps whose batches are prepared at once and the mesh (static). Made by
    [`Chunk.of`][eqx_fmnist.chunk.Chunk.of], the one constructor
    [`train_steps`][eqx_fmnist.step.train_steps],
    [`compile_steps`][eqx_fmnist.step.compile_steps] and the compiled form share; its
    checks are in `__check_init__`."""

    dataset: ArrayDataset
    teacher: Teacher | TeacherTable | None
    subsets: Int[Array, "members m"] | None
    batch_size: int = eqx.field(static=True)
    num_steps: int = eqx.field(static=True)
    block: int = eqx.field(static=True)
    members: int | None = eqx.field(static=True)
    mesh: jax.sharding.Mesh | None = eqx.field(static=True)
    loss: Loss | None = eqx.field(static=True, default=None)
    scanned: bool = eqx.field(static=True, default=True)
    calls: int = eqx.field(static=True, default=1)

    @classmethod
    def of(
        cls,
        state: TrainState,
        dataset: ArrayDataset,
        *,
        batch_size: int,
        num_steps: int,
        mesh: jax.sharding.Mesh | None = None,
        teacher: Teacher | TeacherTable | None = None,
        subsets: Int[Array, "members m"] | None = None,
        loss: Loss | None = None,
    ) -> "Chunk":
        """The chunk of `num_steps` steps of `state` (the arguments of
        [`train_steps`][eqx_fmnist.step.train_steps]), with its block of prepared steps
        (of the members on each device, where a mesh splits them), scanned or, for a
        model that convolves on a CPU, written out in `calls` calls of a few steps."""
        each = state.num_members or 1
        if state.num_members is not None and mesh is not None:
            each = max(each // mesh.size, 1)
        block = 1
        calls = 1
        platform = data_platform(dataset)
        stacked = state.num_members is not None
        scanned = platform != "cpu" or not convolves(state.model, dataset.features, stacked)
        if type(num_steps) is int and num_steps > 0:  # else refused by the check
            block = block_steps(num_steps, batch_size, each, platform, dataset.features)
            if not scanned:
                part = max(d for d in range(1, UNROLLED_STEPS + 1) if num_steps % d == 0)
                calls = num_steps // part
                num_steps = part
        return cls(
            dataset=dataset,
            teacher=teacher,
            subsets=subsets,
            batch_size=batch_size,
            num_steps=num_steps,
            block=block,
            members=state.num_members,
            mesh=mesh,
            loss=loss,
            scanned=scanned,
            calls=calls,
        )

    def __check_init__(self):
        steps = self.num_steps
        if isinstance(steps, bool) or not isinstance(steps, int) or steps <= 0:
            raise ValueError(f"`num_steps` must be a positive int, but got {steps!r}.")
        if self.subsets is not None and (
            self.members is None or self.subsets.ndim != 2 or self.subsets.shape[0] != self.members
        ):
            raise ValueError(
                f"`subsets` must hold one row table per member, shape "
                f"({self.members}, m), but got {tuple(self.subsets.shape)}."
            )
        rows = len(self.dataset) if self.subsets is None else self.subsets.shape[1]
        steps_per_epoch(rows, self.batch_size)
        if self.mesh is None:
            return
        if self.members is None:  # one model's batch split over a "data" mesh
            check_divisible(self.batch_size, self.mesh)
            return
        if self.mesh.axis_names != (MEMBERS,):  # whole members on each device
            raise ValueError(
                f"members train over a mesh of axis {MEMBERS!r}, not {self.mesh.axis_names}."
            )
        check_members_divide(self.members, self.mesh.size)

    def member_axes(self) -> "Chunk":
        """`in_axes` of the chunk under the members' `vmap`, by name: each member's own
        row table, everything else shared."""
        shared = jtu.tree_map(lambda _: None, self)
        return eqx.tree_at(
            lambda c: c.subsets, shared, eqx.if_array(0), is_leaf=lambda x: x is None
        )

    def member_specs(self, arrays: "Chunk") -> "Chunk":
        """The `shard_map` specs of the chunk's `arrays` over a `"members"` mesh, by
        name: each member's row table split with its members, everything else
        replicated."""
        specs = jtu.tree_map(lambda _: P(), arrays)
        if self.subsets is None:
            return specs
        return eqx.tree_at(lambda c: c.subsets, specs, P(MEMBERS))

    def on_each_device(self) -> "Chunk":
        """The same chunk as each device of a `"members"` mesh runs it: no mesh."""
        return dataclasses.replace(self, mesh=None)


def convolves(model, features: int, stacked: bool = False) -> bool:
    """Whether `model`'s forward pass on one example of `features` inputs (each
    member's, for a `stacked` model) calls XLA's convolution (`conv_general_dilated`),
    read from its traced program. The library's models never do on a CPU (the CNN's
    convolutions are matmuls of patches there)."""
    if isinstance(model, MLP | CNN):
        return False
    arrays, static = eqx.partition(model, eqx.is_array)
    leaves, tree = jtu.tree_flatten(arrays)
    shapes = tuple((x.shape[1:] if stacked else x.shape, x.dtype) for x in leaves)
    try:
        return _convolves(static, tree, shapes, features)
    except TypeError:  # an unhashable module: traced each time
        return _convolves.__wrapped__(static, tree, shapes, features)


@functools.lru_cache(maxsize=64)
def _convolves(static, tree, shapes, features: int) -> bool:
    def forward(leaves, x):
        model = eqx.combine(jtu.tree_unflatten(tree, leaves), static)
        return model(x, key=jr.key(0)) if takes(model, "key") else model(x)

    like = [jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in shapes]
    jaxpr = jax.make_jaxpr(forward)(like, jax.ShapeDtypeStruct((features,), jnp.float32))
    return "conv_general_dilated" in str(jaxpr)
