"""Softmax cross-entropy and accuracy on a batch of logits, with an optional mask.

Both are computed in float32 whatever the logits' dtype, so that a bfloat16 or float16
forward pass does not also round the loss. A mask marks the real examples of a padded
batch; masked-out examples count for nothing, and the mean is over real examples.
"""

from collections.abc import Callable
from typing import Any, TypeAlias

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray, PyTree

from .checks import door
from .model import batch_logits
from .precision import FLOAT32, Policy

Loss: TypeAlias = Callable[..., Float[Array, ""] | tuple[Float[Array, ""], dict[str, Any]]]
"""What [`fit`][eqx_fmnist.train.fit]'s `loss=` takes: `loss(model, x, y, *, key)` over a
batch, `x` the batch's inputs as the model sees them (`(batch, features)`, `uint8` pixels
already scaled to `[0, 1]`), `y` its integer labels `(batch,)`, `key` the step's own
PRNG key; it returns a float32 scalar, or `(loss, aux)` with `aux` a dict of scalars that
land in the history. It calls the model itself (`jax.vmap(model)(x)`), so a regulariser
on the weights is one more term. The recipe's own is
[`recipe_loss`][eqx_fmnist.losses.recipe_loss]."""


def _weights(labels: Int[Array, " batch"], mask: Bool[Array, " batch"] | None):
    if mask is None:
        return jnp.ones(labels.shape, jnp.float32)
    return mask.astype(jnp.float32)


@door
def cross_entropy(
    logits: Float[Array, "batch classes"],
    labels: Int[Array, " batch"],
    mask: Bool[Array, " batch"] | None = None,
    *,
    label_smoothing: float | Float[Array, ""] = 0.0,
) -> Float[Array, ""]:
    """Mean softmax cross-entropy with integer labels.

    **Arguments:**

    - `logits`: shape `(batch, classes)`.
    - `labels`: shape `(batch,)`, each in `0..classes-1`.
    - `mask`: shape `(batch,)`; `False` entries are ignored. Defaults to all `True`.
    - `label_smoothing`: the target puts `1 - label_smoothing` on the label and spreads
        `label_smoothing` evenly over all classes; a number, or a scalar array (one per
        member of a sweep). Defaults to `0`.

    **Returns:**

    A float32 scalar: the mean over the examples the mask keeps (0 if it keeps none).
    """
    nll = _nll(logits, labels, label_smoothing)
    w = _weights(labels, mask)
    return (nll * w).sum() / jnp.maximum(w.sum(), 1.0)


def _nll(logits, labels, label_smoothing) -> Float[Array, " batch"]:
    """Each example's cross-entropy against its (smoothed) label."""
    log_p = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    # The label's entry by a select: no gather, nor a scatter in its gradient (TPU-slow).
    mine = labels[:, None] == jnp.arange(log_p.shape[-1])[None]
    nll = -jnp.where(mine, log_p, 0.0).sum(axis=-1)
    if isinstance(label_smoothing, jax.Array) or label_smoothing:
        nll = (1.0 - label_smoothing) * nll - label_smoothing * log_p.mean(axis=-1)
    return nll


@door
def mixed_cross_entropy(
    logits: Float[Array, "batch classes"],
    labels: Int[Array, " batch"],
    share: Float[Array, " batch"],
    *,
    label_smoothing: float | Float[Array, ""] = 0.0,
) -> Float[Array, ""]:
    """Mixup's cross-entropy: example `b` is `share[b]` of image `b` and the rest of its
    partner, image `n - 1 - b` ([`mix_batch`][eqx_fmnist.batches.mix_batch]), so its
    target mixes the two labels alike, and the loss (linear in the target) is the mean of
    `share * CE(label) + (1 - share) * CE(partner's label)`."""
    mine = _nll(logits, labels, label_smoothing)
    theirs = _nll(logits, labels[::-1], label_smoothing)
    return jnp.mean(share * mine + (1.0 - share) * theirs)


@door
def accuracy(
    logits: Float[Array, "batch classes"],
    labels: Int[Array, " batch"],
    mask: Bool[Array, " batch"] | None = None,
) -> Float[Array, ""]:
    """Fraction of examples whose largest logit is the label (over unmasked examples)."""
    w = _weights(labels, mask)
    correct = (jnp.argmax(logits, axis=-1) == labels).astype(jnp.float32)
    return (correct * w).sum() / jnp.maximum(w.sum(), 1.0)


@door
def soft_cross_entropy(
    logits: Float[Array, "batch classes"],
    target_log_probs: Float[Array, "batch classes"],
) -> Float[Array, ""]:
    """Mean cross-entropy of `logits` against soft targets (distillation).

    **Arguments:**

    - `logits`: the student's logits, shape `(batch, classes)`.
    - `target_log_probs`: the log of the target probabilities (a teacher's), same
        shape; each row normalised.

    **Returns:**

    A float32 scalar, `-mean_b sum_c p_bc log softmax(logits)_bc`; its gradient in the
    logits is `softmax(logits) - p`, so it is least when the student's probabilities
    are the targets.
    """
    log_q = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    p = jnp.exp(target_log_probs.astype(jnp.float32))
    return -(p * log_q).sum(axis=-1).mean()


def recipe_loss(
    model: PyTree,
    x: Float[Array, "batch features"],
    y: Int[Array, " batch"],
    *,
    key: PRNGKeyArray | None = None,
    policy: Policy = FLOAT32,
    label_smoothing: float | Float[Array, ""] = 0.0,
    soft: tuple | None = None,
    share: Float[Array, " batch"] | None = None,
) -> tuple[Float[Array, ""], dict[str, Array]]:
    """The recipe's loss, a [`Loss`][eqx_fmnist.losses.Loss] like any other: the
    (label-smoothed) cross-entropy of the model's logits, and `{"accuracy": ...}` beside
    it. The training step binds what the config and the step give it: the `policy` of
    the forward pass, `label_smoothing`, distillation's `soft` targets `(teacher's log
    probabilities, temperature, weight)`, and mixup's `share` of each image (the labels
    mixed alike)."""
    # Profiles show these operations as `forward`, and their gradients as
    # `transpose(jvp(forward))`: the backward pass.
    with jax.named_scope("forward"):
        # One batch-level forward: with bf16/f16 its backward multiplies in that dtype too.
        logits = batch_logits(model, x, policy, key=key)
        if share is None:
            loss = cross_entropy(logits, y, label_smoothing=label_smoothing)
        else:
            loss = mixed_cross_entropy(logits, y, share, label_smoothing=label_smoothing)
        if soft is not None:  # distillation: (teacher's log probabilities, temperature, weight)
            target, t, w = soft
            distilled = soft_cross_entropy(logits.astype(jnp.float32) / t, target) * t**2
            loss = w * distilled + (1.0 - w) * loss
        return loss, {"accuracy": accuracy(logits, y)}
