"""`fit`: the one training loop, for one model and for a stack of members alike.

`fit` plans the run once ([`plan_run`][eqx_fmnist.intervals.plan_run]: total steps and
interval ends), runs one compiled chunk per logging interval
([`compile_steps`][eqx_fmnist.step.compile_steps]), reads its metrics once, appends a
[`History`][eqx_fmnist.intervals.History] record and calls the callbacks. A stacked state
([`init_members`][eqx_fmnist.state.init_members]) is the only difference between one
run and many: the same loop, the same [`TrainResult`][eqx_fmnist.train.TrainResult].
Splitting the data ([`split_data`][eqx_fmnist.dataset.split_data]), calibrating
([`calibrate`][eqx_fmnist.calibration.calibrate]), checkpoint cadence and run folders are
the caller's ([`eqx_fmnist.runs`](runs.md), the command line).

The module is kept whole: the loop, its result and the checks of its arguments, read in
one place.
"""

import concurrent.futures
import dataclasses
import itertools
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TypeVar

import jax
import jax.numpy as jnp
import numpy as np
import optax

from .augment import augmentation_of
from .build import FASHION, Examples, ModelSource, check_parts
from .checks import door
from .config import TrainConfig
from .dataset import ArrayDataset, Splits
from .distill import Teacher, table_pays
from .evaluation import EvalResult
from .hooks import Evaluation, Members, TestProgram, test_scores
from .intervals import Callback, History, Plan, check_finite, interval_record, plan_run
from .losses import Loss
from .model import Model
from .parallel import place, to_local
from .precision import Policy
from .state import TrainState, starting_state
from .step import CompiledSteps, lower_steps

logger = logging.getLogger(__name__)
T = TypeVar("T")

FIT_SECONDS = ("load", "compile", "steps", "host_reads", "validation", "callbacks", "test")
"""The parts of `fit`'s wall time in `TrainResult.seconds`, in the order they happen."""


@dataclasses.dataclass
class TrainResult:
    """What [`fit`][eqx_fmnist.train.fit] returns, for one run or many members alike.

    **Fields:**

    - `state`: the final [`TrainState`][eqx_fmnist.state.TrainState] (stacked for
        members).
    - `configs`: each member's config; one for a single run. `config` is the first.
    - `history`: one [`History`][eqx_fmnist.intervals.History] record per logging interval
        (for members: their means, each member's under `"members"`).
    - `test`: [`EvalResult`][eqx_fmnist.evaluation.EvalResult] on all test images (for
        members: the ensemble's, each member's in `test.members`), or `None`.
    - `validation`: the same on the validation split, or `None`.
    - `tested`: what `fit`'s `test_program` computed beside `test` in the same program
        (a run's test report: the test images' logits as they are, mirrored and moved),
        or `None`.
    - `seconds`: `fit`'s wall time by [`FIT_SECONDS`][eqx_fmnist.train.FIT_SECONDS]:
        `load` (data, state, a teacher's table), `compile`, `steps` (queueing the
        training calls, waiting for them), `host_reads`, `validation`, `callbacks` (a
        run folder's history and checkpoints, a progress bar), `test`.
    - `num_train`: the training examples each member's schedule was made for (what a
        checkpoint records to rebuild the state:
        [`save_result`][eqx_fmnist.checkpoint.save_result]).
    - `examples`: the training data's [`Examples`][eqx_fmnist.build.Examples] (its
        features and classes, which the library's model was built for).
    """

    state: TrainState
    configs: tuple[TrainConfig, ...]
    history: list[History]
    test: EvalResult | None
    validation: EvalResult | None
    seconds: dict[str, float]
    tested: np.ndarray | None = None
    num_train: int = 0
    examples: Examples = FASHION

    @property
    def compile_seconds(self) -> float:
        """Time spent compiling the training calls."""
        return self.seconds["compile"]

    @property
    def train_seconds(self) -> float:
        """The training calls' wall time, from the first call to the last interval's
        metrics read (the history's `seconds` summed; compiling excluded): what
        [`examples_per_sec`][eqx_fmnist.train.TrainResult.examples_per_sec] divides by."""
        return float(sum(h["seconds"] for h in self.history))

    @property
    def config(self) -> TrainConfig:
        """The run's config (member 0's: the settings all members share)."""
        return self.configs[0]

    @property
    def model(self) -> Model:
        """The trained model (stacked for members): the weight average when the run kept
        one (`ema_decay`), as evaluation used; this process's copy after multi-host
        training ([`to_local`][eqx_fmnist.parallel.to_local], the one place a model is
        made local: exports, reports and calibration take it as it is)."""
        return to_local(self.state.eval_model)

    @property
    def policy(self) -> Policy:
        return self.state.policy

    @property
    def num_members(self) -> int | None:
        """How many members trained, or `None` for one run."""
        return self.state.num_members

    @property
    def examples_per_sec(self) -> float:
        """Training throughput over the whole run, compile excluded (for a stack,
        model-examples per second)."""
        examples = (self.num_members or 1) * self.config.batch_size
        return examples * sum(h["steps"] for h in self.history) / max(self.train_seconds, 1e-9)


def compile_chunks(
    state: TrainState,
    train: ArrayDataset,
    plan: Plan,
    beside: Callable[[], T] | None = None,
    **settings,
) -> tuple[dict[int, CompiledSteps], T | None]:
    """The programs of the plan's chunk lengths from the state's step, by length, and
    `beside()`: each chunk is lowered in turn, then compiled (or loaded from the compile
    cache) in a thread of its own while `beside` (`fit`'s test program) runs here: XLA
    compiles, and a chip loads a program, without Python's lock. `settings`: those of
    [`lower_steps`][eqx_fmnist.step.lower_steps] but `donate` (never: a yielded state is
    used while the next chunk trains). `ValueError` for a state past the plan's end."""
    step = state.global_step
    if step > plan.total_steps:
        raise ValueError(
            f"the state is at step {step}, past this config's {plan.total_steps} steps."
        )
    size = plan.batch_size
    lowered = {
        k: lower_steps(state, train, batch_size=size, num_steps=k, donate=False, **settings)
        for k in plan.lengths(step)
    }
    with concurrent.futures.ThreadPoolExecutor(max(len(lowered), 1)) as pool:
        compiling = {k: pool.submit(make) for k, make in lowered.items()}
        made = None if beside is None else beside()
        return {k: future.result() for k, future in compiling.items()}, made


def run_chunks(
    state: TrainState,
    compiled: Mapping[int, CompiledSteps],
    plan: Plan,
    seconds: dict[str, float],
) -> Iterator[tuple[TrainState, int, dict[str, np.ndarray], float]]:
    """Run the plan's chunks from the state's step with the `compiled` programs of
    their lengths ([`compile_chunks`][eqx_fmnist.train.compile_chunks]), one call and
    one host read each, each call queued before the previous chunk's metrics are read:
    the device does not wait for the host's reads, checks and callbacks.

    Yields `(state, step, metrics, seconds)` after each chunk: the state after it, the
    global step reached, the chunk's metrics as numpy of shape `(members, steps)`, and
    its wall seconds from the previous chunk's read (the first: from its call);
    `seconds["steps"]` (queueing calls and waiting for them) and `seconds["host_reads"]`
    accumulate.
    """
    step = state.global_step
    pending = None
    last_read = time.perf_counter()
    for k in itertools.chain(plan.chunks(step), [None]):  # None: the last chunk's read
        queued = None
        if k is not None:
            t = time.perf_counter()
            state, metrics = compiled[k](state)  # queued behind the pending chunk
            seconds["steps"] += _since(t)
            step += k
            queued = (state, step, metrics)
        if pending is not None:
            done, at, read = pending
            t = time.perf_counter()
            jax.block_until_ready(read)
            ran = time.perf_counter()
            # The one host read of the interval (of every member, where members are
            # split over processes: gathered, as every process checks and logs them).
            read = jax.device_get(to_local(read))
            seconds["steps"] += ran - t
            seconds["host_reads"] += _since(ran)
            elapsed = _since(last_read)
            last_read = time.perf_counter()
            if done.num_members is None:
                read = {name: values[None] for name, values in read.items()}
            yield done, at, read, elapsed
        pending = queued


def _check_arguments(config: object, splits: object, members: object, callbacks: object) -> None:
    """`config` is one config, `splits` what `fit` takes, with the config's held-out
    sizes, `members` a choice and `callbacks` callables (any type is taken, so that the
    error names the argument and the fix before any work, without a type checker)."""
    if members is not None and not isinstance(members, Members):
        raise TypeError(
            f"`members` must be a Members choice (ef.ensemble.Seeds, Grid, Folds, Bootstrap, "
            f"or Listed(configs) for a list of configs), not {type(members).__name__}."
        )
    if not isinstance(callbacks, list | tuple) or not all(map(callable, callbacks)):
        raise TypeError(
            "`callback` must be a function `callback(record, state)` or a list of them, "
            f"not {callbacks!r:.60}."
        )
    if not isinstance(config, TrainConfig):
        raise TypeError(
            f"`fit` trains one config, not {type(config).__name__}; for members pass "
            "`members=ef.ensemble.Listed(configs)` (or Seeds, Grid, Folds, Bootstrap)."
        )
    if not isinstance(splits, Splits):
        raise TypeError(
            f"`fit` takes its data as `Splits`, not {type(splits).__name__}: pass "
            "`ef.split_data(data)` (a FashionMNIST or `(train, test)`) or "
            "`ef.Splits(train, test)`."
        )
    splits.check_held_out(config.validation_size, config.calibration_size)


def _intervals(chunks, plan: Plan, configs, validated, callbacks, state: TrainState, seconds):
    """Check, validate, record and report each interval's chunk: `(state, history,
    validation)` at the end (validated once more if no interval ran), the validations'
    and callbacks' time in `seconds`."""
    history = []
    v = None
    for state, step, metrics, elapsed in chunks:  # noqa: B020
        check_finite(metrics, first_step=step - metrics["loss"].shape[-1] + 1, configs=configs)
        records = plan.records(step, metrics, elapsed)
        t = time.perf_counter()
        if (v := validated(state.eval_model)) is not None:
            for r, m in zip(records, v.members or (v,), strict=True):
                r["valid_loss"], r["valid_accuracy"] = m.loss, m.accuracy
        seconds["validation"] += _since(t)
        t = time.perf_counter()
        history.append(record := interval_record(records))
        logger.info("step %d/%d loss %.4f", step, plan.total_steps, record["loss"])
        for cb in callbacks:
            cb(record, state)
        seconds["callbacks"] += _since(t)
    if v is None:  # no interval ran (a state already at the end)
        t = time.perf_counter()
        v = validated(state.eval_model)
        seconds["validation"] += _since(t)
    return state, history, v


def _since(t: float) -> float:  # seconds since `t`
    return time.perf_counter() - t


@door
def fit(
    config: TrainConfig,
    splits: Splits,
    *,
    model: ModelSource = None,
    optimizer: optax.GradientTransformation | None = None,
    loss: Loss | None = None,
    members: Members | None = None,
    state: TrainState | None = None,
    callback: Callback | Sequence[Callback] | None = None,
    teacher: Model | None = None,
    eval_batch_size: int = 1000,
    test_program: TestProgram = test_scores,
) -> TrainResult:
    """Train one model, or many members as one compiled program, and evaluate on the
    whole test set.

    **Arguments:**

    - `config`: the run (for members, the settings they share).
    - `splits`: the run's [`Splits`][eqx_fmnist.dataset.Splits], the one form `fit`
        takes its data in: from [`split_data`][eqx_fmnist.dataset.split_data] (a
        `FashionMNIST` or `(train, test)`, with the config's held-out sizes), or
        `ef.Splits(train, test)` from [`ArrayDataset`][eqx_fmnist.dataset.ArrayDataset]s
        of any examples' shape and number of classes. The whole `train` set is trained
        on; the `validation` set, if any, is evaluated after every interval
        (`valid_loss`, `valid_accuracy` in the history) and at the end; `test` (or
        `None`) at the end.
    - `model`: a model of your own to train instead of the config's: any `eqx.Module`
        that maps one example (a flat row of the data's `features`; `(784,)` for
        Fashion-MNIST, pixels in `[0, 1]`) to one logit per class, or its constructor,
        called as `model(key=key)` with a key from the config's seed (see
        [`build_model`][eqx_fmnist.build.build_model]; members need the constructor).
        Its non-array leaves (an activation, `Dropout`'s `inference`) are kept out of
        the compiled loop's carry; a model whose `__call__` takes `key=` gets a key of
        its own for each example and step; evaluation runs it in inference mode
        (`eqx.nn.inference_mode`). It trains in float32; load its checkpoint with
        `load_checkpoint(path, model=constructor)`. Defaults to `None`: the config's
        `model`, built for the data's shape and classes.
    - `optimizer`: any `optax.GradientTransformation` (`optax.lion(1e-4)`,
        `optax.chain(optax.clip_by_global_norm(1.0), optax.sgd(schedule))`, ...), its
        schedule its own; the config's `learning_rate`, `weight_decay`, `schedule` and
        `grad_clip` are then unused, and members may differ only in their seeds. Give
        it again to continue a saved run (`state=`) and to
        [`load_checkpoint`][eqx_fmnist.checkpoint.load_checkpoint]. Defaults to `None`:
        the recipe's AdamW ([`make_optimizer`][eqx_fmnist.optim.make_optimizer]).
    - `loss`: a [`Loss`][eqx_fmnist.losses.Loss] of your own, `loss(model, x, y, *,
        key) -> loss` or `-> (loss, aux)` over a batch; `aux`'s scalars land in the
        history (`accuracy` among them, else it is NaN). The config's `label_smoothing`
        is then unused; a teacher, mixup and a low-precision policy, which the recipe's
        loss computes, are refused. Compiled programs are keyed by the loss: another
        loss never runs a program traced for this one. Defaults to `None`: the recipe's
        ([`recipe_loss`][eqx_fmnist.losses.recipe_loss]).
    - `members`: many models as one compiled program, a
        [`Members`][eqx_fmnist.hooks.Members] choice: `ef.ensemble.Seeds(5)` (one per
        seed), `Grid(values, seeds)` (a sweep's points x seeds), `Folds(k)` (member `i`
        trains on every fold but fold `i` and is validated on it; `validation` pools
        them, out-of-fold, each fold's figures in its `members`), `Bootstrap(n)`
        (resampled rows) or `Listed(configs)`. Members may differ only in `seed`,
        `learning_rate`, `weight_decay`, `label_smoothing`. Defaults to `None`: one run.
    - `state`: a state to continue from (not donated), e.g. a
        [`load_checkpoint`][eqx_fmnist.checkpoint.load_checkpoint]'s, to its config's
        total steps. Defaults to [`init_state`][eqx_fmnist.state.init_state] (one
        config) or [`init_members`][eqx_fmnist.state.init_members] (several).
    - `callback`: one or more [`Callback`][eqx_fmnist.intervals.Callback]s, called as
        `callback(record, state)` after each logging interval, e.g. to draw a progress
        bar or keep a run folder. Defaults to `None`: none.
    - `teacher`: a trained model, or a stack of members (say, a
        [`fit_ensemble`][eqx_fmnist.ensemble.fit_ensemble] result's `model`), to distil:
        every step adds the cross-entropy against its mean probability on the step's
        batch, softened by the config's `distill_temperature` and weighted by its
        `distill_weight` (see [`Teacher`][eqx_fmnist.distill.Teacher]). Any model
        that maps an image to ten logits teaches: an MLP, a
        [`CNN`][eqx_fmnist.model.CNN], an ensemble. Defaults to `None`: the labels
        alone.
    - `eval_batch_size`: batch size of the evaluations. Defaults to `1000`.
    - `test_program`: what evaluates the test set when training ends, a
        [`TestProgram`][eqx_fmnist.hooks.TestProgram]: made (and timed) with the
        steps' programs, called once on the trained model; its test figures are
        `result.test`, and what it computed beside them `result.tested`. Defaults to [`test_scores`][eqx_fmnist.hooks.test_scores]: the
        test loss and accuracy.

    **Returns:**

    A [`TrainResult`][eqx_fmnist.train.TrainResult].

    **Raises:**

    [`NonFiniteError`][eqx_fmnist.intervals.NonFiniteError] (with `on_nonfinite="raise"`,
    naming the member), before the bad interval is recorded; `ValueError` for a `state`
    past the run's end or of the wrong number of members, splits whose held-out sets
    are not the config's sizes, a model that does not fit the data, or a loss beside
    what only the recipe's loss computes; `TypeError` for data that are not `Splits`,
    configs given where `members` is meant, or an optimiser that is not Optax's.

    !!! example

        ```python
        import eqx_fmnist as ef

        config = ef.TrainConfig(epochs=5)
        result = ef.fit(config, ef.split_data(ef.load_fashion_mnist()))
        result.test.accuracy  # 0.864 on all 10,000 test images (0.904 after 80 epochs)
        ```
    """
    start = time.perf_counter()
    callbacks = [] if callback is None else [callback] if callable(callback) else callback
    _check_arguments(config, splits, members, callbacks)
    check_parts(config, splits.train, optimizer, loss, teacher)
    callbacks = list(callbacks)
    configs = (config,) if members is None else members.configs(config)
    rows = None if members is None else members.rows(len(splits.train), config)
    num_train = len(splits.train) if rows is None else rows.size
    plan = plan_run(configs, num_train)  # the memory check, before anything is allocated
    own = {"model": model, "optimizer": optimizer, "own_loss": loss is not None}
    examples = Examples(splits.train.features, splits.train.num_classes)
    state = starting_state(configs, members is not None, state, num_train, **own, examples=examples)
    soft = None if teacher is None else Teacher.for_student(teacher, config, policy=state.policy)
    if soft is not None and table_pays(config, plan.total_steps, len(splits.train)):
        soft = soft.table(splits.train.images, augmentation_of(config)) or soft
    table = None if rows is None else jnp.asarray(rows.train, jnp.int32)
    if table is not None and config.shared_batches:
        raise ValueError(
            "members that train on rows of their own (folds, bootstrap) cannot share their "
            "batches: drop shared_batches."
        )
    placed = place(
        (splits.train, splits.validation, splits.test, soft),
        (state, table),
        devices=config.devices,
        members=members is not None,
    )
    mesh, (train, valid, test, soft), (state, table) = placed
    seconds: dict[str, float] = dict.fromkeys(FIT_SECONDS, 0.0)
    seconds["load"] = _since(start)

    evaluation = Evaluation(state.policy, config.views, eval_batch_size, mesh)
    validated = (members or Members()).validator(evaluation, train, valid, rows)
    # The test program is made beside the steps' programs, from the model they start
    # from; over several processes it runs on this process's own copies.
    t = time.perf_counter()
    alone = evaluation if jax.process_count() == 1 else dataclasses.replace(evaluation, mesh=None)
    like = to_local(state.eval_model)
    kw = dict(mesh=mesh, teacher=soft, subsets=table, loss=loss)
    made = None if test is None else lambda: test_program(like, to_local(test), alone)
    compiled, tested = compile_chunks(state, train, plan, made, **kw)
    seconds["compile"] += _since(t)
    chunks = run_chunks(state, compiled, plan, seconds)
    state, history, v = _intervals(chunks, plan, configs, validated, callbacks, state, seconds)
    t = time.perf_counter()
    scores, beside = (None, None) if tested is None else tested(to_local(state.eval_model))
    seconds["test"] = _since(t)
    return TrainResult(state, configs, history, scores, v, seconds, beside, num_train, examples)
