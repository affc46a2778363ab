"""Many models in one compiled program: ensembles of seeds, and hyperparameter sweeps.

The modules: `choice` (members as a choice: `Seeds`, `Grid`, `Folds`, `Bootstrap`,
`Listed`, each knowing its configs, rows and validation; the seeds and grids they are
made of), `members` (`fit_ensemble`; `fit` checks that the members fit in memory), `grid` (`sweep`, `SweepResult`),
`cv` (`cross_validate`, `CrossValidation`). The wrappers choose the members and call
[`fit`][eqx_fmnist.train.fit], whose stacked state
([`init_members`][eqx_fmnist.state.init_members]) runs every chunk of steps under
`eqx.filter_vmap`: one compile for all members, one host read per interval, the
training set shared. Member `s` of [`fit_ensemble`][eqx_fmnist.ensemble.fit_ensemble]
is the run `fit(config.with_changes(seed=s))` would have made, up to the rounding of
batched matrix products. [`sweep`][eqx_fmnist.ensemble.sweep] ranks on a validation
split and touches the test set once, for the winner.
"""

from ..hooks import Members as Members
from .choice import (
    Bootstrap as Bootstrap,
    Folds as Folds,
    Grid as Grid,
    Listed as Listed,
    Seeds as Seeds,
    grid_configs as grid_configs,
    grid_of as grid_of,
    member_seeds as member_seeds,
    members_from as members_from,
)
from .cv import CrossValidation as CrossValidation, cross_validate as cross_validate
from .grid import SweepResult as SweepResult, sweep as sweep
from .members import fit_ensemble as fit_ensemble
