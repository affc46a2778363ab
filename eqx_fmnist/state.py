"""The training state: everything that changes during training, as one PyTree."""

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
import optax
from jaxtyping import Array, Int, PRNGKeyArray, PyTree

from .config import TrainConfig, make_optimizer
from .model import MLP
from .precision import FLOAT32, DynamicLossScale, LossScale, NoOpLossScale, Policy


class TrainState(eqx.Module):
    """Everything that changes during training, as one PyTree.

    `optimizer`, `policy` and `label_smoothing` are static: they are part of the
    compiled program, not its inputs.
    """

    model: MLP
    opt_state: PyTree
    step: Int[Array, ""]
    key: PRNGKeyArray
    loss_scale: LossScale
    optimizer: optax.GradientTransformation = eqx.field(static=True)
    policy: Policy = eqx.field(static=True)
    label_smoothing: float = eqx.field(static=True)
    skip_nonfinite: bool = eqx.field(static=True)

    def __init__(
        self,
        model: MLP,
        optimizer: optax.GradientTransformation,
        *,
        key: PRNGKeyArray,
        policy: Policy = FLOAT32,
        loss_scale: LossScale | None = None,
        label_smoothing: float = 0.0,
        skip_nonfinite: bool = False,
    ):
        """**Arguments:**

        - `model`: the model; its inexact arrays are the trained parameters.
        - `optimizer`: an Optax transformation, initialised here on the parameters.
        - `key`: the run's PRNG key (it orders the batches).
        - `policy`: the precision policy. Defaults to float32.
        - `loss_scale`: defaults to a dynamic loss scale when the policy computes in
            float16, and to no scaling otherwise.
        - `label_smoothing`: of the cross-entropy. Defaults to `0`.
        - `skip_nonfinite`: skip (do not apply) a step whose loss or gradients are not
            finite. Defaults to `False`; float16 loss scaling skips overflows regardless.
        """
        model = policy.cast_to_param(model)
        self.model = model
        self.opt_state = optimizer.init(eqx.filter(model, eqx.is_inexact_array))
        self.step = jnp.array(0, jnp.int32)
        self.key = key
        if loss_scale is None:
            loss_scale = DynamicLossScale() if policy.needs_loss_scale else NoOpLossScale()
        self.loss_scale = loss_scale
        self.optimizer = optimizer
        self.policy = policy
        self.label_smoothing = float(label_smoothing)
        self.skip_nonfinite = bool(skip_nonfinite)


def init_state(config: TrainConfig, num_train: int) -> TrainState:
    """The initial [`TrainState`][eqx_fmnist.state.TrainState] of a run.

    **Arguments:**

    - `config`: the run's config; its seed gives the weights and the batch order.
    - `num_train`: training examples (the schedule's length depends on it).
    """
    return _init_state(config, config.total_steps(num_train))


@eqx.filter_jit
def _init_state(config: TrainConfig, total_steps: int) -> TrainState:
    # One compiled program (kept by the persistent compilation cache): eagerly, each of
    # the initialisers' small operations is dispatched, and compiled, on its own.
    model_key, data_key = jr.split(jr.PRNGKey(config.seed))
    return TrainState(
        MLP(hidden_sizes=config.hidden_sizes, key=model_key),
        make_optimizer(config, total_steps),
        key=data_key,
        policy=config.policy,
        label_smoothing=config.label_smoothing,
        skip_nonfinite=config.on_nonfinite == "skip",
    )
