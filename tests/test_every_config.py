"""Every configuration the library accepts trains; the rest are refused with one line.

Hypothesis draws `TrainConfig`s with every field set to one of its legal values: each
must train a few steps of a tiny model under the suite's strict promotion with finite
metrics, save a checkpoint that loads bit for bit, and export an artifact that passes
its check; and `eqx-fmnist train` builds the same config from the flags that spell it.
Every illegal value of every field is refused at construction, in one line that names
the field. `EQX_FMNIST_CONFIG_EXAMPLES` sets how many configs are drawn
(CI draws more than the default).
"""

import dataclasses
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

EXAMPLES = int(os.environ.get("EQX_FMNIST_CONFIG_EXAMPLES", "6"))

LEGAL = {
    "steps": [1, 3],
    "batch_size": [16, 32],
    "learning_rate": [3e-3, 1e-2],
    "weight_decay": [0.0, 5e-2],
    "schedule": ["warmup_cosine", "cosine", "constant"],
    "warmup_steps": [None, 1, 5],
    "hidden_sizes": [(8,), (8, 4)],
    "model": ["mlp", "cnn"],
    "channels": [(4,), (2, 4)],
    "decay_biases": [False, True],
    "precision": [
        "float32",
        "bfloat16",
        "p=f32,c=bf16,o=f32",
        "p=f16,c=f16,o=f32",
        "p=f32,c=f16,o=f32",
    ],
    "seed": [0, 3],
    "log_every": [None, 1, 2],
    "grad_clip": [None, 1.0],
    "label_smoothing": [0.0, 0.1],
    "validation_size": [0, 32],
    "calibration_size": [0, 32],
    "shift": [0, 1, 2],
    "shift_distribution": ["uniform", "triangular"],
    "mirror": [False, True],
    "erase": [0.0, 0.5],
    "mixup": [0.0, 0.4],
    "ema_decay": [0.0, 0.9],
    "on_nonfinite": ["raise", "skip"],
    # The prediction sets' choices; without a calibration split they are refused (see
    # tests/test_conformal.py), so a draw without one leaves them at their defaults.
    "coverage": [0.9, 0.95],
    "per_class_sets": [False, True],
    "tta": ["none", "mirror", "shifts"],
    # Members only (one model trains as without it; tests/test_members_devices.py).
    "shared_batches": [False, True],
}
ILLEGAL = [
    ("steps", 0),
    ("epochs", -1),
    ("batch_size", 0),
    ("learning_rate", 0.0),
    ("learning_rate", float("nan")),
    ("weight_decay", -0.1),
    ("warmup_steps", 0),
    ("hidden_sizes", (0,)),
    ("hidden_sizes", ()),
    ("model", "vit"),
    ("channels", ()),
    ("channels", (0, 4)),
    ("channels", (4, 4, 4, 4)),
    ("precision", "p=f32,c=f8"),
    ("log_every", 0),
    ("grad_clip", 0.0),
    ("label_smoothing", 1.5),
    ("validation_size", -1),
    ("calibration_size", -5),
    ("shift", -1),
    ("shift", 28),
    ("erase", 2.0),
    ("mixup", -1.0),
    ("ema_decay", 1.0),
    ("distill_temperature", 0.0),
    ("distill_weight", 1.5),
    ("devices", 0),
    ("coverage", 1.0),
    ("coverage", 0.0),
    ("tta", "flip"),
]


def test_the_legal_values_cover_every_field():
    import eqx_fmnist as ef

    drawn = set(LEGAL) | {"epochs", "distill_temperature", "distill_weight", "devices"}
    assert drawn == {f.name for f in dataclasses.fields(ef.TrainConfig)}


@pytest.mark.parametrize("field, value", ILLEGAL, ids=lambda x: str(x))
def test_an_illegal_value_is_refused_in_one_line_naming_its_field(field, value):
    import eqx_fmnist as ef

    fields = {"steps": 2, field: value} if field != "epochs" else {field: value}
    with pytest.raises((ValueError, TypeError)) as e:
        ef.TrainConfig(**fields)
    message = str(e.value)
    if "typechecking parameter" in message:  # the suite's runtime checker came first
        assert f"parameter '{field}'" in message
    else:
        assert "\n" not in message.strip() and f"`{field}`" in message, message


def config_from_flags(fields: dict):
    """The config `eqx-fmnist train` builds from the flags that spell `fields`."""
    from eqx_fmnist.cli import build_parser
    from eqx_fmnist.cli.flags import config_from_args

    argv = ["train"]
    for name, value in fields.items():
        flag = "--" + name.replace("_", "-")
        if value is None:
            continue  # a flag left out: the default, which is None for these fields
        if isinstance(value, bool):
            argv.append(flag if value else "--no-" + name.replace("_", "-"))
        elif isinstance(value, tuple):
            argv += [flag, ",".join(map(str, value))]
        else:
            argv += [flag, str(value)]
    return config_from_args(build_parser().parse_args(argv))


@pytest.fixture(scope="module")
def tiny_data():
    import eqx_fmnist as ef
    from eqx_fmnist.dataset import ArrayDataset

    from helpers import synthetic_arrays

    a = synthetic_arrays(n_train=192, n_test=48)
    train = ArrayDataset(a["train_images"], a["train_labels"])
    return ef, train, ArrayDataset(a["test_images"], a["test_labels"])


@pytest.mark.slow  # each draw compiles its own programs: about 4 s a draw
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(st.fixed_dictionaries({k: st.sampled_from(v) for k, v in LEGAL.items()}))
def test_every_accepted_config_trains_saves_loads_and_exports(tiny_data, tmp_path, fields):
    from eqx_fmnist.checkpoint import load_checkpoint, save_checkpoint
    from eqx_fmnist.export import export_model

    from helpers import same_arrays

    ef, train, test = tiny_data
    if not fields["calibration_size"]:
        fields = fields | {"coverage": 0.9, "per_class_sets": False}
    config = ef.TrainConfig(**fields)
    assert config_from_flags(fields) == config  # the command line reaches every config
    splits = ef.split_data(
        (train, test),
        validation_size=config.validation_size,
        calibration_size=config.calibration_size,
    )
    result = ef.fit(config, splits)
    assert result.state.global_step == config.total_steps(len(splits.train))
    for record in result.history:  # a skipped (float16 overflow) step is not a failure
        assert np.isfinite(record["loss"]) or record["skipped"], (config, record)
    assert result.test is not None and 0.0 <= result.test.accuracy <= 1.0
    path = save_checkpoint(tmp_path / "c.eqx", result.state, config, num_train=len(splits.train))
    loaded = load_checkpoint(path)
    assert dataclasses.asdict(loaded.config) == dataclasses.asdict(config)
    assert same_arrays(loaded.state, result.state)
    manifest = export_model(
        result.state.eval_model,
        result.state.policy,
        config,
        tmp_path / "m.stablehlo",
        check_images=np.asarray(test.images),
    )
    assert (tmp_path / "m.stablehlo").is_file() and manifest["format"] == "stablehlo"
    assert manifest["tta"]["name"] == config.tta  # the config's views, inside the artifact
