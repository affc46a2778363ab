"""The learning-rate schedule and the optimiser a [`TrainConfig`][eqx_fmnist.config.TrainConfig]
asks for: the recipe's AdamW with its learning rate and weight decay injected as arrays
(`optax.inject_hyperparams`), for one run and for every member of a sweep alike, the
default of `fit(optimizer=)`; and the one way a step applies any Optax transformation
([`apply_optimizer`][eqx_fmnist.optim.apply_optimizer]), the recipe's or yours."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import optax

from .config import TrainConfig
from .precision import astype, optax_promotion


def make_schedule(config: TrainConfig, total_steps: int) -> optax.Schedule:
    """The learning rate as a function of the step, from the config's `schedule`, for
    a peak of `1`: the rate of step `t` is `learning_rate * schedule(t)`, where the peak
    `learning_rate` is an array of the training state (so that members of a sweep may
    differ in it inside one program).

    **Arguments:**

    - `config`: the run's config (its `schedule` and `warmup_steps`).
    - `total_steps`: the run's length, over which `"cosine"` and `"warmup_cosine"` decay.
    """
    if config.schedule == "constant":
        return optax.constant_schedule(1.0)
    if config.schedule == "cosine":
        return optax.cosine_decay_schedule(1.0, total_steps)
    warmup = config.warmup_steps or max(1, round(0.05 * total_steps))
    # At least one step of the cosine: Optax refuses a decay of no steps (a one-step run,
    # or a warm-up as long as the run, is then all decay or one step of warm-up short).
    return optax.warmup_cosine_decay_schedule(
        0.0, 1.0, min(warmup, total_steps - 1), total_steps, end_value=0.0
    )


def make_optimizer(config: TrainConfig) -> optax.GradientTransformation:
    """AdamW (with optional global-norm clipping first), its learning rate and weight
    decay injected: they live as arrays in the optimiser's state
    (`opt_state.hyperparams`), and each training step writes the rate of that step
    there before the update ([`train_step`][eqx_fmnist.step.train_step]). One path for
    one run and for the members of a sweep, whose numbers differ.

    **Returns:**

    An Optax `GradientTransformation`, initialised with the config's peak learning rate
    and weight decay.
    """
    clip = () if config.grad_clip is None else (optax.clip_by_global_norm(config.grad_clip),)
    # Without `decay_biases`, only arrays of two or more axes (weights, kernels) decay:
    # the optimiser sees one member's parameters, even inside a stack's program.
    mask = None if config.decay_biases else _weights_only

    def adamw(learning_rate, weight_decay):
        decayed = optax.adamw(learning_rate, weight_decay=weight_decay, mask=mask)
        return optax.chain(*clip, decayed)

    return optax.inject_hyperparams(adamw)(
        learning_rate=config.learning_rate, weight_decay=config.weight_decay
    )


def cast_like(tree, like):
    """`tree` with each array leaf in the dtype of the matching leaf of `like`.

    Optax computes its updates and moments in float32, so parameters stored in bfloat16
    or float16 take their update rounded to their own dtype, and the optimiser state
    keeps the dtypes it was initialised with: a compiled loop's carry keeps its types.
    """
    return jtu.tree_map(lambda t, ref: astype(t, ref.dtype) if eqx.is_array(t) else t, tree, like)


def optimizer_count(opt_state, step):
    """The optimiser's own step count where its state keeps one (a skipped step does
    not move it), else `step`, the state's (a chain's state is a tuple, whose `count` is
    the tuple's method)."""
    count = getattr(opt_state, "count", None)
    return count if isinstance(count, jax.Array) else step


def apply_optimizer(settings, opt_state, hyperparams, grads, model):
    """One update of `model` by the optimiser of a state's `settings`: `(model, opt_state,
    rate)`. The recipe's AdamW (settings with a schedule) has this step's rate
    (`learning_rate * schedule(count)`) and weight decay written into its injected
    hyperparameters first; any other Optax transformation runs as it is, its schedule its
    own. `rate`: the rate this step used, where the optimiser's state tells it (NaN where
    it does not). Updates and the optimiser's state keep the dtypes of the parameters
    and of the state they were made for ([`cast_like`][eqx_fmnist.optim.cast_like])."""
    params = eqx.filter(model, eqx.is_inexact_array)
    before = opt_state
    with optax_promotion():
        if settings.schedule is not None:
            # The schedule follows the optimiser's own count (a skipped step does not move it).
            rate = hyperparams["learning_rate"] * settings.schedule(opt_state.count)
            injected = {"learning_rate": rate, "weight_decay": hyperparams["weight_decay"]}
            opt_state = opt_state._replace(hyperparams=injected)
        updates, new_opt_state = settings.optimizer.update(grads, opt_state, params)
    told = getattr(new_opt_state, "hyperparams", {})  # as this update set them
    rate = told.get("learning_rate", jnp.nan) if isinstance(told, dict) else jnp.nan
    model = eqx.apply_updates(model, cast_like(updates, params))
    return model, cast_like(new_opt_state, before), jnp.asarray(rate, jnp.float32)


def _weights_only(params):
    """AdamW's decay mask without `decay_biases`: `True` for arrays of two or more axes."""
    return jtu.tree_map(lambda x: x.ndim > 1, params)


def averaged(average, model, count: jax.Array, ema_decay: float):
    """The weight average after a step (`None` for a run that keeps none): `average +
    (1 - d) (model - average)`, with the decay `d = min(ema_decay, (1 + t) / (10 + t))`
    warming up over the first steps (t: the optimiser's `count`) so that early weights do
    not linger."""
    if average is None:
        return None
    t = count.astype(jnp.float32)
    decay = jnp.minimum(ema_decay, (1.0 + t) / (10.0 + t))
    new = eqx.filter(model, eqx.is_inexact_array)
    old = eqx.filter(average, eqx.is_inexact_array)
    with optax_promotion():
        kept = cast_like(optax.incremental_update(new, old, 1.0 - decay), old)
    return eqx.combine(kept, average)
