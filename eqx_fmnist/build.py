"""What a run is built from besides its config: the model it starts from (the config's,
or one of yours: [`ModelSource`][eqx_fmnist.build.ModelSource]), built for the data's
[`Examples`][eqx_fmnist.build.Examples] (their width and classes), and the checks that
refuse, before any work, a model, an optimiser, a loss or data a run cannot be made
of."""

import dataclasses
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import optax
from jaxtyping import PRNGKeyArray

from .augment import augmentation_of
from .config import TrainConfig
from .dataset import ArrayDataset
from .fashion import IMAGE_SHAPE, IMAGE_SIZE, NUM_CLASSES
from .model import CNN, MLP, Model, takes
from .precision import FLOAT32

ModelSource = Model | Callable[..., Model] | None
"""What `model=` takes: a model, a constructor called as `constructor(key=key)`, or
`None` for the config's."""


@dataclasses.dataclass(frozen=True)
class Examples:
    """What a run's model is built for, from its training set: the length of one
    example's flat row (`features`) and the number of classes. Fashion-MNIST's are
    `(784, 10)`, the default."""

    features: int = IMAGE_SIZE
    num_classes: int = NUM_CLASSES


FASHION = Examples()
"""Fashion-MNIST's [`Examples`][eqx_fmnist.build.Examples]: 784 features, 10 classes."""


def build_model(
    config: TrainConfig,
    key: PRNGKeyArray,
    model: ModelSource = None,
    examples: Examples = FASHION,
) -> Model:
    """A run's initial model.

    **Arguments:**

    - `config`: its `model` (`"mlp"` or `"cnn"`), `hidden_sizes` and `channels`.
    - `key`: the PRNG key for the weights.
    - `model`: one of your own instead: an `eqx.Module` (its weights are the initial
        ones; `key` is unused) or a constructor (a class or function) called as
        `model(key=key)`, the way Equinox layers take their key. It must map one
        example (a flat row of the data's `features`) to the data's `num_classes`
        logits, and trains in float32. Defaults to `None`: the config's.
    - `examples`: the data's [`Examples`][eqx_fmnist.build.Examples]: the library's
        MLP takes `features` inputs and gives `num_classes` logits. Defaults to
        Fashion-MNIST's.
    """
    if isinstance(model, eqx.Module):
        return model
    if model is not None:
        return model(key=key)
    if config.model == "cnn":
        return CNN(config.channels, config.hidden_sizes, examples.num_classes, key=key)
    return MLP(examples.features, config.hidden_sizes, examples.num_classes, key=key)


def check_model(config: TrainConfig, model: ModelSource, examples: Examples) -> None:
    """Raise `ValueError` unless the run's model can train under `config` on data of
    these `examples`: the CNN only on 28 x 28 images; a model of your own (`model=`)
    gives `num_classes` logits for one example of `features` inputs, in float32, with
    the config's `model` left at its default."""
    if model is None:
        if config.model == "cnn" and examples.features != IMAGE_SIZE:
            raise ValueError(
                f"the CNN convolves 28 x 28 images, not examples of {examples.features} "
                "values: train an MLP (model='mlp') or a model of your own."
            )
        return
    if config.model != "mlp":
        raise ValueError(
            f"give a model of your own (model=...) or `model={config.model!r}` in the config, "
            "not both."
        )
    if config.policy != FLOAT32:
        raise ValueError(
            f"a model of your own trains in float32, not `precision={config.precision!r}`: "
            "the library's MLP and CNN apply a precision policy; use p=f32,c=f32,o=f32."
        )
    made = eqx.filter_eval_shape(build_model, config, jr.key(0), model)
    x = jax.ShapeDtypeStruct((examples.features,), jnp.float32)
    call = lambda m, x: m(x, key=jr.key(0)) if takes(m, "key") else m(x)  # noqa: E731
    shape = eqx.filter_eval_shape(call, made, x).shape
    if shape != (examples.num_classes,):
        raise ValueError(
            f"the model maps one example of shape ({examples.features},) to logits of shape "
            f"{shape}; it must give one logit per class, ({examples.num_classes},)."
        )
    if config.calibration_size and not hasattr(made, "hidden"):
        raise ValueError(
            "calibration fits the trust flag on a model's hidden activations: give the "
            "model a `hidden(x, *, policy)` method (a list of arrays), or train without "
            "--calibrate."
        )


def check_parts(
    config: TrainConfig,
    train: ArrayDataset,
    optimizer: object,
    loss: object,
    teacher: object,
) -> None:
    """Refuse, before any work (with `TypeError` or `ValueError`), what a run cannot be
    made of: an `optimizer` that is
    not an Optax transformation, a `loss` that is not callable or that would drop what
    only the recipe's loss computes (a teacher's term, mixup's mixed labels, a
    precision policy's forward pass), and augmentation of examples that are not
    28 x 28 images."""
    if optimizer is not None and not isinstance(optimizer, optax.GradientTransformation):
        raise TypeError(
            f"`optimizer` must be an Optax transformation (optax.adamw(...), optax.chain(...)), "
            f"not {type(optimizer).__name__}."
        )
    if loss is not None and not callable(loss):
        raise TypeError(f"`loss` must be a function loss(model, x, y, *, key), not {loss!r:.60}.")
    if loss is not None:
        recipe = {
            "teacher=": teacher is not None,
            f"mixup={config.mixup}": bool(config.mixup),
            f"precision={config.precision!r}": config.policy != FLOAT32,
        }
        if clash := [k for k, v in recipe.items() if v]:
            raise ValueError(
                f"a loss of your own replaces the recipe's, which {', '.join(clash)} needs: "
                "drop it, or leave `loss` at the recipe's."
            )
    if (augmentation_of(config).active or config.views) and train.shape != IMAGE_SHAPE:
        raise ValueError(
            f"the config's augmentation and test-time views move 28 x 28 images, not "
            f"examples of shape {train.shape}: train without shift, mirror, erase and tta."
        )
