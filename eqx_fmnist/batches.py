"""What each training step trains on: its batch (the examples the batch order names,
gathered, moved, mirrored or erased as the state's augmentation says, and a teacher's
answers on them from its table), one step at a time or a block of steps at once.

The batch of global step `s` is a pure function of the run's key and `s`
([`step_batch`][eqx_fmnist.batches.step_batch]), so preparing a block of steps' batches
in one vectorised pass gives the same bits as preparing them one by one: on an
accelerator, where every small operation costs microseconds of launch whatever its
size, the chunk does that ([`block_steps`][eqx_fmnist.batches.block_steps]); on a CPU
each step gathers its own batch while it is in cache.
"""

import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, Shaped

from .augment import augment, augment_with_views
from .dataset import ArrayDataset, batch_indices, normalize
from .distill import TeacherTable
from .fashion import SIDE
from .state import TrainState

AUGMENT_STREAM = 0xFFFFFFFF
"""The number folded into a run's key for its augmentation stream. The batch order of
epoch `e` folds in `e`, and an epoch number stays below 2**31 (the step count is an
int32), so the two streams never meet."""


def augment_key(key):
    """The key of a run's augmentation stream, apart from every epoch's batch order."""
    return jr.fold_in(key, jnp.uint32(AUGMENT_STREAM))


def step_batch(
    st: TrainState, step, dataset: ArrayDataset, batch_size: int, teacher, subset, key=None
):
    """Global step `step`'s batch `(x, y, rows)`: its examples gathered and moved,
    mirrored or erased as the state's augmentation says, and with a teacher's table
    its answers on them (`rows`; `None` without one). `key`: the run key that orders
    and moves the batches, by default the state's own (members that share their batches
    pass their first member's)."""
    key = st.key if key is None else key
    n = len(dataset) if subset is None else subset.shape[0]
    with jax.named_scope("gather"):
        idx = batch_indices(key, step, n, batch_size)
        idx = idx if subset is None else subset[idx]  # a member's own rows
        x, y = dataset.images[idx], dataset.labels[idx]
    with jax.named_scope("augment"):
        key = jr.fold_in(augment_key(key), step)
        if isinstance(teacher, TeacherTable):  # its answers, read by (image, view)
            x, views = augment_with_views(key, x, st.settings.augmentation)
            return x, y, teacher.targets(idx, views)
        return augment(key, x, st.settings.augmentation), y, None


PREPARED_BYTES = 64 * 2**20
"""At most this many bytes of pixels (all members together) are prepared at once by a
block of steps on an accelerator (see [`block_steps`][eqx_fmnist.batches.block_steps])."""


def block_steps(
    num_steps: int, batch_size: int, members: int, platform: str, features: int = SIDE * SIDE
) -> int:
    """How many steps of a chunk have their batches prepared at once: `1` on a CPU
    (each step gathers and moves its own batch, while it is in cache); on an
    accelerator, where every small operation of a step costs microseconds of launch
    whatever its size, the largest divisor of `num_steps` whose batches (`members` x
    `batch_size` x `features` bytes each) fit in [`PREPARED_BYTES`][eqx_fmnist.batches.PREPARED_BYTES].
    The steps, their batches and their results are the same either way."""
    if platform == "cpu":
        return 1
    most = max(1, PREPARED_BYTES // (members * batch_size * features))
    return max(d for d in range(1, min(most, num_steps) + 1) if num_steps % d == 0)


def data_platform(dataset: ArrayDataset) -> str:
    """The platform (`"cpu"`, `"tpu"`, `"cuda"`, ...) of the device `dataset` lives on;
    JAX's default backend's where it cannot say (traced arrays)."""
    try:
        return next(iter(dataset.images.devices())).platform
    except (AttributeError, jax.errors.ConcretizationTypeError):
        return jax.default_backend()


MIX_STREAM = 0x6D6978
"""Folded into a step's augmentation key for its mixup draws (apart from its moves')."""


def mix_batch(
    key, x: Float[Array, "batch features"], concentration: float
) -> tuple[Float[Array, "batch features"], Float[Array, " batch"]]:
    """Mixup (Zhang et al. 2018) of normalised images: image `b` becomes
    `share[b] * x[b] + (1 - share[b]) * x[n - 1 - b]` (its partner: the batch reversed,
    whose order is random already), `share ~ Beta(concentration, concentration)` per
    image. Returns the mixed batch and `share`."""
    share = jr.beta(key, concentration, concentration, (x.shape[0],), jnp.float32)
    return share[:, None] * x + (1.0 - share[:, None]) * x[::-1], share


MODEL_STREAM = 0x6D6F64
"""Folded into a step's augmentation key for the key a model (or a loss of your own)
is given: `Dropout`'s draws, apart from the moves' and mixup's."""


def model_key(st: TrainState):
    """The key the step's loss is called with (`loss(model, x, y, *, key)`): a pure
    function of the run's key and the global step, as every other draw of a step."""
    return jr.fold_in(jr.fold_in(augment_key(st.key), st.step), MODEL_STREAM)


def step_inputs(
    st: TrainState, x: Shaped[Array, "batch features"]
) -> tuple[Float[Array, "batch features"], Float[Array, " batch"] | None]:
    """A step's batch as the model and a teacher see it: normalised, and, with the
    state's `mixup`, mixed in pairs (`mix_batch`, keyed by the state's key and step),
    with each image's share (`None` without mixing)."""
    x = normalize(x)
    concentration = st.settings.augmentation.mixup
    if concentration == 0:
        return x, None
    key = jr.fold_in(jr.fold_in(augment_key(st.key), st.step), MIX_STREAM)
    return mix_batch(key, x, concentration)
