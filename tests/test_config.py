"""TrainConfig is the one list of a run's choices: JSON, flags and help come from it."""

import argparse
import dataclasses
import json
import typing

import jax.numpy as jnp
import jaxtyping
import pytest


def _fields():
    from eqx_fmnist.config import TrainConfig

    return dataclasses.fields(TrainConfig)


def test_every_field_has_help_a_flag_and_round_trips_through_json():
    from eqx_fmnist.cli import build_parser
    from eqx_fmnist.config import TrainConfig

    train_help = build_parser()._subparsers._group_actions[0].choices["train"].format_help()
    changed = TrainConfig(
        steps=7,
        batch_size=64,
        learning_rate=1e-3,
        weight_decay=0.0,
        schedule="cosine",
        warmup_steps=3,
        hidden_sizes=(8, 4),
        model="cnn",
        channels=(4,),
        decay_biases=False,
        precision="p=f32,c=bf16,o=f32",
        seed=3,
        log_every=2,
        grad_clip=1.0,
        label_smoothing=0.2,
        validation_size=100,
        devices=1,
        shared_batches=True,
        on_nonfinite="skip",
        calibration_size=50,
        shift=3,
        mirror=not TrainConfig().mirror,
        erase=0.25 + TrainConfig().erase,
        mixup=0.4 + TrainConfig().mixup,
        ema_decay=0.5 + TrainConfig().ema_decay / 2,
        distill_temperature=2.5,
        distill_weight=0.5,
        shift_distribution="uniform",
        coverage=0.95,
        per_class_sets=True,
        tta="shifts",
    )
    for f in _fields():
        assert f.metadata["help"], f.name
        assert f"--{f.name.replace('_', '-')}" in train_help, f.name
    # Every field differs from the default somewhere, and survives JSON.
    for f in _fields():
        if f.name not in ("epochs", "devices"):
            assert getattr(changed, f.name) != getattr(TrainConfig(), f.name), f.name
    again = TrainConfig.from_json(changed.to_json())
    assert again == changed and isinstance(again.hidden_sizes, tuple)


def test_choices_come_from_the_literal_types():
    from eqx_fmnist.config import OnNonfinite, Schedule, literal_choices

    assert literal_choices("schedule") == typing.get_args(Schedule)
    assert literal_choices("on_nonfinite") == typing.get_args(OnNonfinite) == ("raise", "skip")
    assert literal_choices("batch_size") == ()


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("batch_size", "512", "an int"),
        ("batch_size", 5.0, "an int"),
        ("learning_rate", "fast", "a number"),
        ("learning_rate", 10**400, "a number"),  # an int no float holds
        ("schedule", "linear", "one of 'constant', 'cosine', 'warmup_cosine'"),
        ("hidden_sizes", [256, "x"], "a list of ints"),
        ("grad_clip", [1], "a number or null"),
        ("epochs", True, "an int or null"),
        ("mirror", 1, "true or false"),
        ("shift", 1.5, "an int"),
    ],
)
def test_json_values_of_the_wrong_type_name_the_field(field, value, message):
    from eqx_fmnist.config import TrainConfig

    with pytest.raises(ValueError, match=f"`{field}` must be {message}"):
        TrainConfig.from_dict({field: value})


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"shift": 28}, "`shift` must be in 0..27 pixels"),
        ({"shift": -1}, "`shift` must be in 0..27 pixels"),
        ({"erase": 1.5}, "`erase` must be a probability"),
        ({"mixup": -0.5}, "`mixup` must be a number >= 0"),
        ({"mixup": float("nan")}, "`mixup` must be a number >= 0"),
        ({"ema_decay": 1.0}, "`ema_decay` must be below 1"),
        ({"distill_temperature": 0.0}, "`distill_temperature` must be a finite number > 0"),
        ({"distill_weight": 2.0}, "`distill_weight` must be a finite number >= 0"),
    ],
)
def test_augmentation_average_and_distillation_choices_are_checked(changes, message):
    from eqx_fmnist.config import TrainConfig

    with pytest.raises(ValueError, match=message):
        TrainConfig(**changes)


def test_mirror_is_a_yes_no_flag():
    from eqx_fmnist.cli import build_parser
    from eqx_fmnist.cli.flags import config_from_args

    parser = build_parser()
    on = config_from_args(parser.parse_args(["train", "--mirror", "--shift", "2"]))
    off = config_from_args(parser.parse_args(["train", "--no-mirror", "--shift", "0"]))
    assert (on.mirror, on.shift, off.mirror, off.shift) == (True, 2, False, 0)


def test_state_fields_are_those_marked_and_include_the_model():
    from eqx_fmnist.config import TrainConfig

    marked = {f.name for f in _fields() if f.metadata["state"]}
    assert set(TrainConfig.state_fields()) == marked
    assert {"hidden_sizes", "precision"} <= marked and "learning_rate" not in marked


def test_a_given_length_replaces_the_other():
    from eqx_fmnist.config import TrainConfig

    assert TrainConfig().with_changes(steps=100).epochs is None
    assert TrainConfig.codelab().with_changes(epochs=2).steps is None
    assert TrainConfig.codelab(steps=9).steps == 9
    with pytest.raises(ValueError, match="not both"):
        TrainConfig(epochs=2, steps=3)


def parse(*argv):
    from eqx_fmnist.cli.flags import add_config_flags, config_from_args

    parser = argparse.ArgumentParser()
    add_config_flags(parser, distilled=True)
    return config_from_args(parser.parse_args([str(a) for a in argv]))


def test_flags_are_generated_from_the_fields_with_their_aliases():
    from eqx_fmnist.config import TrainConfig

    assert parse() == TrainConfig()
    got = parse("--learning-rate", 0.01, "--hidden-sizes", "64,32", "--schedule", "cosine")
    assert (got.learning_rate, got.hidden_sizes, got.schedule) == (0.01, (64, 32), "cosine")
    assert parse("--lr", 0.02, "--hidden", "16").hidden_sizes == (16,)
    assert parse("--steps", 10) == TrainConfig(steps=10)
    assert parse("--codelab", "--steps", 10) == TrainConfig.codelab(steps=10)
    assert parse("--best", "--seed", 2) == TrainConfig.best(seed=2)
    assert parse("--distilled", "--seed", 2) == TrainConfig.distilled(seed=2)
    with pytest.raises(
        ValueError, match="one of --config, --codelab, --best and --distilled, not --codelab"
    ):
        parse("--codelab", "--best")
    with pytest.raises(SystemExit):  # argparse refuses a value outside the Literal
        parse("--on-nonfinite", "ignore")


def test_a_config_file_is_the_base_and_flags_override_it(tmp_path):
    from eqx_fmnist.config import TrainConfig

    path = tmp_path / "run.json"
    path.write_text(json.dumps({"steps": 50, "batch_size": 128, "seed": 4}))
    assert parse("--config", path) == TrainConfig(steps=50, batch_size=128, seed=4)
    assert parse("--config", path, "--seed", 5, "--epochs", 2) == TrainConfig(
        epochs=2, batch_size=128, seed=5
    )


@pytest.mark.parametrize("case", ["missing", "not json", "unknown field", "wrong type"])
def test_a_bad_config_file_is_one_line_exit_2_and_writes_nothing(case, tmp_path, capsys):
    import eqx_fmnist.cli.command as cli

    path = tmp_path / "run.json"
    content = {
        "not json": "{steps: 5",
        "unknown field": json.dumps({"lr": 0.1}),
        "wrong type": json.dumps({"steps": "five"}),
    }.get(case)
    if content is not None:
        path.write_text(content)
    out, nowhere = tmp_path / "out", tmp_path / "no-data"
    nowhere.mkdir()  # the config is refused before the data are looked for
    argv = ["--config", str(path), "--out", str(out), "--data-dir", str(nowhere)]
    status = cli.main(["train", *argv, "--no-download"])
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "config" in err and str(path) in err
    assert {
        "missing": "No such file",
        "not json": "not valid JSON",
        "unknown field": "'lr'",
        "wrong type": "`steps` must be an int",
    }[case] in err
    assert not out.exists()


def test_config_round_trips_through_json():
    from eqx_fmnist.config import TrainConfig

    c = TrainConfig(epochs=3, hidden_sizes=(64, 32), precision="p=f32,c=bf16,o=f32", grad_clip=1.0)
    again = TrainConfig.from_json(c.to_json())
    assert again == c and isinstance(again.hidden_sizes, tuple)
    assert json.loads(c.to_json())["hidden_sizes"] == [64, 32]


def test_codelab_config_is_the_reference_run():
    from eqx_fmnist.config import TrainConfig

    c = TrainConfig.codelab()
    assert (c.batch_size, c.learning_rate, c.weight_decay, c.steps) == (512, 3e-3, 1e-4, 400)
    assert c.schedule == "constant" and c.policy.compute_dtype == jnp.float32
    assert c.epochs is None and c.label_smoothing == 0.0
    assert (c.shift, c.mirror, c.erase, c.ema_decay) == (0, False, 0.0, 0.0)  # as the codelab
    assert TrainConfig().epochs is not None and TrainConfig().steps is None
    assert (TrainConfig().shift, TrainConfig().mirror) == (2, True)
    assert TrainConfig.best().epochs > TrainConfig().epochs


@pytest.mark.parametrize(
    "kw, field",
    [
        (dict(batch_size=0), "batch_size"),
        (dict(batch_size=-512), "batch_size"),
        (dict(learning_rate=0.0), "learning_rate"),
        (dict(learning_rate=float("nan")), "learning_rate"),
        (dict(weight_decay=-1.0), "weight_decay"),
        # Under the suite's type checker the `Literal` annotation refuses it first.
        (dict(schedule="linear"), "schedule"),
        (dict(epochs=2, steps=10), "epochs"),
        (dict(steps=0), "steps"),
        (dict(hidden_sizes=(256, -1)), "hidden_sizes"),
        (dict(precision="p=f32,c=f8"), "f8"),
        (dict(label_smoothing=1.5), "label_smoothing"),
        (dict(label_smoothing=1.0), "label_smoothing` must be below 1"),
        (dict(log_every=0), "log_every"),
        (dict(grad_clip=0.0), "grad_clip"),
        (dict(seed=-1), "seed"),
    ],
)
def test_bad_config_raises_value_error_naming_the_field(kw, field):
    from eqx_fmnist.config import TrainConfig

    with pytest.raises((ValueError, jaxtyping.TypeCheckError), match=field):
        TrainConfig(**kw)


def test_from_dict_rejects_unknown_fields():
    from eqx_fmnist.config import TrainConfig

    with pytest.raises(ValueError, match="unknown TrainConfig fields \\['lr'\\]"):
        TrainConfig.from_dict({"lr": 0.1})


def test_a_config_gives_the_views_its_tta_names():
    from eqx_fmnist.config import TrainConfig
    from eqx_fmnist.views import TTA_MIRROR, TTA_SHIFTS

    assert TrainConfig().views is None
    assert TrainConfig(tta="mirror").views == TTA_MIRROR == ((0, 0, False), (0, 0, True))
    assert TrainConfig(tta="shifts").views == TTA_SHIFTS and len(TTA_SHIFTS) == 6
