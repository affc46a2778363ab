"""Distillation: one student learns from a teacher ensemble inside its own compiled step.

A [`Teacher`][eqx_fmnist.distill.Teacher] is a trained model or a stack of members (the
teachers, vmapped), with the temperature that softens its probabilities and the weight
of its soft targets. Given one, [`fit`][eqx_fmnist.train.fit] runs the teachers' forward
pass on each step's own (augmented) batch and trains the student on

    weight * T^2 * CE(teacher's softened mean probability, softmax(student / T))
    + (1 - weight) * CE(labels, softmax(student))

(Hinton et al. 2015; the `T^2` keeps the soft term's gradients the size of the hard
term's as `T` changes). Nothing of the teachers is stored in the student's state.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from .config import TrainConfig
from .data import IMAGE_SIZE, NUM_CLASSES
from .model import MLP, ensemble_log_probs, per_member
from .precision import FLOAT32, Policy


class Teacher(eqx.Module):
    """A trained model or stack of members that a student learns from."""

    model: MLP
    policy: Policy = eqx.field(static=True)
    temperature: float = eqx.field(static=True)
    weight: float = eqx.field(static=True)

    def __init__(
        self,
        model: MLP,
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
        if not isinstance(model, MLP):
            raise TypeError(f"a teacher must be an MLP (or a stack of them), not {type(model)}.")
        if model.in_size != IMAGE_SIZE or model.out_size != NUM_CLASSES:
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
    def for_student(cls, model: MLP, config: TrainConfig, *, policy: Policy = FLOAT32):
        """The teacher of a student trained with `config` (its `distill_temperature` and
        `distill_weight`), checked to have the student's architecture.

        **Raises:**

        `ValueError` naming both architectures when they differ.
        """
        if isinstance(model, MLP) and model.hidden_sizes != tuple(config.hidden_sizes):
            raise ValueError(
                f"the teacher's hidden layers are {model.hidden_sizes}, the student's "
                f"{tuple(config.hidden_sizes)}: distil into the teacher's architecture "
                f"(--hidden {','.join(map(str, model.hidden_sizes))})."
            )
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
            return jax.vmap(lambda xi: m(xi, policy=self.policy))(x)

        stacked = per_member(logits, model)
        return ensemble_log_probs(stacked.astype(jnp.float32) / self.temperature)
