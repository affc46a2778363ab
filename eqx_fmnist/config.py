"""Every choice of a training run, in one place: [`TrainConfig`][eqx_fmnist.config.TrainConfig].

Its fields are the only list of a run's options: each field's type says what it
accepts (a few strings: a `Literal`), its metadata holds the help text and any extra
flag. The JSON checks (`from_dict`), the command line's flags and which fields a
checkpoint must agree on to be continued are derived from them.

The schedule and the optimiser built from a config are in `eqx_fmnist.optim`
([`make_schedule`][eqx_fmnist.optim.make_schedule],
[`make_optimizer`][eqx_fmnist.optim.make_optimizer]).

The module is the one list of choices, kept whole: its fields,
their checks and the recipes that fill them in are read together.
"""

import dataclasses
import json
import os
import typing
from pathlib import Path
from typing import Any, Literal

from .augment import Move, ShiftDistribution, augmentation_of
from .checks import (
    COVERAGE,
    check_coverage,
    coerce_json,
    number,
    plain,
    positive_int,
    split_optional,
)
from .dataset import steps_per_epoch
from .precision import Policy
from .views import TTA, TTA_VIEWS

Schedule = Literal["constant", "cosine", "warmup_cosine"]
"""The learning-rate schedules."""
ModelKind = Literal["mlp", "cnn"]
"""The library's models: the [`MLP`][eqx_fmnist.model.MLP] and the
[`CNN`][eqx_fmnist.model.CNN] (convolutions, then an MLP head)."""
OnNonfinite = Literal["raise", "skip"]
"""What a NaN or infinite loss or gradient does to a run."""

BatchedHyperparameter = Literal["learning_rate", "weight_decay", "label_smoothing"]
"""The numbers members of one compiled program may differ in (besides `seed`): they are
arrays in the training state, so a grid of them needs no recompiling."""

DEFAULT_EPOCHS = 80
BEST_EPOCHS = 400
"""The length of [`TrainConfig.best()`][eqx_fmnist.config.TrainConfig.best]."""
TEACHER_EPOCHS = 50
"""The length of [`TrainConfig.teacher()`][eqx_fmnist.config.TrainConfig.teacher]."""
PATIENT_EPOCHS = 5_000
"""`distilled()`'s length on an accelerator (`--distilled --epochs 5000`): 0.9212 on a TPU
v5e (`benchmarks/results/tpu-v5-lite/distill_ablation.md`); 12.5 times the training of 400."""
DISTILL_WEIGHT = 0.7
"""The soft targets' share of the loss in `distilled()`."""
DISTILL_TEMPERATURE = 2.0
"""The soft targets' temperature in `distilled()`."""

MAX_STEPS = 2**31 - 1
"""The most steps a run takes (and the ceiling of every count of steps or epochs): the
training state counts its steps in an int32."""
STEP_COUNTER = "the step counter is an int32"


def _field(default: Any, help: str, *, flags: tuple[str, ...] = (), state: bool = False):
    """A config field. `help` is its one-line description (command line and docs);
    `flags` extra command-line spellings; `state` marks a field that shapes the training
    state, which a checkpoint must share to be continued."""
    return dataclasses.field(
        default=default, metadata={"help": help, "flags": flags, "state": state}
    )


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Every choice of a training run, validated when made.

    The defaults are the library's quick recipe for the 784-256-128-10 MLP (under a
    minute on two CPU cores): 80 epochs of warmup-cosine AdamW (peak 3e-3, weight decay
    5e-2, batch 512), label smoothing 0.1, each image moved by up to 2 pixels (small
    moves more often) and half of them mirrored; each lever measured alone on a
    validation split (`benchmarks/results/levers.md`).
    [`best()`][eqx_fmnist.config.TrainConfig.best] is the strongest recipe alone,
    [`distilled()`][eqx_fmnist.config.TrainConfig.distilled] the strongest MLP (with a
    CNN teacher), [`codelab()`][eqx_fmnist.config.TrainConfig.codelab] the codelab's
    run. Each field's help text is in its metadata; the command line shows it.

    **Fields:**

    - `epochs` / `steps`: the run's length; give one (with neither, `epochs = 80`:
        `DEFAULT_EPOCHS`).
    - `batch_size`, `learning_rate`, `weight_decay`, `schedule`, `warmup_steps`,
        `grad_clip`, `label_smoothing`: the optimiser and the loss.
    - `hidden_sizes`, `precision`: the model and its [`Policy`][eqx_fmnist.precision.Policy].
    - `model`, `channels`: `"mlp"`, or `"cnn"`: a [`CNN`][eqx_fmnist.model.CNN] with
        these channels and a head of `hidden_sizes` (the MLP's teacher).
    - `decay_biases`: AdamW's weight decay on the biases too (`False`: weights alone).
    - `seed`: the initial weights, the batch order and the augmentation's choices.
    - `shift`, `mirror`, `erase`, `mixup`: on-device augmentation of each batch
        ([`Augmentation`][eqx_fmnist.augment.Augmentation]).
    - `ema_decay`: keep an exponential moving average of the weights, which
        evaluation, calibration, export and prediction use.
    - `distill_temperature`, `distill_weight`: how a student learns from a teacher
        given to [`fit`][eqx_fmnist.train.fit] (ignored without one).
    - `log_every`: steps per logging interval (one compiled call, one host read);
        `None`: an epoch.
    - `validation_size`: training examples held out (a fixed random split) to tune on.
    - `calibration_size`: training examples held out (another) to fit the temperature
        and the trust flag after training; `0`: none, the probabilities raw.

        The loop does not read them: the caller makes the splits
        ([`split_data`][eqx_fmnist.dataset.split_data]) and calibrates after training
        ([`eqx_fmnist.runs`](runs.md) does); `fit` checks its `Splits` have their sizes.
    - `coverage`, `per_class_sets`: the conformal prediction sets fitted on the
        calibration split ([`fit_sets`][eqx_fmnist.conformal.fit_sets]).
    - `tta`: the test-time views wherever the run is evaluated, calibrated and
        exported ([`TTA_VIEWS`][eqx_fmnist.views.TTA_VIEWS]).
    - `devices`: train over this many devices: one model's batch split over them (data
        parallel), or members split over them, whole members on each with the whole
        batch (the members must divide over them).
    - `shared_batches`: members train on the same batches in the same order, moved and
        mirrored alike: the batches of the run's first member, prepared once a step
        for all of them (members that train on rows of their own, folds, cannot).
    - `on_nonfinite`: `"raise"` stops `fit` with a
        [`NonFiniteError`][eqx_fmnist.intervals.NonFiniteError] naming the step, before
        the bad interval is reported; `"skip"` skips such steps in the compiled loop and
        counts them (`skipped`). The float16 loss scaler's skips are never an error.
    """

    epochs: int | None = _field(
        None, f"passes over the training set; give epochs or steps (default: {DEFAULT_EPOCHS})"
    )
    steps: int | None = _field(None, "optimiser steps, instead of epochs")
    batch_size: int = _field(512, "examples per step")
    learning_rate: float = _field(3e-3, "peak AdamW learning rate", flags=("--lr",))
    weight_decay: float = _field(5e-2, "AdamW's decoupled weight decay")
    schedule: Schedule = _field("warmup_cosine", "learning-rate schedule")
    warmup_steps: int | None = _field(
        None, "linear warm-up steps of warmup_cosine (default: 5% of the run)"
    )
    hidden_sizes: tuple[int, ...] = _field(
        (256, 128), "hidden layer widths, e.g. 256,128", flags=("--hidden",), state=True
    )
    model: ModelKind = _field(
        "mlp", "the model: mlp, or cnn (convolutions, then a head of hidden_sizes)", state=True
    )
    channels: tuple[int, ...] = _field(
        (32, 64), "with --model cnn: channels of each 3x3 convolution, e.g. 32,64", state=True
    )
    decay_biases: bool = _field(
        True,
        "AdamW's weight decay on biases too (--no-decay-biases: weights only)",
        state=True,
    )
    precision: str = _field(
        "p=f32,c=f32,o=f32", "precision policy, e.g. p=f32,c=bf16,o=f32", state=True
    )
    seed: int = _field(0, "seeds the initial weights and the batch order")
    log_every: int | None = _field(
        None, "steps per logging interval and compiled call (default: one epoch)"
    )
    grad_clip: float | None = _field(
        None, "clip gradients to this global norm (default: no clipping)", state=True
    )
    label_smoothing: float = _field(0.1, "label smoothing of the cross-entropy", state=True)
    validation_size: int = _field(
        0, "training images held out as a fixed validation split (0: train on all)"
    )
    calibration_size: int = _field(
        0,
        "training images held out to fit the temperature and the trust flag (0: none)",
        flags=("--calibrate",),
    )
    coverage: float = _field(
        COVERAGE, "with --calibrate: prediction sets hold the true class this often"
    )
    per_class_sets: bool = _field(False, "with --calibrate: one set threshold per class")
    tta: TTA = _field(
        "none",
        "average each answer over the image and its mirror (mirror), "
        "and 1-pixel moves (shifts); none: the image alone",
    )
    shift: int = _field(
        2, "move each training image by up to this many pixels in x and y (0: none)"
    )
    shift_distribution: ShiftDistribution = _field(
        "triangular", "how each move is drawn: uniform, or triangular (small moves more often)"
    )
    mirror: bool = _field(True, "mirror half the training images left-right")
    erase: float = _field(
        0.0, "probability of zeroing a random rectangle of each training image (0: never)"
    )
    mixup: float = _field(
        0.0, "mix training images in pairs, shares ~ Beta(mixup, mixup) (0: none)"
    )
    ema_decay: float = _field(
        0.0,
        "keep an exponential moving average of the weights with this decay, and use it (0: none)",
        flags=("--ema",),
        state=True,
    )
    distill_temperature: float = _field(
        1.0, "with a teacher: the temperature that softens its and the student's probabilities"
    )
    distill_weight: float = _field(
        1.0, "with a teacher: the weight of its soft targets (1 - weight: the labels')"
    )
    devices: int = _field(
        1, "devices: one model's batch split over them, or members split over them"
    )
    shared_batches: bool = _field(
        False,
        "members train on the same batches, moved and mirrored alike (common random "
        "numbers: a sweep's points compared on the same data); one model: no change",
    )
    on_nonfinite: OnNonfinite = _field(
        "raise", "a NaN/inf loss or gradient stops the run (raise) or skips the step", state=True
    )

    def __post_init__(self):
        for f in dataclasses.fields(self):  # numpy's numbers as numbers: np.int64(20) is 20
            object.__setattr__(self, f.name, plain(getattr(self, f.name)))
        if self.epochs is not None and self.steps is not None:
            raise ValueError(
                f"give `epochs` or `steps`, not both (got epochs={self.epochs}, "
                f"steps={self.steps})."
            )
        if self.epochs is None and self.steps is None:
            object.__setattr__(self, "epochs", DEFAULT_EPOCHS)
        for name in ("epochs", "steps", "warmup_steps", "log_every"):
            if getattr(self, name) is not None:
                positive_int(name, getattr(self, name), high=MAX_STEPS, why=STEP_COUNTER)
        positive_int("batch_size", self.batch_size)
        number("learning_rate", self.learning_rate, low=0.0, low_open=True)
        number("weight_decay", self.weight_decay, low=0.0)
        number("label_smoothing", self.label_smoothing, low=0.0, high=1.0)
        if self.label_smoothing == 1.0:
            raise ValueError(
                "`label_smoothing` must be below 1 (1 makes every target uniform: there is "
                "nothing to learn), e.g. 0.1, but got 1.0."
            )
        augmentation_of(self)  # checks shift, mirror, erase and mixup
        number("ema_decay", self.ema_decay, low=0.0, high=1.0)
        if self.ema_decay == 1.0:
            raise ValueError("`ema_decay` must be below 1 (1 would never move the average).")
        number("distill_temperature", self.distill_temperature, low=0.0, low_open=True)
        number("distill_weight", self.distill_weight, low=0.0, high=1.0)
        if self.grad_clip is not None:
            number("grad_clip", self.grad_clip, low=0.0, low_open=True)
        for f in dataclasses.fields(self):
            choices = literal_choices(f.name)
            if choices and getattr(self, f.name) not in choices:
                raise ValueError(
                    f"`{f.name}` must be one of {', '.join(choices)}, "
                    f"but got {getattr(self, f.name)!r}."
                )
        self._check_sizes()
        positive_int("seed", self.seed, low=0, high=2**32 - 1)  # a PRNG key's seed
        positive_int("devices", self.devices)
        if self.batch_size % self.devices:
            lower = self.batch_size - self.batch_size % self.devices
            raise ValueError(
                f"`batch_size` {self.batch_size} does not split evenly over {self.devices} "
                f"`devices`; use a multiple of {self.devices} such as {max(lower, self.devices)} "
                f"or {lower + self.devices}."
            )
        self._check_held_out()
        try:
            self.policy  # noqa: B018  (parses the precision string)
        except ValueError as e:
            raise ValueError(f"`precision`: {e}") from None

    def _check_sizes(self) -> None:
        """`hidden_sizes` (at least one: the trust flag and the exports measure a hidden
        layer) and `channels` (one to three), a list made a tuple."""
        for name, example, most in (("hidden_sizes", "(256, 128)", 0), ("channels", "(32, 64)", 3)):
            value = getattr(self, name)
            if isinstance(value, list):
                object.__setattr__(self, name, value := tuple(value))
            ok = isinstance(value, tuple) and all(type(v) is int and v > 0 for v in value)
            if not ok or not value or (most and len(value) > most):
                count = "one to three" if most else "a non-empty tuple of"
                raise ValueError(
                    f"`{name}` must be {count} positive ints such as {example}, but got {value!r}."
                )

    def _check_held_out(self) -> None:
        for name in ("validation_size", "calibration_size"):
            positive_int(name, getattr(self, name), low=0)
        check_coverage(self.coverage)  # the prediction sets' rule
        if (self.coverage != COVERAGE or self.per_class_sets) and not self.calibration_size:
            raise ValueError(
                "`coverage` and `per_class_sets` shape the prediction sets fitted on "
                "a calibration split: hold one out too (--calibrate 5000)."
            )

    @property
    def policy(self) -> Policy:
        """The [`Policy`][eqx_fmnist.precision.Policy] named by `precision`."""
        return Policy.from_string(self.precision)

    @property
    def views(self) -> tuple[Move, ...] | None:
        """The test-time views `tta` names (`TTA_VIEWS`), or `None` for the image alone:
        what every evaluation, calibration and export of this run computes."""
        return TTA_VIEWS[self.tta]

    @classmethod
    def codelab(cls, **overrides) -> "TrainConfig":
        """The codelab's reference run: AdamW at a constant 3e-3, weight decay 1e-4, batch
        512, 400 steps, float32, no label smoothing or augmentation, a log every 50 steps."""
        base = cls(steps=400, batch_size=512, learning_rate=3e-3, weight_decay=1e-4)
        plain = dict(schedule="constant", label_smoothing=0.0, shift=0, mirror=False)
        return base.with_changes(log_every=50, **plain).with_changes(**overrides)

    @classmethod
    def best(cls, **overrides) -> "TrainConfig":
        """The strongest MLP of this architecture trained alone: the default recipe,
        `BEST_EPOCHS` (400) epochs long, about three minutes of training on two CPU
        cores for 0.7 points of test accuracy over the default's 80 epochs
        (`benchmarks/results/robust_accuracy.md`)."""
        return cls(epochs=BEST_EPOCHS).with_changes(**overrides)

    @classmethod
    def teacher(cls, **overrides) -> "TrainConfig":
        """The MLP's teacher in [`distilled()`][eqx_fmnist.config.TrainConfig.distilled]:
        the default recipe on the [`CNN`][eqx_fmnist.model.CNN] (`model="cnn"`),
        `TEACHER_EPOCHS` (50) epochs."""
        return cls(model="cnn", epochs=TEACHER_EPOCHS).with_changes(**overrides)

    @classmethod
    def distilled(cls, **overrides) -> "TrainConfig":
        """The strongest plain MLP: [`best()`][eqx_fmnist.config.TrainConfig.best] that
        learns from a teacher ([`teacher()`][eqx_fmnist.config.TrainConfig.teacher], a
        CNN) too: the soft targets weigh `DISTILL_WEIGHT` of the loss at temperature
        `DISTILL_TEMPERATURE`. `fit` needs the teacher (`teacher=`); `eqx-fmnist train
        --distilled` trains one first. On an accelerator: `epochs=PATIENT_EPOCHS`."""
        soft = dict(distill_weight=DISTILL_WEIGHT, distill_temperature=DISTILL_TEMPERATURE)
        return cls.best(**soft).with_changes(**overrides)

    def with_changes(self, **changes) -> "TrainConfig":
        """A copy with some fields changed; giving `epochs` clears `steps` and the other
        way round, so a length given overrides the length it replaces."""
        if "steps" in changes:
            changes.setdefault("epochs", None)
        if "epochs" in changes:
            changes.setdefault("steps", None)
        return dataclasses.replace(self, **changes)

    def total_steps(self, num_train: int) -> int:
        """Optimiser steps of the whole run for a training set of `num_train` examples."""
        if self.steps is not None:
            return self.steps
        assert self.epochs is not None, "a TrainConfig has `steps` or `epochs`"
        return self.epochs * steps_per_epoch(num_train, self.batch_size)

    @classmethod
    def state_fields(cls) -> tuple[str, ...]:
        """The fields that shape the training state: a checkpoint continues only under a
        config that agrees with it on these."""
        return tuple(name for name, f in _FIELDS.items() if f.metadata["state"])

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (tuples become lists)."""
        d = dataclasses.asdict(self)
        d["hidden_sizes"] = list(self.hidden_sizes)
        d["channels"] = list(self.channels)
        return d

    @classmethod
    def from_dict(cls, d: Any) -> "TrainConfig":
        """Rebuild from [`to_dict`][eqx_fmnist.config.TrainConfig.to_dict]'s output (or
        any JSON object naming some fields), checking each value against its field's type.

        **Raises:**

        `ValueError` naming unknown keys (and listing the valid ones) or a value of the
        wrong type.
        """
        if not isinstance(d, dict):
            raise ValueError(
                f"a TrainConfig must come from a JSON object, but got {type(d).__name__}."
            )
        unknown = sorted(set(d) - set(_FIELDS))
        if unknown:
            raise ValueError(
                f"unknown TrainConfig fields {unknown}; valid fields are {list(_FIELDS)}."
            )
        return cls(**{name: coerce(name, value) for name, value in d.items()})

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_json(cls, text: str) -> "TrainConfig":
        try:
            d = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"TrainConfig JSON is not valid JSON: {e}") from e
        except RecursionError:  # JSON nested thousands deep
            raise ValueError("nested too deeply to be a config.") from None
        return cls.from_dict(d)

    @classmethod
    def read(cls, path: str | os.PathLike) -> "TrainConfig":
        """The config in the JSON file `path` (`config.json`, `--config`); `ValueError`
        naming the file and what is wrong (missing, not JSON, an unknown field, a value
        of the wrong type)."""
        try:
            return cls.from_json(Path(path).read_text())
        except OSError as e:
            raise ValueError(f"cannot read the config file {path}: {e.strerror or e}.") from None
        except ValueError as e:
            raise ValueError(f"config file {path}: {e}") from None


_FIELDS = {f.name: f for f in dataclasses.fields(TrainConfig)}
_HINTS = typing.get_type_hints(TrainConfig)


def field_type(name: str) -> tuple[Any, bool]:
    """`(type, optional)` of field `name`: its type without `None`, and whether `None`
    is allowed."""
    return split_optional(_HINTS[name])


def literal_choices(name: str) -> tuple[str, ...]:
    """The valid values of a `Literal` field, from its type; `()` for other fields."""
    kind, _ = field_type(name)
    return typing.get_args(kind) if typing.get_origin(kind) is Literal else ()


def coerce(name: str, value: Any) -> Any:
    """Check a JSON value against field `name`'s type (`ValueError`, never `TypeError`),
    converting where JSON cannot say it (an int for a float, a list for a tuple)."""
    return coerce_json(f"TrainConfig field `{name}`", _HINTS[name], value)
