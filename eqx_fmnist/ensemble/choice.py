"""Members as a choice: which models train as one program, on which rows, and how each is
validated. Each kind knows its member configs; [`fit`][eqx_fmnist.train.fit] takes one as
`members`, and a checkpoint records it
([`members_from`][eqx_fmnist.ensemble.choice.members_from] rebuilds it on resume).

| kind | members | rows | validated on |
|---|---|---|---|
| `Seeds(n)` | one per seed | all | the validation split |
| `Grid(values, seeds)` | every point x seed | all | the validation split |
| `Folds(k)` | one per fold | every fold but its own | its own fold (pooled: out-of-fold) |
| `Bootstrap(n)` | one per sample | a resample of `n` rows | the validation split |
| `Listed(configs)` | the configs given | all | the validation split |
"""

import dataclasses
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..config import TrainConfig
from ..dataset import ArrayDataset
from ..evaluation import EvalResult
from ..hooks import Members
from ..model import Model
from ..state import BATCHED, check_members, select_members
from ..subsets import Subsets, bootstrap, kfold

MAX_SEED = 2**32 - 1
"""The largest seed a PRNG key takes (`TrainConfig.seed`)."""


def member_seeds(config: TrainConfig, seeds: int | Sequence[int]) -> tuple[int, ...]:
    """`seeds` as a tuple: a count `n` means `config.seed, ..., config.seed + n - 1`."""
    if isinstance(seeds, bool):
        raise ValueError(f"`seeds` must be a positive count or a list of seeds, got {seeds}.")
    if isinstance(seeds, int):
        if seeds <= 0:
            raise ValueError(f"`seeds` must be a positive count or a list of seeds, got {seeds}.")
        if config.seed + seeds - 1 > MAX_SEED:
            raise ValueError(
                f"{seeds} seeds from seed {config.seed} run past the largest seed, {MAX_SEED:,} "
                f"(2**32 - 1): start at seed {MAX_SEED - seeds + 1:,} or lower."
            )
        return tuple(range(config.seed, config.seed + seeds))
    seeds = tuple(seeds)
    if not seeds or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        raise ValueError(f"`seeds` must be a positive count or a list of ints, got {seeds!r}.")
    if len(set(seeds)) < len(seeds):
        raise ValueError(f"`seeds` repeats a seed ({seeds}): repeated members are identical.")
    return seeds


def grid_configs(
    config: TrainConfig, grid: Mapping[str, Sequence[Any]], seeds: int | Sequence[int]
) -> tuple[list[dict[str, float]], tuple[int, ...], list[TrainConfig]]:
    """`(points, seeds, configs)` of a sweep: every grid point (a dict of the swept
    values, in the grid's order), the seeds, and one config per point x seed, point-major.

    **Raises:**

    `ValueError` for a grid name that is not a `TrainConfig` field, one that cannot be
    batched (it changes the program: hidden sizes, batch size, ...), or an empty or
    invalid list of values, or one that lists a value twice.
    """
    if not grid:
        raise ValueError(f"the grid is empty; sweep some of {', '.join(BATCHED)}.")
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    for name, values in grid.items():
        if name not in fields:
            raise ValueError(
                f"{name!r} is not a TrainConfig field; a sweep's grid may hold "
                f"{', '.join(BATCHED)}."
            )
        if name not in BATCHED:
            how = "train one seeds ensemble per value" if name != "seed" else "use `seeds`"
            raise ValueError(
                f"{name!r} cannot be swept inside one program: it changes the program's "
                f"shapes or structure (only {', '.join(BATCHED)} are arrays in the "
                f"state); {how} instead."
            )
        if isinstance(values, str) or not isinstance(values, Sequence) or not values:
            raise ValueError(f"grid[{name!r}] must be a non-empty list of numbers, got {values!r}.")
        twice = sorted({v for v in values if list(values).count(v) > 1})
        if twice:  # the same member trained and ranked twice
            raise ValueError(
                f"grid[{name!r}] lists {', '.join(map(str, twice))} more than once; give "
                "each value once."
            )
    seeds = member_seeds(config, seeds)
    names = list(grid)
    points = [dict(zip(names, combo, strict=True)) for combo in itertools.product(*grid.values())]
    configs = [config.with_changes(**p, seed=s) for p in points for s in seeds]  # validates
    return points, seeds, configs


def grid_of(configs: Sequence[TrainConfig]) -> tuple[dict[str, list[float]], tuple[int, ...]]:
    """`(grid, seeds)` of a sweep's member configs (as a checkpoint lists them), such that
    [`grid_configs`][eqx_fmnist.ensemble.grid_configs] gives the same members back.

    **Raises:**

    `ValueError` when the members are not a grid x seeds in that order.
    """
    varying = [n for n in BATCHED if len({getattr(c, n) for c in configs}) > 1]

    def first_change(name: str) -> int:  # the outermost grid axis changes last
        return next(
            i for i, c in enumerate(configs) if getattr(c, name) != getattr(configs[0], name)
        )

    names = sorted(varying, key=first_change, reverse=True) or [BATCHED[0]]
    grid = {n: list(dict.fromkeys(getattr(c, n) for c in configs)) for n in names}
    seeds = tuple(dict.fromkeys(c.seed for c in configs))
    if grid_configs(configs[0], grid, seeds)[2] != list(configs):
        raise ValueError("these members are not a sweep's grid x seeds; resume them as members.")
    return grid, seeds


def _checked(configs: Sequence[TrainConfig]) -> tuple[TrainConfig, ...]:
    configs = tuple(configs)
    check_members(configs)
    return configs


def _seeds(seeds: int | Sequence[int]) -> int | tuple[int, ...]:
    """A count or the seeds, checked as [`member_seeds`][eqx_fmnist.ensemble.member_seeds]
    checks them, with no config at hand."""
    member_seeds(TrainConfig(), seeds)
    return seeds if isinstance(seeds, int) else tuple(seeds)


def _count(name: str, value: int, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"`{name}` must be an int of at least {low}, but got {value!r}.")


def _on_own_rows(
    evaluated: Callable[[ArrayDataset | None, Model], EvalResult | None],
    train: ArrayDataset,
    validation: ArrayDataset | None,
    rows: Subsets | None,
) -> Callable[[Model], EvalResult | None]:
    """Each member evaluated on the rows it never trained on, pooled (out-of-fold) with
    each member's figures in `members`; without held-out rows, the validation split."""
    if rows is None or rows.held_out is None:
        return lambda model: evaluated(validation, model)
    if validation is not None:
        raise ValueError(
            "members validated on their own folds take no validation split: make the "
            "splits with validation_size=0."
        )
    folds = [train.take(h) for h in rows.held_out]

    def pooled(model: Model) -> EvalResult:
        each = [evaluated(f, select_members(model, i)) for i, f in enumerate(folds)]
        each = [e for e in each if e is not None]
        n = sum(e.count for e in each)
        loss = sum(e.loss * e.count for e in each) / n
        accuracy = sum(e.accuracy * e.count for e in each) / n
        return EvalResult(loss, accuracy, n, tuple(each))

    return pooled


class _OnTheirRows(Members):
    """Members that may train on rows of their own: each is validated on the rows it
    held out (folds), else on the validation split."""

    def validator(
        self,
        evaluated: Callable[[ArrayDataset | None, Model], EvalResult | None],
        train: ArrayDataset,
        validation: ArrayDataset | None,
        rows: Subsets | None,
    ) -> Callable[[Model], EvalResult | None]:
        return _on_own_rows(evaluated, train, validation, rows)


@dataclasses.dataclass(frozen=True)
class Seeds(Members):
    """One member per seed: a count `n` (`config.seed` to `config.seed + n - 1`) or the
    seeds themselves."""

    seeds: int | Sequence[int] = 5
    kind = "seeds"

    def __post_init__(self):
        object.__setattr__(self, "seeds", _seeds(self.seeds))

    def configs(self, config: TrainConfig) -> tuple[TrainConfig, ...]:
        seeds = member_seeds(config, self.seeds)
        return _checked([config.with_changes(seed=s) for s in seeds])

    def to_dict(self) -> dict[str, Any]:
        seeds = self.seeds if isinstance(self.seeds, int) else list(self.seeds)
        return {"kind": self.kind, "seeds": seeds}


@dataclasses.dataclass(frozen=True)
class Grid(Members):
    """Every point of a grid of `learning_rate`, `weight_decay` and `label_smoothing`
    values x `seeds`, point-major (see [`grid_configs`][eqx_fmnist.ensemble.grid_configs])."""

    values: Mapping[str, Sequence[float]]
    seeds: int | Sequence[int] = 2
    kind = "grid"

    def __post_init__(self):
        object.__setattr__(self, "seeds", _seeds(self.seeds))
        grid_configs(TrainConfig(), self.values, self.seeds)  # names, types and values

    def configs(self, config: TrainConfig) -> tuple[TrainConfig, ...]:
        return _checked(grid_configs(config, self.values, self.seeds)[2])

    def answering(self, count: int, summary: Callable[[], dict[str, Any]]) -> list[int]:
        """The winner's members, one per seed: the point a finished sweep's summary
        ranks first (its `best`). `ValueError` for an index that names no point."""
        points = math.prod(len(v) for v in self.values.values())
        best = summary()["best"]["index"]
        if type(best) is not int or not 0 <= best < points:
            raise ValueError(f"`best.index` is {best!r}, not one of {points} points")
        per = count // points
        return list(range(best * per, (best + 1) * per))

    def to_dict(self) -> dict[str, Any]:
        seeds = self.seeds if isinstance(self.seeds, int) else list(self.seeds)
        values = {k: list(v) for k, v in self.values.items()}
        return {"kind": self.kind, "values": values, "seeds": seeds}


@dataclasses.dataclass(frozen=True)
class Folds(_OnTheirRows):
    """K-fold cross-validation: member `i` (seed `config.seed + i`) trains on every fold
    but fold `i` and is validated on fold `i`; the folds are dealt by `config.seed`."""

    k: int = 5
    kind = "folds"

    def __post_init__(self):
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 2:
            raise ValueError(f"cross-validation needs at least 2 folds, but got {self.k!r}.")

    def configs(self, config: TrainConfig) -> tuple[TrainConfig, ...]:
        return _checked([config.with_changes(seed=s) for s in member_seeds(config, self.k)])

    def rows(self, num_train: int, config: TrainConfig) -> Subsets:
        """The folds (`ValueError` for a config that holds out a validation split: each
        fold validates its own member)."""
        if config.validation_size:
            raise ValueError(
                "cross-validation validates each member on its own fold: give "
                "validation_size=0 (drop --validation-size)."
            )
        subsets = kfold(num_train, self.k, seed=config.seed)
        if subsets.size < config.batch_size:
            raise ValueError(
                f"{self.k} folds of {num_train:,} images leave {subsets.size:,} to train "
                f"on, fewer than a batch of {config.batch_size}."
            )
        return subsets

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "k": self.k}


@dataclasses.dataclass(frozen=True)
class Bootstrap(_OnTheirRows):
    """`n` members (seeds `config.seed` on), each trained on its own resample of the
    training rows (drawn with replacement, by `config.seed`)."""

    n: int = 5
    kind = "bootstrap"

    def __post_init__(self):
        _count("n", self.n, 1)

    def configs(self, config: TrainConfig) -> tuple[TrainConfig, ...]:
        return _checked([config.with_changes(seed=s) for s in member_seeds(config, self.n)])

    def rows(self, num_train: int, config: TrainConfig) -> Subsets:
        return bootstrap(num_train, self.n, seed=config.seed)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "n": self.n}


@dataclasses.dataclass(frozen=True)
class Listed(_OnTheirRows):
    """The member configs given (say, a sweep's best points retrained): they must agree
    with the run's config on every field but `seed` and the batched numbers. `rows`:
    a row table of one's own ([`Subsets`][eqx_fmnist.subsets.Subsets]: each member's
    training rows and, if it has them, held-out rows to be validated on). Defaults to
    `None`: every member trains on every row."""

    members: Sequence[TrainConfig]
    table: Subsets | None = None
    kind = "listed"

    def __post_init__(self):
        object.__setattr__(self, "members", _checked(self.members))
        if self.table is not None and self.table.num_members != len(self.members):
            raise ValueError(
                f"`table` holds {self.table.num_members} members' rows, but "
                f"{len(self.members)} configs were given: give one config per row."
            )

    def configs(self, config: TrainConfig) -> tuple[TrainConfig, ...]:
        return _checked((config, *self.members))[1:]  # the run's settings are theirs

    def rows(self, num_train: int, config: TrainConfig) -> Subsets | None:
        t = self.table
        if t is not None and t.train.size and not 0 <= t.train.min() <= t.train.max() < num_train:
            raise ValueError(f"`table` names rows outside the {num_train:,} training examples.")
        return t


def members_from(record: Mapping[str, Any] | None, configs: Sequence[TrainConfig]) -> Members:
    """The choice a checkpoint recorded (`record`, `Members.to_dict`'s), for its member
    `configs`; a checkpoint written before choices were recorded gives `Grid` when its
    members differ in numbers, else `Seeds`."""
    kind = (record or {}).get("kind")
    if kind == "folds":
        return Folds(len(configs))
    if kind == "bootstrap":
        return Bootstrap(len(configs))
    varying = any(len({getattr(c, n) for c in configs}) > 1 for n in BATCHED)
    if kind == "grid" or (kind is None and varying):
        try:
            return Grid(*grid_of(configs))
        except ValueError:
            return Listed(tuple(configs))
    if kind == "listed" or varying:
        return Listed(tuple(configs))
    return Seeds(tuple(c.seed for c in configs))
