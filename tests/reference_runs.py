"""Short runs whose results are pinned in `tests/data/reference_runs.json`.

The file is written by `python tests/reference_runs.py`;
`tests/test_reference.py` checks that the same configs still give the same numbers:
bit for bit on the machine kind that wrote it, to float32 rounding elsewhere (another
CPU runs other XLA kernels).
"""

import hashlib
import json
import sys
from pathlib import Path

import numpy as np

REFERENCE = Path(__file__).parent / "data" / "reference_runs.json"
CONFIGS = {
    # Without augmentation (the default recipe moves and mirrors): pinned as written.
    "recipe_with_validation": dict(
        steps=30, log_every=10, hidden_sizes=[64], validation_size=5000, shift=0, mirror=False
    ),
    "codelab_bf16": dict(
        steps=20,
        log_every=10,
        batch_size=512,
        learning_rate=3e-3,
        weight_decay=1e-4,
        schedule="constant",
        label_smoothing=0.0,
        precision="p=f32,c=bf16,o=f32",
        shift=0,
        mirror=False,
    ),
}
HISTORY_KEYS = (
    "step",
    "epoch",
    "steps",
    "loss",
    "accuracy",
    "grad_norm",
    "skipped",
    "learning_rate",
    "valid_loss",
    "valid_accuracy",
)


def machine() -> dict:
    import jax
    import jaxlib

    from harness import machine_facts

    facts = machine_facts()
    return {
        "cpu": facts["cpu"],
        "flags": facts["flags"],
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
    }


def run(name: str, data, config: dict | None = None) -> dict:
    """The pinned numbers of `CONFIGS[name]`'s run (or of `config`, a changed copy)."""
    import jax.tree_util as jtu

    import eqx_fmnist as ef

    config = ef.TrainConfig.from_dict(CONFIGS[name] if config is None else config)
    splits = ef.split_data(data, validation_size=config.validation_size)
    result = ef.fit(config, splits)
    leaves = [np.asarray(x) for x in jtu.tree_leaves(result.model) if hasattr(x, "dtype")]
    digest = hashlib.sha256(b"".join(x.tobytes() for x in leaves)).hexdigest()
    return {
        "history": [{k: h[k] for k in HISTORY_KEYS if k in h} for h in result.history],
        "test_loss": result.test.loss,
        "test_accuracy": result.test.accuracy,
        "params_sha256": digest,
        "param_sums": [float(np.sum(x, dtype=np.float64)) for x in leaves],
    }


def main() -> None:
    import eqx_fmnist as ef

    data = ef.load_fashion_mnist(download=False)
    out = {"machine": machine(), "runs": {name: run(name, data) for name in CONFIGS}}
    REFERENCE.parent.mkdir(exist_ok=True)
    REFERENCE.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {REFERENCE}", file=sys.stderr)


if __name__ == "__main__":
    main()
