"""Softmax cross-entropy and accuracy on a batch of logits, with an optional mask.

Both are computed in float32 whatever the logits' dtype, so that a bfloat16 or float16
forward pass does not also round the loss. A mask marks the real examples of a padded
batch; masked-out examples count for nothing, and the mean is over real examples.
"""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int


def _weights(labels: Int[Array, " batch"], mask: Bool[Array, " batch"] | None):
    if mask is None:
        return jnp.ones(labels.shape, jnp.float32)
    return mask.astype(jnp.float32)


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


def accuracy(
    logits: Float[Array, "batch classes"],
    labels: Int[Array, " batch"],
    mask: Bool[Array, " batch"] | None = None,
) -> Float[Array, ""]:
    """Fraction of examples whose largest logit is the label (over unmasked examples)."""
    w = _weights(labels, mask)
    correct = (jnp.argmax(logits, axis=-1) == labels).astype(jnp.float32)
    return (correct * w).sum() / jnp.maximum(w.sum(), 1.0)


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
