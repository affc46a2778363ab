"""Distillation: one student learns from a teacher ensemble inside its own compiled step.

A [`Teacher`][eqx_fmnist.distill.Teacher] is a trained model or a stack of members (the
teachers, vmapped), with the temperature that softens its probabilities and the weight
of its soft targets. Given one, [`fit`][eqx_fmnist.train.fit] runs the teachers' forward
pass on each step's own (augmented) batch and trains the student on

    weight * T^2 * CE(teacher's softened mean probability, softmax(student / T))
    + (1 - weight) * CE(labels, softmax(student))

(Hinton et al. 2015; the `T^2` keeps the soft term's gradients the size of the hard
term's as `T` changes). Nothing of the teachers is stored in the student's state.

The augmentation's views of an image are usually a finite set (the default recipe's: 25
moves, each mirrored or not). Then the teachers' answers on all of them are computed
once, before training, into a [`TeacherTable`][eqx_fmnist.distill.TeacherTable], and
each step reads its batch's rows from it instead of running the teachers.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int, Shaped

from .augment import Augmentation, augmentation_of, finite_views
from .config import TrainConfig
from .dataset import normalize
from .fashion import IMAGE_SIZE, NUM_CLASSES
from .model import CNN, MLP, Model, batch_logits, ensemble_log_probs, per_member
from .precision import FLOAT32, Policy
from .views import move_images


class Teacher(eqx.Module):
    """A trained model or stack of members that a student learns from."""

    model: Model
    policy: Policy = eqx.field(static=True)
    temperature: float = eqx.field(static=True)
    weight: float = eqx.field(static=True)

    def __init__(
        self,
        model: Model,
        *,
        policy: Policy = FLOAT32,
        temperature: float = 1.0,
        weight: float = 1.0,
    ):
        """**Arguments:**

        - `model`: the teachers: one model, or members stacked on a leading axis (their
            mean probability is the target).
        - `policy`: the precision of the teachers' forward pass. Defaults to float32.
        - `temperature`: divides every logit, student's and teachers', in the soft term.
            Defaults to `1`.
        - `weight`: the soft term's share of the loss. Defaults to `1`: soft targets only.
        """
        if not isinstance(model, eqx.Module):
            raise TypeError(f"a teacher must be an eqx.Module (or a stack), not {type(model)}.")
        library = isinstance(model, MLP | CNN)
        if library and (model.in_size != IMAGE_SIZE or model.out_size != NUM_CLASSES):
            raise ValueError(
                f"the teacher maps {model.in_size} inputs to {model.out_size} classes, but a "
                f"student here maps {IMAGE_SIZE} pixels to {NUM_CLASSES} classes: give a "
                "teacher trained on Fashion-MNIST."
            )
        if not temperature > 0:
            raise ValueError(f"`temperature` must be positive, but got {temperature!r}.")
        if not 0 <= weight <= 1:
            raise ValueError(f"`weight` must be in [0, 1], but got {weight!r}.")
        self.model = model
        self.policy = policy
        self.temperature = float(temperature)
        self.weight = float(weight)

    @classmethod
    def for_student(cls, model: Model, config: TrainConfig, *, policy: Policy = FLOAT32):
        """The teacher of a student trained with `config` (its `distill_temperature` and
        `distill_weight`). The teacher may be any model that maps an image to ten
        logits: an MLP of the student's shape or another, a
        [`CNN`][eqx_fmnist.model.CNN], a stack of members."""
        return cls(
            model,
            policy=policy,
            temperature=config.distill_temperature,
            weight=config.distill_weight,
        )

    def log_probs(self, x: Float[Array, "batch 784"]) -> Float[Array, "batch classes"]:
        """The log of the teachers' mean probability at this temperature, for a batch
        of normalised images; no gradient flows into the teachers."""
        model = jax.lax.stop_gradient(self.model)

        def logits(m):
            return batch_logits(m, x, self.policy)  # the CNN's patches as one matmul

        stacked = per_member(logits, model)
        return ensemble_log_probs(stacked.astype(jnp.float32) / self.temperature)

    def soft(self, x: Float[Array, "batch features"], read=None) -> tuple:
        """Distillation's soft targets of a step's batch, as the recipe's loss takes them:
        `(log probabilities, temperature, weight)`, the teachers run on the batch `x`
        (`read`, what a table's batch reads, is unused)."""
        return self.log_probs(x), self.temperature, self.weight

    def table(
        self, images: Shaped[Array, "n 784"], augmentation: Augmentation, *, chunk: int = 4096
    ) -> "TeacherTable | None":
        """The teachers' answers on every training image in every view `augmentation`
        can make, computed once (see [`TeacherTable`][eqx_fmnist.distill.TeacherTable]);
        `None` when its views are not a finite set (it erases or mixes images).

        **Arguments:**

        - `images`: the training images, `(n, 784)` pixels, on the device.
        - `augmentation`: the student's augmentation.
        - `chunk`: the most images per forward pass while the table is filled.
        """
        views = finite_views(augmentation)
        if views is None:
            return None
        n = images.shape[0]
        count = max(1, -(-n // chunk))  # near-equal blocks of at most `chunk` images
        size = max(1, -(-n // count))  # (6,000 images: 2 of 3,000, not 8,192 rows)
        blocks = jnp.pad(images, ((0, -n % size), (0, 0))).reshape(-1, size, images.shape[1])
        # The moves as arrays: one compiled program serves every view.
        columns = [_answers_in_view(self, blocks, *map(jnp.asarray, view))[:n] for view in views]
        return TeacherTable(jnp.stack(columns, axis=1), views, self.temperature, self.weight)


@eqx.filter_jit
def _answers_in_view(teacher: Teacher, blocks, dx, dy, mirror):
    """The teachers' log probabilities on every image moved by one view, in bfloat16,
    one block of images at a time: `(blocks * chunk, classes)`."""

    def block(images):
        moved = move_images(images, dx=dx, dy=dy, mirror=mirror)
        return teacher.log_probs(normalize(moved)).astype(jnp.bfloat16)

    return jax.lax.map(block, blocks).reshape(-1, NUM_CLASSES)


class TeacherTable(eqx.Module):
    """A teacher's answers computed once: the log of the teachers' mean probability, at
    the distillation temperature, for every training image in every view the student's
    augmentation can make, stored in bfloat16 (60,000 images x 50 views x 10 classes
    is 60 MB). A distillation step then reads its batch's rows by (image, view) instead
    of running the teachers: the step costs about what a plain step costs.

    Made by [`Teacher.table`][eqx_fmnist.distill.Teacher.table];
    [`fit`][eqx_fmnist.train.fit] makes one whenever the augmentation's views are a
    finite set and the run would show the teachers more images than the table holds
    (the default recipe: 9,360 steps x 512 against 60,000 x 50), and keeps the live
    teacher otherwise.
    """

    log_probs: Float[Array, "n views classes"]
    views: tuple[tuple[int, int, bool], ...] = eqx.field(static=True)
    temperature: float = eqx.field(static=True)
    weight: float = eqx.field(static=True)

    def soft(self, x, read: Float[Array, "batch classes"]) -> tuple:
        """Distillation's soft targets of a step's batch, as
        [`Teacher.soft`][eqx_fmnist.distill.Teacher.soft] gives them: `read`, the rows the
        batch read from the table ([`targets`][eqx_fmnist.distill.TeacherTable.targets]),
        with the temperature and weight; the batch `x` itself is not looked at."""
        return read, self.temperature, self.weight

    def targets(
        self, rows: Int[Array, " batch"], views: Int[Array, " batch"]
    ) -> Float[Array, "batch classes"]:
        """The soft targets (log probabilities, float32) of a batch: row `rows[b]` of
        the training set, seen in view `views[b]`, read as whole rows (an accelerator
        reads rows fast, single entries slowly), each image's view kept by a select."""
        answers = self.log_probs[rows].astype(jnp.float32)  # (batch, views, classes)
        seen = jnp.arange(answers.shape[1])[None, :, None] == views[:, None, None]
        return jax.lax.stop_gradient(jnp.where(seen, answers, 0.0).sum(axis=1))


def table_pays(config: TrainConfig, total_steps: int, num_train: int) -> bool:
    """Whether a teacher's table (its answers on every view of every training image,
    computed once) costs fewer teacher passes than running it on every step's batch of
    a run of `total_steps`: a finite set of views, and a run that shows the teachers more
    images than the table holds (the default recipe: 9,360 x 512 against 60,000 x 50)."""
    views = finite_views(augmentation_of(config))
    shown = total_steps * config.batch_size
    return views is not None and shown >= num_train * len(views)
