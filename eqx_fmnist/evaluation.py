"""Evaluation over every example: loss, accuracy, predictions and the confusion matrix,
for one model or a stack of members.

Batches are fixed-shape so that one compiled function serves any split; the last batch
is padded and masked, so all 10,000 test images count and none twice.

Every function here takes one model or a stacked model (members on a leading axis, as
[`init_members`][eqx_fmnist.state.init_members] builds them). The forward pass is
written for one model and `eqx.filter_vmap`ped over members; an ensemble predicts the
mean of its members' probabilities ([`combine`][eqx_fmnist.model.combine],
the one place that says so), and its "logits" are the logarithm of that mean.
"""

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int, Integer, Shaped

from .augment import Move
from .checks import door
from .dataset import ArrayDataset, as_images, normalize, pad_to_batches
from .fashion import NUM_CLASSES
from .losses import accuracy, cross_entropy
from .model import Model, combine, ensemble_log_probs, logits_of, num_members, per_member
from .parallel import batch_sharding
from .precision import FLOAT32, Policy
from .views import move_images


@dataclasses.dataclass(frozen=True)
class EvalResult:
    """Mean loss and accuracy over `count` examples.

    For a stack of members, `loss` and `accuracy` are the ensemble's (the
    cross-entropy and accuracy of the mean of the members' probabilities) and
    `members` holds each member's own result; for one model `members` is empty.
    """

    loss: float
    accuracy: float
    count: int
    members: tuple["EvalResult", ...] = ()

    @property
    def accuracy_mean(self) -> float:
        """The members' mean accuracy (one model: its accuracy)."""
        return float(np.mean([m.accuracy for m in self.members or (self,)]))

    @property
    def accuracy_std(self) -> float:
        """Standard deviation (n - 1) of the members' accuracies; 0 for one model."""
        accs = [m.accuracy for m in self.members]
        return float(np.std(accs, ddof=1)) if len(accs) > 1 else 0.0


def _forward(
    model: Model,
    images: Shaped[Array, "n features"],
    policy: Policy,
    batch_size: int,
    mesh: jax.sharding.Mesh | None,
    tta: tuple[Move, ...] | None = None,
) -> Float[Array, "padded classes"]:
    """One model's logits of all images, padded to whole batches; with `tta` views, the
    log of its mean probability over them."""
    if mesh is not None:  # whole batches per device: round the batch up to a multiple
        batch_size = -(-batch_size // mesh.size) * mesh.size
    batches, _ = pad_to_batches(images, batch_size)
    if mesh is not None:
        batches = jax.lax.with_sharding_constraint(batches, batch_sharding(mesh, 3, axis=1))
    forward = jax.vmap(lambda x: logits_of(model, normalize(x), policy))
    if tta:
        plain = forward

        def forward(x):  # every view of the batch, then their mean probability
            views = [move_images(x, dx=dx, dy=dy, mirror=m) for dx, dy, m in tta]
            return ensemble_log_probs(jnp.stack([plain(v) for v in views]))

    logits = jax.lax.map(forward, batches)  # one batch at a time: bounded memory
    return logits.reshape(-1, logits.shape[-1])


def _member_logits(model: Model, images, policy: Policy, batch_size: int, mesh=None, tta=None):
    """`_forward` of every member, on a leading axis (one model: a stack of one), in
    inference mode (`eqx.nn.inference_mode`: `Dropout` and its kin off)."""
    model = eqx.nn.inference_mode(model)
    return per_member(_forward, model, images, policy, batch_size, mesh, tta)


@eqx.filter_jit
def padded_logits(
    model: Model,
    images: Shaped[Array, "n features"],
    policy: Policy,
    batch_size: int,
    mesh: jax.sharding.Mesh | None = None,
    tta: tuple[Move, ...] | None = None,
) -> tuple[Float[Array, "padded classes"], Bool[Array, " padded"]]:
    """Logits (an ensemble's, or test-time augmentation's, log mean probabilities) of all
    images, padded to whole batches, and the mask of real rows: what
    [`predict_logits`][eqx_fmnist.evaluation.predict_logits] cuts and calibration masks."""
    logits = combine(model, _member_logits(model, images, policy, batch_size, mesh, tta))
    mask = jnp.arange(logits.shape[0]) < images.shape[0]
    return logits, mask


@door
def predict_logits(
    model: Model,
    images: Shaped[Array | np.ndarray, "n ..."],
    *,
    policy: Policy = FLOAT32,
    batch_size: int = 1000,
    tta: tuple[Move, ...] | None = None,
) -> Float[Array, "n classes"]:
    """Logits for every image, computed in fixed-shape batches.

    **Arguments:**

    - `model`: the model, or a stack of members.
    - `images`: shape `(n, 784)` or `(n, 28, 28)`, `uint8` pixels or floats in
        `[0, 1]` (checked: [`as_images`][eqx_fmnist.dataset.as_images]).
    - `policy`: the precision policy of the forward pass. Defaults to float32.
    - `batch_size`: images per compiled batch. Defaults to `1000`.
    - `tta`: test-time augmentation: the views of each image to average the
        probabilities over (`(dx, dy, mirror)` moves, e.g.
        [`TTA_MIRROR`][eqx_fmnist.views.TTA_MIRROR]: the image and its mirror).
        Defaults to `None`: the image as it is.

    **Returns:**

    The logits, shape `(n, 10)`; for members, or with `tta`, the log of the mean of
    the probabilities (over members and views).
    """
    images = as_images(images)
    logits, _ = padded_logits(model, images, policy, batch_size, None, tta)
    return logits[: images.shape[0]]


@door
def predict(
    model: Model,
    images: Shaped[Array | np.ndarray, "n ..."],
    *,
    policy: Policy = FLOAT32,
    batch_size: int = 1000,
    tta: tuple[Move, ...] | None = None,
) -> Int[Array, " n"]:
    """The predicted class of every image (arguments as for
    [`predict_logits`][eqx_fmnist.evaluation.predict_logits])."""
    logits = predict_logits(model, images, policy=policy, batch_size=batch_size, tta=tta)
    return jnp.argmax(logits, -1)


@door
def predict_proba(
    model: Model,
    images: Shaped[Array | np.ndarray, "n ..."],
    *,
    policy: Policy = FLOAT32,
    batch_size: int = 1000,
    temperature: float = 1.0,
    tta: tuple[Move, ...] | None = None,
) -> Float[Array, "n classes"]:
    """Softmax probabilities of every class for every image, float32; for members (and
    `tta` views), the mean of their probabilities. A `temperature` (a run's calibrated
    one) divides the logits first
    ([`scaled_softmax`][eqx_fmnist.evaluation.scaled_softmax])."""
    logits = predict_logits(model, images, policy=policy, batch_size=batch_size, tta=tta)
    return scaled_softmax(logits, temperature)


@jax.jit  # one program (eagerly, each of its operations would be one)
def scaled_softmax(
    logits: Float[Array, "*n classes"], temperature: float | Float[Array, ""] = 1.0
) -> Float[Array, "*n classes"]:
    """`softmax(logits / temperature)` in float32: the probabilities the library and its
    StableHLO artifact return (on the host, and in the numpy artifacts:
    [`numpy_softmax`][eqx_fmnist.evaluation.numpy_softmax])."""
    return jax.nn.softmax(logits.astype(jnp.float32) / jnp.float32(temperature), axis=-1)


def numpy_softmax(
    logits: Float[np.ndarray, "*n classes"], temperature: float = 1.0
) -> Float[np.ndarray, "*n classes"]:
    """`softmax(logits / temperature)` over the last axis, in numpy on the host, in
    the logits' own precision: what the numpy artifacts return and what a report counts
    from logits already read back (no program compiled for it)."""
    z = np.asarray(logits) / np.asarray(temperature, np.asarray(logits).dtype)
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def member_probabilities(
    model: Model,
    images: Shaped[Array | np.ndarray, "n ..."],
    *,
    policy: Policy = FLOAT32,
    batch_size: int = 1000,
) -> Float[Array, "members n classes"]:
    """Each member's softmax probabilities (float32), for a stack of members; one
    model counts as a stack of one."""
    return _member_probabilities(model, as_images(images), policy, batch_size)


@eqx.filter_jit  # one program (eagerly, each of its operations would be one)
def _member_probabilities(model: Model, images, policy: Policy, batch_size: int):
    logits = _member_logits(model, images, policy, batch_size)
    return jax.nn.softmax(logits[:, : images.shape[0]].astype(jnp.float32), axis=-1)


@door
def evaluate(
    model: Model,
    dataset: ArrayDataset,
    *,
    policy: Policy = FLOAT32,
    batch_size: int = 1000,
    mesh: jax.sharding.Mesh | None = None,
    tta: tuple[Move, ...] | None = None,
) -> EvalResult:
    """Mean cross-entropy and accuracy over **all** examples of `dataset`.

    **Arguments:**

    - `model`: the model, or a stack of members.
    - `dataset`: the examples; every one is counted exactly once.
    - `policy`: the precision policy of the forward pass. Defaults to float32.
    - `batch_size`: examples per compiled batch. Defaults to `1000`.
    - `mesh`: split each batch over this mesh's devices (data parallel). Defaults to
        `None`.
    - `tta`: test-time augmentation's views, as for
        [`predict_logits`][eqx_fmnist.evaluation.predict_logits]. Defaults to `None`.

    **Returns:**

    An [`EvalResult`][eqx_fmnist.evaluation.EvalResult] with `count == len(dataset)`:
    for members, the ensemble's numbers with each member's in `members`.
    """
    return eval_result(_metrics(model, dataset, policy, batch_size, mesh, tta))


def eval_result(metrics) -> EvalResult:
    """The [`EvalResult`][eqx_fmnist.evaluation.EvalResult] of a compiled program's
    [`dataset_scores`][eqx_fmnist.evaluation.dataset_scores], read from the device in one go."""
    (loss, acc), each, count = jax.device_get(metrics)
    count = int(count)
    members = (
        ()
        if each is None
        else tuple(EvalResult(float(x), float(a), count) for x, a in zip(*each, strict=True))
    )
    return EvalResult(float(loss), float(acc), count, members)


def dataset_scores(
    model: Model,
    dataset: ArrayDataset,
    policy: Policy,
    batch_size: int,
    mesh: jax.sharding.Mesh | None = None,
    tta: tuple[Move, ...] | None = None,
):
    """Inside a compiled program: the ensemble's (one model's) `(loss, accuracy)` over
    every example of `dataset`, each member's (`None` for one model) and the count;
    [`eval_result`][eqx_fmnist.evaluation.eval_result] reads them."""
    logits = _member_logits(model, dataset.images, policy, batch_size, mesh, tta)
    padded = logits.shape[-2]
    mask = jnp.arange(padded) < len(dataset)
    labels = jnp.concatenate(
        [dataset.labels, jnp.zeros(padded - len(dataset), dataset.labels.dtype)]
    )

    def score(z):
        return cross_entropy(z, labels, mask), accuracy(z, labels, mask)

    each = None if num_members(model) is None else jax.vmap(score)(logits)
    return score(combine(model, logits)), each, mask.sum()


@eqx.filter_jit
def _metrics(model, dataset: ArrayDataset, policy: Policy, batch_size: int, mesh, tta=None):
    """Loss and accuracy (and each member's) over every example: one compiled program,
    one host read."""
    return dataset_scores(model, dataset, policy, batch_size, mesh, tta)


def confusion_matrix(
    labels: Integer[Array | np.ndarray, " n"],
    predictions: Integer[Array | np.ndarray, " n"],
    *,
    num_classes: int = NUM_CLASSES,
) -> Int[np.ndarray, "classes classes"]:
    """Counts of (true, predicted) pairs: rows are true classes, columns predictions.

    **Returns:**

    An integer array of shape `(num_classes, num_classes)` summing to `n`, counted on
    the host.
    """
    pairs = np.asarray(labels) * num_classes + np.asarray(predictions)
    return np.bincount(pairs, minlength=num_classes**2).reshape(num_classes, num_classes)


def per_class_accuracy(
    cm: Integer[Array | np.ndarray, "classes classes"],
) -> Float[np.ndarray, " classes"]:
    """Recall of each true class from a confusion matrix: diagonal over row sums,
    counted on the host."""
    cm = np.asarray(cm)
    return np.diag(cm) / np.maximum(cm.sum(axis=1), 1)


def most_confused(
    cm: Integer[Array | np.ndarray, "classes classes"],
) -> tuple[Int[np.ndarray, " classes"], Float[np.ndarray, " classes"]]:
    """For each true class, the other class it is most often predicted as, and the
    share of its examples that go there."""
    cm = np.asarray(cm)
    off = cm - np.diag(np.diag(cm)) - np.eye(len(cm), dtype=cm.dtype)  # never itself
    other = off.argmax(axis=1)
    return other, cm[np.arange(len(cm)), other] / np.maximum(cm.sum(axis=1), 1)
