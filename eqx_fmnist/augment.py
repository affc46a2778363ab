"""On-device augmentation: shifts, mirrors and erased patches, inside the compiled step.

Every item of Fashion-MNIST is centred on its canvas and every shoe points left, so a
model trained on the images as they are learns that too, and is wrong on a picture
moved by two pixels or mirrored. Training on moved and mirrored copies fixes that.

An augmented batch is computed in place, not in a pipeline, in one of two forms that
give the same bits ([`move_batch`][eqx_fmnist.augment.move_batch] picks one when the
program is lowered, with `jax.lax.platform_dependent`):

- on a CPU, one gather ([`gather_moves`][eqx_fmnist.augment.gather_moves]): each
    output pixel of each image names the pixel it comes from
    ([`pixel_sources`][eqx_fmnist.augment.pixel_sources]);
- on a TPU or a GPU, where a per-pixel gather is slow (on a TPU v5e it took 98% of a
    training step), static slices of a zero-padded batch and selects
    ([`select_moves`][eqx_fmnist.augment.select_moves]).

Pixels that fall outside the canvas, or inside an erased patch, are zero (the
background). The same moves serve the fixed views of test-time augmentation and
robustness ([`eqx_fmnist.views`][eqx_fmnist.views]).

The random choices of a step are a pure function of the run's key, the global step and
the example's place in the batch ([`augment`][eqx_fmnist.augment.augment]): results do
not depend on how steps are grouped, a resumed run is exact, and members draw their
own.
"""

import dataclasses
import math
import typing
from typing import Literal

import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Bool, Int, PRNGKeyArray, Shaped

from .fashion import SIDE

ERASE_SIZES = (4, 14)
"""Smallest and largest side, in pixels, of an erased patch (random erasing)."""

ShiftDistribution = Literal["uniform", "triangular"]
"""How a move's size is drawn: uniform in `-shift..shift`, or the sum of two uniform
moves of half the range each (small moves more often than large ones)."""

_ROWS = [i // SIDE for i in range(SIDE * SIDE)]
_COLS = [i % SIDE for i in range(SIDE * SIDE)]


@dataclasses.dataclass(frozen=True)
class Augmentation:
    """Which random changes a training step makes to its batch (a static part of the
    compiled step, made from a config by
    [`augmentation_of`][eqx_fmnist.augment.augmentation_of]).

    **Fields:**

    - `shift`: each image moves by up to this many pixels in x and in y (each a
        uniform integer in `-shift..shift`), the uncovered pixels zero. `0`: none.
    - `mirror`: each image is mirrored left-right with probability 1/2.
    - `erase`: the probability that a random rectangle of each image (sides of
        `ERASE_SIZES` pixels) is set to zero. `0`: never.
    - `shift_distribution`: how each move in x and y is drawn (see
        [`random_shifts`][eqx_fmnist.augment.random_shifts]).
    - `mixup`: each image mixed with another of its batch, its share drawn from
        Beta(mixup, mixup) ([`mix_batch`][eqx_fmnist.batches.mix_batch]). `0`: none.
    """

    shift: int = 0
    mirror: bool = False
    erase: float = 0.0
    shift_distribution: ShiftDistribution = "uniform"
    mixup: float = 0.0

    def __post_init__(self):
        if isinstance(self.shift, bool) or not isinstance(self.shift, int):
            raise ValueError(f"`shift` must be an int number of pixels, but got {self.shift!r}.")
        if not 0 <= self.shift < SIDE:
            raise ValueError(
                f"`shift` must be in 0..{SIDE - 1} pixels (the images are {SIDE} wide), "
                f"but got {self.shift}; 1 or 2 is what helps."
            )
        if not isinstance(self.mirror, bool):
            raise ValueError(f"`mirror` must be True or False, but got {self.mirror!r}.")
        ok = isinstance(self.erase, int | float) and not isinstance(self.erase, bool)
        if not (ok and math.isfinite(self.erase) and 0.0 <= self.erase <= 1.0):
            raise ValueError(f"`erase` must be a probability in [0, 1], but got {self.erase!r}.")
        ok = isinstance(self.mixup, int | float) and not isinstance(self.mixup, bool)
        if not (ok and math.isfinite(self.mixup) and self.mixup >= 0):
            raise ValueError(f"`mixup` must be a number >= 0 (0: none), but got {self.mixup!r}.")
        choices = typing.get_args(ShiftDistribution)
        if self.shift_distribution not in choices:
            raise ValueError(
                f"`shift_distribution` must be one of {', '.join(choices)}, but got "
                f"{self.shift_distribution!r}."
            )

    @property
    def active(self) -> bool:
        """Whether a step changes its batch at all."""
        return self.shift > 0 or self.mirror or self.erase > 0


NONE = Augmentation()
"""No augmentation: the batch as gathered."""


def augmentation_of(config) -> Augmentation:
    """The [`Augmentation`][eqx_fmnist.augment.Augmentation] a `TrainConfig` asks for."""
    return Augmentation(
        shift=config.shift,
        mirror=config.mirror,
        erase=config.erase,
        shift_distribution=config.shift_distribution,
        mixup=config.mixup,
    )


def pixel_sources(
    dx: Int[Array, " batch"],
    dy: Int[Array, " batch"],
    flip: Bool[Array, " batch"],
    erase_box: Int[Array, "batch 4"] | None = None,
) -> tuple[Int[Array, "batch 784"], Bool[Array, "batch 784"]]:
    """The index map of a batch of moves: for each image and each output pixel, the
    flat index of the input pixel it shows, and whether it shows one at all.

    Image `b` is mirrored left-right if `flip[b]`, then moved right by `dx[b]` and down
    by `dy[b]` pixels (negative: left, up). Output pixel `(r, c)` shows input pixel
    `(r - dy, c - dx)` of the (mirrored) image; a source outside the canvas, or an
    output pixel inside `erase_box[b] = (top, left, height, width)`, shows nothing.

    **Returns:**

    `(sources, keep)`, both of shape `(batch, 784)`: `sources` in `0..783` (clipped
    where `keep` is `False`).
    """
    rows = jnp.asarray(_ROWS, jnp.int32)[None]
    cols = jnp.asarray(_COLS, jnp.int32)[None]
    src_r = rows - dy[:, None]
    src_c = cols - dx[:, None]
    src_c = jnp.where(flip[:, None], SIDE - 1 - src_c, src_c)
    keep = (src_r >= 0) & (src_r < SIDE) & (src_c >= 0) & (src_c < SIDE)
    if erase_box is not None:
        top, left, h, w = (erase_box[:, i : i + 1] for i in range(4))
        inside = (rows >= top) & (rows < top + h) & (cols >= left) & (cols < left + w)
        keep = keep & ~inside
    sources = jnp.clip(src_r, 0, SIDE - 1) * SIDE + jnp.clip(src_c, 0, SIDE - 1)
    return sources, keep


def remap(
    images: Shaped[Array, "batch 784"],
    sources: Int[Array, "batch 784"],
    keep: Bool[Array, "batch 784"],
) -> Shaped[Array, "batch 784"]:
    """Apply an index map from [`pixel_sources`][eqx_fmnist.augment.pixel_sources]: one
    gather within each image, zero where `keep` is `False`."""
    moved = jnp.take_along_axis(images, sources, axis=1)
    return jnp.where(keep, moved, jnp.zeros((), images.dtype))


def gather_moves(
    images: Shaped[Array, "batch 784"],
    dx: Int[Array, " batch"],
    dy: Int[Array, " batch"],
    flip: Bool[Array, " batch"],
    erase_box: Int[Array, "batch 4"] | None = None,
) -> Shaped[Array, "batch 784"]:
    """The moves of [`pixel_sources`][eqx_fmnist.augment.pixel_sources] as one gather: the
    fastest form on a CPU."""
    return remap(images, *pixel_sources(dx, dy, flip, erase_box))


def _shift(x: Array, d: Int[Array, " batch"], bound: int, axis: int) -> Array:
    """`x` (images on the last axis) moved by `d[b]` along `axis`, zero-filled:
    `out[..., i, ..., b] = x[..., i - d[b], ..., b]`, for `|d| <= bound`.

    The move is `bound - d` in `0..2 bound`, written in binary: a zero-padded copy is
    cut by one static slice or the next for each bit, and each image selects its own.
    """
    bits = max(1, (2 * bound).bit_length())
    pad = [(0, 0)] * x.ndim
    pad[axis] = (bound, (1 << bits) - 1 - bound)  # the length becomes size + 2**bits - 1
    y = jnp.pad(x, pad)
    q = (bound - d).reshape((1,) * (x.ndim - 1) + (-1,))  # one value per image
    for j in range(bits):
        v = 1 << j
        n = y.shape[axis] - (1 << j)
        further = jax.lax.slice_in_dim(y, v, v + n, axis=axis)
        y = jnp.where((q >> j) & 1 == 1, further, jax.lax.slice_in_dim(y, 0, n, axis=axis))
    return y  # the bits add up to 2**bits - 1: the size is the image's again


def select_moves(
    images: Shaped[Array, "batch 784"],
    dx: Int[Array, " batch"],
    dy: Int[Array, " batch"],
    flip: Bool[Array, " batch"],
    erase_box: Int[Array, "batch 4"] | None = None,
    *,
    bound: int = SIDE,
) -> Shaped[Array, "batch 784"]:
    """The moves of [`pixel_sources`][eqx_fmnist.augment.pixel_sources] without a gather,
    the fast form on a TPU or a GPU: the batch turned to `(row, column, image)`, so that
    the images lie along the lanes (images first, a TPU pads each 28-pixel row to 128
    lanes in every pass); the mirror as a select of the columns reversed, each move as
    static slices of a zero-padded batch and one select per bit of its size, the erased
    patch as a mask. The same pixels as [`gather_moves`][eqx_fmnist.augment.gather_moves].

    `bound` is the largest move asked for (`|dx|, |dy| <= bound`, static): the work
    grows with its number of bits. A move of `SIDE` pixels or more leaves nothing.
    """
    bound = max(0, min(bound, SIDE))  # a move of SIDE (clipped to) leaves only zeros
    n = images.shape[0]
    x = images.T.reshape(SIDE, SIDE, n)
    x = jnp.where(flip[None, None], x[:, ::-1, :], x)
    x = _shift(x, jnp.clip(dx, -bound, bound).astype(jnp.int32), bound, axis=1)
    x = _shift(x, jnp.clip(dy, -bound, bound).astype(jnp.int32), bound, axis=0)
    if erase_box is not None:
        rows = jnp.arange(SIDE, dtype=jnp.int32)[:, None, None]
        cols = jnp.arange(SIDE, dtype=jnp.int32)[None, :, None]
        top, left, h, w = (erase_box[None, None, :, i] for i in range(4))
        inside = (rows >= top) & (rows < top + h) & (cols >= left) & (cols < left + w)
        x = jnp.where(inside, jnp.zeros((), x.dtype), x)
    return x.reshape(SIDE * SIDE, n).T


def move_batch(
    images: Shaped[Array, "batch 784"],
    dx: Int[Array, " batch"],
    dy: Int[Array, " batch"],
    flip: Bool[Array, " batch"],
    erase_box: Int[Array, "batch 4"] | None = None,
    *,
    bound: int = SIDE,
) -> Shaped[Array, "batch 784"]:
    """Each image of a batch mirrored (where `flip`), moved by its own `(dx, dy)` and
    erased inside its own `erase_box`, as
    [`pixel_sources`][eqx_fmnist.augment.pixel_sources] describes, in the form that is
    fast where the program runs: [`gather_moves`][eqx_fmnist.augment.gather_moves] on a
    CPU, [`select_moves`][eqx_fmnist.augment.select_moves] elsewhere (chosen when the
    program is lowered: `jax.lax.platform_dependent`). Both give the same pixels.

    `bound`: the largest `|dx|` and `|dy|` asked for (static; the select form's work
    grows with its bits). Defaults to `SIDE`: any move.
    """
    return jax.lax.platform_dependent(
        images,
        dx,
        dy,
        flip,
        erase_box,
        cpu=gather_moves,
        default=lambda *args: select_moves(*args, bound=bound),
    )


def random_shifts(
    key: PRNGKeyArray, batch: int, shift: int, distribution: ShiftDistribution = "uniform"
) -> Int[Array, "2 batch"]:
    """Moves `(dx, dy)` of `batch` images, each in `-shift..shift`.

    `"uniform"`: every value equally likely. `"triangular"`: the sum of a uniform move in
    `-(shift // 2)..shift // 2` and one in `-(shift - shift // 2)..shift - shift // 2`,
    so that small moves come more often (for `shift = 2`: 0 with probability 1/3, ±1
    with 2/9 each, ±2 with 1/9 each).
    """
    if distribution == "uniform" or shift < 2:
        return jr.randint(key, (2, batch), -shift, shift + 1)
    half = shift // 2
    k1, k2 = jr.split(key)
    rest = shift - half
    return jr.randint(k1, (2, batch), -half, half + 1) + jr.randint(k2, (2, batch), -rest, rest + 1)


def random_choices(
    key: PRNGKeyArray, batch: int, augmentation: Augmentation
) -> tuple[Int[Array, " batch"], Int[Array, " batch"], Bool[Array, " batch"], Array | None]:
    """`(dx, dy, flip, erase_box)` of one step's batch: what
    [`pixel_sources`][eqx_fmnist.augment.pixel_sources] turns into its index map
    (`erase_box` is `None` when nothing is erased)."""
    k_shift, k_flip, k_erase, k_size, k_place = jr.split(key, 5)
    s = augmentation.shift
    zeros = jnp.zeros((batch,), jnp.int32)
    shifts = random_shifts(k_shift, batch, s, augmentation.shift_distribution)
    dx, dy = shifts if s else (zeros, zeros)
    flip = jr.bernoulli(k_flip, 0.5, (batch,)) if augmentation.mirror else zeros.astype(bool)
    box = None
    if augmentation.erase > 0:
        low, high = ERASE_SIZES
        erased = jr.bernoulli(k_erase, augmentation.erase, (batch,))
        size = jr.randint(k_size, (2, batch), low, high + 1) * erased.astype(jnp.int32)[None]
        place = jr.uniform(k_place, (2, batch))
        corner = jnp.floor(place * (SIDE + 1 - size).astype(jnp.float32)).astype(jnp.int32)
        box = jnp.stack([corner[0], corner[1], size[0], size[1]], axis=1)
    return dx, dy, flip, box


def augment(
    key: PRNGKeyArray, images: Shaped[Array, "batch features"], augmentation: Augmentation
) -> Shaped[Array, "batch features"]:
    """A randomly moved, mirrored and erased copy of a batch, as
    `augmentation` says; the batch itself when it says nothing.

    The choices for image `b` depend only on `key` and `b`: the training step passes
    `jr.fold_in(stream_key, step)`, so they are a pure function of the run's key, the
    global step and the example's place in the batch.

    **Arguments:**

    - `key`: the step's PRNG key.
    - `images`: pixels of shape `(batch, 784)` (`uint8`, or floats).
    - `augmentation`: what to do.

    **Returns:**

    Pixels of the same shape and dtype.
    """
    if not augmentation.active:
        return images
    choices = random_choices(key, images.shape[0], augmentation)
    return move_batch(images, *choices, bound=augmentation.shift)


def augment_with_views(
    key: PRNGKeyArray, images: Shaped[Array, "batch 784"], augmentation: Augmentation
) -> tuple[Shaped[Array, "batch 784"], Int[Array, " batch"]]:
    """[`augment`][eqx_fmnist.augment.augment]'s batch, the same pixels from the same
    key, and which of [`finite_views`][eqx_fmnist.augment.finite_views] each image
    shows (its index there). For an augmentation that erases, whose views are not a
    finite set, there is no such index: `ValueError`."""
    if finite_views(augmentation) is None:
        raise ValueError("an augmentation that erases makes no finite set of views.")
    dx, dy, flip, _ = random_choices(key, images.shape[0], augmentation)
    s = augmentation.shift
    sides = 2 if augmentation.mirror else 1
    views = ((dy + s) * (2 * s + 1) + (dx + s)) * sides + flip.astype(jnp.int32) * (sides - 1)
    return move_batch(images, dx, dy, flip, bound=s), views


Move = tuple[int, int, bool]
"""A fixed move of an image, `(dx, dy, mirror)`: mirrored left-right if `mirror`, then
moved `dx` pixels right and `dy` down (see
[`move_images`][eqx_fmnist.views.move_images])."""


def finite_views(augmentation: Augmentation) -> "tuple[Move, ...] | None":
    """Every view of an image that `augmentation` can make, in the order
    [`augment_with_views`][eqx_fmnist.augment.augment_with_views] numbers them: each
    move `(dx, dy)` in `-shift..shift` (dy the slower), each as it is and, with
    `mirror`, mirrored. `None` when the views are not a finite set (an augmentation that
    erases a patch anywhere, or mixes images). The default recipe's: 25 x 2 = 50 views.
    """
    if augmentation.erase > 0 or augmentation.mixup > 0:
        return None
    s = augmentation.shift
    flips = (False, True) if augmentation.mirror else (False,)
    return tuple((dx, dy, f) for dy in range(-s, s + 1) for dx in range(-s, s + 1) for f in flips)
