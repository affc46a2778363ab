"""Many models in one compiled program: ensembles of seeds, and hyperparameter sweeps.

The modules: `members` (the engine, `fit_ensemble`), `sweep` (grids, `SweepResult`).

The members' states are stacked on a leading axis
([`init_members`][eqx_fmnist.state.init_members]) and every chunk of steps runs under
`eqx.filter_vmap` ([`train_steps`][eqx_fmnist.step.train_steps]`(members=True)`): one
compile for all members, one host read per interval, the training set shared. Member
`s` of [`fit_ensemble`][eqx_fmnist.ensemble.fit_ensemble] is the run
`fit(config.with_changes(seed=s))` would have made, up to the rounding of batched
matrix products. [`sweep`][eqx_fmnist.ensemble.sweep] adds the numbers of
[`BATCHED`][eqx_fmnist.state.BATCHED] as arrays in the state, so a whole grid is one
program; it ranks on a validation split and touches the test set once, for the winner.
"""

from .members import (
    MEMORY_FRACTION as MEMORY_FRACTION,
    EnsembleResult as EnsembleResult,
    check_memory as check_memory,
    fit_ensemble as fit_ensemble,
    fit_members as fit_members,
    member_seeds as member_seeds,
    select_members as select_members,
)
from .sweep import (
    SweepResult as SweepResult,
    grid_configs as grid_configs,
    grid_of as grid_of,
    sweep as sweep,
)
