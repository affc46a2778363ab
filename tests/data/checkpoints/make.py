"""Write the checkpoint fixtures of one format, with the code of a commit that wrote it.

Run from a checkout of that commit, with the real data installed (see README.md here):

    PYTHONPATH=/path/to/old/checkout python tests/data/checkpoints/make.py OUT

It writes into OUT: `run/` (what `eqx-fmnist train --steps 6 --hidden 8` wrote, less
its figures), `members/` (the same with `--seeds 2`), and the library's own view of a
run stopped halfway: `halfway.eqx` (6 of 12 steps, saved with `save_checkpoint`) and
`straight.npz` (the parameters of the same 12 steps run without stopping). Only calls
every format's code has are used (and `fit`'s data in the form that code takes).
"""

import subprocess
import sys
from pathlib import Path

import numpy as np

import eqx_fmnist as ef

out = Path(sys.argv[1])
data = ef.load_fashion_mnist()
common = ["--steps", "6", "--log-every", "3", "--hidden", "8", "--data-dir", str(data.source)]
for name, extra in [("run", []), ("members", ["--seeds", "2"])]:
    subprocess.run(
        [sys.executable, "-m", "eqx_fmnist", "train", *common, *extra, "--out", str(out / name)],
        check=True,
    )
    for png in (out / name).glob("*.png"):
        png.unlink()

config = ef.TrainConfig(steps=12, log_every=6, hidden_sizes=(8,))
datasets = ef.to_datasets(data)
train = datasets[0]
state = ef.init_state(config, len(train))
state, _ = ef.train_steps(state, train, batch_size=config.batch_size, num_steps=6)
from eqx_fmnist.checkpoint import save_checkpoint  # noqa: E402  (not re-exported by every version)

save_checkpoint(out / "halfway.eqx", state, config, num_train=len(train))
# `fit` took `(train, test)` until it took only `Splits`; every format's code has one of the two.
straight = ef.fit(config, ef.Splits(*datasets) if hasattr(ef, "Splits") else datasets)
leaves = [np.asarray(x) for x in __import__("jax").tree.leaves(straight.model)]
np.savez(out / "straight.npz", *leaves, test_accuracy=straight.test.accuracy)
print("wrote", out)
