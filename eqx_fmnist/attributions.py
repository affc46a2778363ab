"""Which pixels made the model say it: integrated gradients.

Training takes the gradient of the loss with respect to the weights; an attribution takes
the gradient of one class's score with respect to the *input*. A single gradient is
local (it says how the score moves for a tiny change of each pixel), so integrated
gradients (Sundararajan, Taly and Yan, 2017) average it along the straight path from a
baseline `b` to the image `x` and scale by the change of each pixel:

    attribution_i = (x_i - b_i) * mean over alpha of d score / d x_i at b + alpha (x - b)

Here the baseline is the blank (all-zero) image, which is the background of every
Fashion-MNIST picture, and the mean is the midpoint rule over `steps` points. The
attributions then sum to `score(x) - score(b)` (*completeness*), up to the rule's error,
which shrinks as `steps` grows: an
[`Explanation`][eqx_fmnist.attributions.Explanation]'s `completeness_error` says how far
off a given run is.

The score is the class's logit for one model and, for a stack of members, the ensemble's
log mean probability of the class (what the ensemble's prediction is made of).
"""

import dataclasses
from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int, Shaped

from .data import NUM_CLASSES
from .dataset import normalize
from .model import Model, combine, logits_of, per_member
from .precision import FLOAT32, Policy

STEPS = 64
"""Points on the path from the blank image to the image, unless told otherwise."""


def class_scores(
    model: Model, x: Float[Array, " 784"], *, policy: Policy = FLOAT32
) -> Float[Array, " 10"]:
    """What is explained, for one image in `[0, 1]`: one model's logits, or a stack's
    ensemble log mean probabilities, float32."""
    return combine(model, per_member(lambda m, v: logits_of(m, v, policy), model, x))


def integrated_gradients(
    model: Model,
    x: Float[Array, " 784"],
    target: Int[Array, ""] | int,
    *,
    steps: int = STEPS,
    policy: Policy = FLOAT32,
) -> Float[Array, " 784"]:
    """Integrated gradients of class `target`'s score for one image `x` in `[0, 1]`,
    against the blank image: `x * mean(grad score(alpha x))` over the midpoint rule's
    `steps` values of `alpha`. This is the whole method;
    [`explain`][eqx_fmnist.attributions.explain] runs it over many images."""

    def score(v):
        return class_scores(model, v, policy=policy)[target]

    alphas = (jnp.arange(steps, dtype=jnp.float32) + 0.5) / steps
    grads = jax.vmap(jax.grad(score))(alphas[:, None] * x[None, :])
    return x * grads.mean(axis=0)


@dataclasses.dataclass
class Explanation:
    """What [`explain`][eqx_fmnist.attributions.explain] returns, as numpy, one row per image.

    **Fields:**

    - `attributions`: `(n, 784)`, each pixel's share of the score, in the score's units
        (positive: the pixel raised the class's score).
    - `target`: `(n,)`, the class explained (the predicted one unless told).
    - `score_change`: `(n,)`, `score(image) - score(blank image)` of that class.
    - `steps`: points on the path.
    """

    attributions: np.ndarray
    target: np.ndarray
    score_change: np.ndarray
    steps: int

    @property
    def completeness_error(self) -> np.ndarray:
        """`(n,)`: how far the attributions' sum is from `score_change` (zero for the
        exact integral; the midpoint rule's error shrinks as `steps` grows)."""
        return np.abs(self.attributions.sum(axis=-1) - self.score_change)


@eqx.filter_jit
def _explain(model, images, target, steps: int, policy: Policy):
    def one(args):
        x, t = args
        scores = class_scores(model, x, policy=policy)
        t = jnp.where(t < 0, jnp.argmax(scores), t)
        blank = class_scores(model, jnp.zeros_like(x), policy=policy)[t]
        ig = integrated_gradients(model, x, t, steps=steps, policy=policy)
        return ig, t, scores[t] - blank

    return jax.lax.map(one, (normalize(images), target))  # one image at a time: bounded memory


def explain(
    model: Model,
    images: Shaped[Array | np.ndarray, "n 784"],
    *,
    target: int | Sequence[int] | Int[Array | np.ndarray, " n"] | None = None,
    steps: int = STEPS,
    policy: Policy = FLOAT32,
) -> Explanation:
    """Integrated-gradients attributions of every image, against the blank image.

    **Arguments:**

    - `model`: the model, or a stack of members (their ensemble is explained).
    - `images`: shape `(n, 784)`, `uint8` pixels or floats in `[0, 1]`.
    - `target`: the class to explain, one for all or one per image. Defaults to `None`:
        each image's predicted class.
    - `steps`: points on the path from the blank image (the midpoint rule). Defaults to
        `64`.
    - `policy`: the precision policy of the forward and backward passes. Defaults to
        float32.

    **Returns:**

    An [`Explanation`][eqx_fmnist.attributions.Explanation].

    **Raises:**

    `ValueError` for `steps` below 1 or a class outside 0-9.

    !!! example

        ```python
        e = ef.explain(result.model, test.images[:4])
        e.attributions.reshape(-1, 28, 28)  # one map per image
        e.completeness_error  # |sum of attributions - (score(image) - score(blank))|
        ```
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"`steps` must be a positive int, but got {steps!r}.")
    images = jnp.asarray(images)
    n = images.shape[0]
    wanted = np.full(n, -1) if target is None else np.broadcast_to(np.asarray(target), (n,))
    if target is not None and ((wanted < 0) | (wanted >= NUM_CLASSES)).any():
        raise ValueError(f"`target` must be a class 0-{NUM_CLASSES - 1}, but got {target!r}.")
    ig, t, change = _explain(model, images, jnp.asarray(wanted, jnp.int32), steps, policy)
    return Explanation(np.asarray(ig), np.asarray(t), np.asarray(change), steps)
