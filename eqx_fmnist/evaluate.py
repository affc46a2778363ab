"""Evaluation over every example: loss, accuracy, predictions and the confusion matrix.

Batches are fixed-shape so that one compiled function serves any split; the last batch
is padded and masked, so all 10,000 test images count and none twice.
"""

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int, Integer, Shaped

from .data import NUM_CLASSES
from .dataset import ArrayDataset, normalize, pad_to_batches
from .losses import accuracy, cross_entropy
from .model import MLP
from .parallel import batch_sharding
from .precision import FLOAT32, Policy


@dataclasses.dataclass(frozen=True)
class EvalResult:
    """Mean loss and accuracy over `count` examples."""

    loss: float
    accuracy: float
    count: int


@eqx.filter_jit
def _logits(
    model: MLP,
    images: Shaped[Array, "n 784"],
    policy: Policy,
    batch_size: int,
    mesh: jax.sharding.Mesh | None = None,
) -> tuple[Float[Array, "padded classes"], Bool[Array, " padded"]]:
    """Logits of all images, padded to whole batches, and the mask of real rows."""
    if mesh is not None:  # whole batches per device: round the batch up to a multiple
        batch_size = -(-batch_size // mesh.size) * mesh.size
    batches, mask = pad_to_batches(images, batch_size)
    if mesh is not None:
        batches = jax.lax.with_sharding_constraint(batches, batch_sharding(mesh, 3, axis=1))
    forward = jax.vmap(lambda x: model(normalize(x), policy=policy))
    logits = jax.lax.map(forward, batches)  # one batch at a time: bounded memory
    return logits.reshape(-1, logits.shape[-1]), mask.reshape(-1)


def predict_logits(
    model: MLP,
    images: Shaped[Array, "n 784"],
    *,
    policy: Policy = FLOAT32,
    batch_size: int = 1000,
) -> Float[Array, "n classes"]:
    """Logits for every image, computed in fixed-shape batches.

    **Arguments:**

    - `model`: the model.
    - `images`: shape `(n, 784)`, `uint8` pixels or floats in `[0, 1]`.
    - `policy`: the precision policy of the forward pass. Defaults to float32.
    - `batch_size`: images per compiled batch. Defaults to `1000`.

    **Returns:**

    The logits, shape `(n, 10)`.
    """
    logits, _ = _logits(model, images, policy, batch_size)
    return logits[: images.shape[0]]


def predict(
    model: MLP,
    images: Shaped[Array, "n 784"],
    *,
    policy: Policy = FLOAT32,
    batch_size: int = 1000,
) -> Int[Array, " n"]:
    """The predicted class of every image (arguments as for
    [`predict_logits`][eqx_fmnist.evaluate.predict_logits])."""
    return jnp.argmax(predict_logits(model, images, policy=policy, batch_size=batch_size), -1)


def predict_proba(
    model: MLP,
    images: Shaped[Array, "n 784"],
    *,
    policy: Policy = FLOAT32,
    batch_size: int = 1000,
) -> Float[Array, "n classes"]:
    """Softmax probabilities of every class for every image, float32."""
    logits = predict_logits(model, images, policy=policy, batch_size=batch_size)
    return jax.nn.softmax(logits.astype(jnp.float32), axis=-1)


def evaluate(
    model: MLP,
    dataset: ArrayDataset,
    *,
    policy: Policy = FLOAT32,
    batch_size: int = 1000,
    mesh: jax.sharding.Mesh | None = None,
) -> EvalResult:
    """Mean cross-entropy and accuracy over **all** examples of `dataset`.

    **Arguments:**

    - `model`: the model.
    - `dataset`: the examples; every one is counted exactly once.
    - `policy`: the precision policy of the forward pass. Defaults to float32.
    - `batch_size`: examples per compiled batch. Defaults to `1000`.
    - `mesh`: split each batch over this mesh's devices (data parallel). Defaults to
        `None`.

    **Returns:**

    An [`EvalResult`][eqx_fmnist.evaluate.EvalResult] with `count == len(dataset)`.
    """
    loss, acc, count = jax.device_get(_metrics(model, dataset, policy, batch_size, mesh))
    return EvalResult(loss=float(loss), accuracy=float(acc), count=int(count))


@eqx.filter_jit
def _metrics(model, dataset: ArrayDataset, policy: Policy, batch_size: int, mesh):
    """Loss, accuracy and count over every example: one compiled program, one host read."""
    logits, mask = _logits(model, dataset.images, policy, batch_size, mesh)
    padding = jnp.zeros(logits.shape[0] - len(dataset), dataset.labels.dtype)
    labels = jnp.concatenate([dataset.labels, padding])
    return cross_entropy(logits, labels, mask), accuracy(logits, labels, mask), mask.sum()


def member_probabilities(
    models: MLP,
    images: Shaped[Array, "n 784"],
    *,
    policy: Policy = FLOAT32,
    batch_size: int = 1000,
) -> Float[Array, "members n classes"]:
    """Softmax probabilities of every member of a stacked model (the `model` of a state
    from [`init_members`][eqx_fmnist.state.init_members]), float32; the ensemble's are
    their mean over the first axis."""
    logits = eqx.filter_vmap(lambda m: _logits(m, images, policy, batch_size)[0])(models)
    return jax.nn.softmax(logits[:, : images.shape[0]].astype(jnp.float32), axis=-1)


def evaluate_ensemble(
    models: MLP,
    dataset: ArrayDataset,
    *,
    policy: Policy = FLOAT32,
    batch_size: int = 1000,
) -> tuple[list[EvalResult], EvalResult]:
    """Each member's loss and accuracy, and the ensemble's, over all of `dataset`.

    The ensemble predicts the mean of its members' probabilities; its loss is the
    cross-entropy of that mean.

    **Arguments:**

    - `models`: a stacked model (members on a leading axis).
    - `dataset`, `policy`, `batch_size`: as for
        [`evaluate`][eqx_fmnist.evaluate.evaluate].

    **Returns:**

    `(members, ensemble)`: a list of [`EvalResult`][eqx_fmnist.evaluate.EvalResult]s,
    one per member, and the ensemble's.
    """
    losses, accs, ens_loss, ens_acc, count = jax.device_get(
        _ensemble_metrics(models, dataset, policy, batch_size)
    )
    count = int(count)
    members = [EvalResult(float(x), float(a), count) for x, a in zip(losses, accs, strict=True)]
    return members, EvalResult(float(ens_loss), float(ens_acc), count)


@eqx.filter_jit
def _ensemble_metrics(models, dataset: ArrayDataset, policy: Policy, batch_size: int):
    logits, masks = eqx.filter_vmap(lambda m: _logits(m, dataset.images, policy, batch_size))(
        models
    )
    mask = masks[0]
    padding = jnp.zeros(mask.shape[0] - len(dataset), dataset.labels.dtype)
    labels = jnp.concatenate([dataset.labels, padding])
    log_p = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    losses = jax.vmap(lambda lp: cross_entropy(lp, labels, mask))(log_p)
    accs = jax.vmap(lambda lp: accuracy(lp, labels, mask))(log_p)
    # log of the mean probability, computed stably; it is already normalised.
    log_mean = jax.nn.logsumexp(log_p, axis=0) - jnp.log(jnp.float32(log_p.shape[0]))
    ens = cross_entropy(log_mean, labels, mask), accuracy(log_mean, labels, mask)
    return losses, accs, *ens, mask.sum()


def confusion_matrix(
    labels: Integer[Array | np.ndarray, " n"],
    predictions: Integer[Array | np.ndarray, " n"],
    *,
    num_classes: int = NUM_CLASSES,
) -> Int[Array, "classes classes"]:
    """Counts of (true, predicted) pairs: rows are true classes, columns predictions.

    **Returns:**

    An int32 array of shape `(num_classes, num_classes)` summing to `n`.
    """
    labels, predictions = jnp.asarray(labels), jnp.asarray(predictions)
    cm = jnp.zeros((num_classes, num_classes), jnp.int32)
    return cm.at[labels, predictions].add(1)


def per_class_accuracy(
    cm: Integer[Array | np.ndarray, "classes classes"],
) -> Float[Array, " classes"]:
    """Recall of each true class from a confusion matrix: diagonal over row sums."""
    cm = jnp.asarray(cm)
    return jnp.diag(cm) / jnp.maximum(cm.sum(axis=1), 1)


def most_confused(
    cm: Integer[Array | np.ndarray, "classes classes"],
) -> tuple[Int[np.ndarray, " classes"], Float[np.ndarray, " classes"]]:
    """For each true class, the other class it is most often predicted as, and the
    share of its examples that go there."""
    cm = np.asarray(cm)
    off = cm - np.diag(np.diag(cm)) - np.eye(len(cm), dtype=cm.dtype)  # never itself
    other = off.argmax(axis=1)
    return other, cm[np.arange(len(cm)), other] / np.maximum(cm.sum(axis=1), 1)
