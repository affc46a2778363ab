"""The fixed views of an image: test-time augmentation's named views (each image as it
is, mirrored, moved a pixel) and the fixed moves that robustness scores, all made by
the same moves as training's augmentation
([`move_batch`][eqx_fmnist.augment.move_batch])."""

import functools
from typing import Literal

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Int, Shaped

from .augment import Move, move_batch
from .fashion import SIDE

TTA_MIRROR: tuple[Move, ...] = ((0, 0, False), (0, 0, True))
"""Test-time augmentation's views: each image as it is and mirrored left-right."""
TTA_SHIFTS: tuple[Move, ...] = TTA_MIRROR + (
    (1, 0, False),
    (-1, 0, False),
    (0, 1, False),
    (0, -1, False),
)
"""The mirror and moves of one pixel along each axis: six views."""
TTA = Literal["none", "mirror", "shifts"]
"""A named choice of views, as `TrainConfig.tta` and `--tta` take it."""
TTA_VIEWS: dict[str, tuple[Move, ...] | None] = {
    "none": None,
    "mirror": TTA_MIRROR,
    "shifts": TTA_SHIFTS,
}
"""The views of each named choice (`None`: the image alone)."""


def tta_name(views: tuple[Move, ...] | None) -> str:
    """The name in `TTA_VIEWS` of `views`, or `"custom"` for other moves."""
    return next(
        (k for k, v in TTA_VIEWS.items() if v == (tuple(views) if views else None)), "custom"
    )


def move_images(
    images: Shaped[Array, "n 784"],
    *,
    dx: int | Int[Array, ""] = 0,
    dy: int | Int[Array, ""] = 0,
    mirror: bool | Bool[Array, ""] = False,
) -> Shaped[Array, "n 784"]:
    """Every image mirrored left-right (if `mirror`), then moved `dx` pixels right and
    `dy` down (negative: left, up), the uncovered pixels zero: the fixed moves of
    robustness evaluation (plain numbers, or traced ones inside a compiled program)."""
    # Plain numbers bound the select form's work; traced ones may be any move.
    bound = max(abs(dx), abs(dy)) if isinstance(dx, int) and isinstance(dy, int) else SIDE
    return _moved(images, jnp.asarray(dx, jnp.int32), jnp.asarray(dy, jnp.int32), mirror, bound)


@functools.partial(jax.jit, static_argnums=4)
def _moved(images: Array, dx: Array, dy: Array, mirror, bound: int) -> Array:
    """`move_images` compiled whole (eagerly, each of the move's operations would be a
    program of its own)."""
    n = images.shape[0]
    full = jnp.ones((n,), jnp.int32)
    return move_batch(images, full * dx, full * dy, jnp.full((n,), mirror), bound=bound)
