"""Members that train on different rows of one training set: K-fold complements and
bootstrap samples, as index tables.

Members of one program share the training set on the device; a member with a subset
carries only a table of the rows it may train on, `(members, m)` int32. Its step `s`
draws the positions [`batch_indices`][eqx_fmnist.dataset.batch_indices] gives for `m`
examples and looks them up in its row of the table, so its batch order is its own keyed
order over its own examples, the same order as a single run on
`train.take(table[i])`, computed inside the compiled step like every batch. Nothing of
the data is copied, and the table, a pure function of `(n, k, seed)`, is rebuilt
exactly on resume.
"""

import dataclasses

import numpy as np
from jaxtyping import Int

FOLD_SEED = 0x5EED_F01D
"""Folded with the caller's seed into the permutation that deals the examples to folds."""


@dataclasses.dataclass(frozen=True)
class Subsets:
    """Which rows of a shared training set each member trains on, and is validated on.

    **Fields:**

    - `train`: `(members, m)` int32, the rows member `i` trains on (one size for all:
        the step is the same program for every member).
    - `held_out`: for folds, member `i`'s own fold (the rows it never trains on), one
        array per member; `None` for bootstrap samples.
    - `kind`: `"folds"` or `"bootstrap"`.
    """

    train: Int[np.ndarray, "members m"]
    held_out: tuple[Int[np.ndarray, " _h"], ...] | None  # sizes differ by one
    kind: str

    @property
    def num_members(self) -> int:
        return int(self.train.shape[0])

    @property
    def size(self) -> int:
        """`m`: the rows each member trains on (an epoch is `m // batch_size` steps)."""
        return int(self.train.shape[1])


def kfold(n: int, k: int, *, seed: int = 0) -> Subsets:
    """`k` folds of `0..n-1`: a seeded permutation dealt into `k` parts whose sizes differ
    by at most one; member `i` trains on the other folds and is validated on fold `i`.
    Every example is in exactly one fold. When `k` does not divide `n`, the larger
    complements drop their last row so that every member trains on `n - ceil(n / k)`
    rows (that row is still held out by its own fold's member).

    **Raises:**

    `ValueError` for `k` below 2, or folds of fewer than one example.
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 2:
        raise ValueError(f"cross-validation needs at least 2 folds, but got {k!r}.")
    if n < k:
        raise ValueError(f"{k} folds of {n} examples would leave some folds empty.")
    order = np.random.default_rng([FOLD_SEED, seed]).permutation(n)
    folds = tuple(np.sort(part).astype(np.int32) for part in np.array_split(order, k))
    m = n - max(len(f) for f in folds)
    owner = np.empty(n, np.int32)
    for i, fold in enumerate(folds):
        owner[fold] = i
    train = np.stack([np.flatnonzero(owner != i)[:m] for i in range(k)]).astype(np.int32)
    return Subsets(train, folds, "folds")


def bootstrap(n: int, members: int, *, seed: int = 0) -> Subsets:
    """`members` bootstrap samples of `0..n-1`: each `n` rows drawn with replacement
    (about 63% of the examples, some more than once); no held-out rows."""
    if isinstance(members, bool) or not isinstance(members, int) or members < 1:
        raise ValueError(f"`members` must be a positive int, but got {members!r}.")
    rng = np.random.default_rng([FOLD_SEED, seed, 1])
    return Subsets(rng.integers(0, n, (members, n)).astype(np.int32), None, "bootstrap")
