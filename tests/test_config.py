"""TrainConfig is the one list of a run's choices: JSON, flags and help come from it."""

import argparse
import dataclasses
import json
import typing

import jax.numpy as jnp
import jaxtyping
import numpy as np
import pytest

pytestmark = pytest.mark.quick_compile  # compiles much, runs little (conftest.py)


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
        precision="p=f32,c=bf16,o=f32",
        seed=3,
        log_every=2,
        grad_clip=1.0,
        label_smoothing=0.2,
        validation_size=100,
        devices=1,
        on_nonfinite="skip",
        calibration_size=50,
        shift=3,
        mirror=not TrainConfig().mirror,
        erase=0.25 + TrainConfig().erase,
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
    add_config_flags(parser)
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
    with pytest.raises(ValueError, match="one of --config, --codelab and --best, not --codelab"):
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
    out = tmp_path / "out"
    status = cli.main(["train", "--config", str(path), "--out", str(out), "--no-download"])
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


@pytest.mark.slow  # cold: compiles several programs or trains on the real data
@pytest.mark.parametrize("schedule", ["constant", "cosine", "warmup_cosine"])
@pytest.mark.parametrize("grad_clip", [None, 0.5])
def test_the_one_optimiser_path_is_optax_adamw_with_its_schedule(schedule, grad_clip):
    """The library's step (numbers injected as arrays of the state, the rate of each step
    written by the step) takes the steps Optax's own `adamw` takes with the schedule and
    weight decay compiled in; and changing the state's numbers changes the steps as the
    plain optimiser with those numbers would."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import optax

    from eqx_fmnist.config import TrainConfig
    from eqx_fmnist.dataset import ArrayDataset, normalize
    from eqx_fmnist.losses import cross_entropy
    from eqx_fmnist.precision import optax_promotion
    from eqx_fmnist.state import init_state
    from eqx_fmnist.step import train_step

    from helpers import f32_sum_atol, synthetic_arrays

    config = TrainConfig(
        steps=20,
        schedule=schedule,
        grad_clip=grad_clip,
        warmup_steps=5,
        hidden_sizes=(8,),
        batch_size=16,
        label_smoothing=0.0,
        # No augmentation: train_step would move the batch the plain loop uses.
        shift=0,
        mirror=False,
    )
    a = synthetic_arrays(n_train=16)
    data = ArrayDataset(a["train_images"], a["train_labels"])

    def plain_rate(c):
        return {
            "constant": optax.constant_schedule(c.learning_rate),
            "cosine": optax.cosine_decay_schedule(c.learning_rate, 20),
            "warmup_cosine": optax.warmup_cosine_decay_schedule(
                0.0, c.learning_rate, 5, 20, end_value=0.0
            ),
        }[schedule]

    def plain(c):  # Optax as a user writes it: the schedule at the peak, compiled in
        tx = optax.adamw(plain_rate(c), weight_decay=c.weight_decay)
        return optax.chain(optax.clip_by_global_norm(grad_clip), tx) if grad_clip else tx

    def by_hand(c, steps=6):
        """The parameters after `steps` of Optax's own optimiser, and how far a rounding
        of the gradients could move each one: Adam divides by sqrt(v) + eps, so where a
        gradient is tiny a float32 rounding of it (a batch sum of per-example terms, on
        their magnitudes) moves the update by lr * rounding / (sqrt(v) + eps)."""
        params, static = eqx.partition(init_state(c, 16).model, eqx.is_inexact_array)
        tx = plain(c)
        opt = tx.init(params)

        def loss(p, x=data.images, y=data.labels):
            logits = jax.vmap(eqx.combine(p, static))(normalize(x))
            return cross_entropy(logits, y)

        per_example = jax.vmap(jax.grad(loss), in_axes=(None, 0, 0))(
            params, data.images[:, None], data.labels[:, None]
        )
        rounding = jax.tree.map(lambda g: f32_sum_atol(16 * 64, np.abs(g).mean(0)), per_example)
        reach = jax.tree.map(np.zeros_like, rounding)
        for t in range(steps):
            with optax_promotion():
                u, opt = tx.update(jax.grad(loss)(params), opt, params)
            params = optax.apply_updates(params, u)
            rate, correction = float(plain_rate(c)(t)), 1 - 0.999 ** (t + 1)
            nu = optax.tree_utils.tree_get(opt, "nu")
            reach = jax.tree.map(
                lambda r, e, v, rate=rate, k=correction: (
                    r + rate * e / (np.sqrt(np.asarray(v) / k) + 1e-8)
                ),
                reach,
                rounding,
                nu,
            )
        return params, reach

    def library(state, steps=6):
        for _ in range(steps):
            state, _ = train_step(state, data.images, data.labels)
        return eqx.filter(state.model, eqx.is_inexact_array)

    def assert_close(a, b_and_reach):
        b, reach = b_and_reach
        for x, y, r in zip(*map(jax.tree.leaves, (a, b, reach)), strict=True):
            np.testing.assert_array_less(
                np.abs(np.asarray(x) - np.asarray(y)), 1e-6 + 1e-5 * np.abs(np.asarray(y)) + r
            )

    assert_close(library(init_state(config, 16)), by_hand(config))
    other = config.with_changes(learning_rate=1e-2, weight_decay=0.2)
    state = init_state(config, 16)
    held = {
        **state.hyperparams,
        "learning_rate": jnp.float32(1e-2),
        "weight_decay": jnp.float32(0.2),
    }
    assert_close(library(eqx.tree_at(lambda s: s.hyperparams, state, held)), by_hand(other))


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
    from eqx_fmnist.augment import TTA_MIRROR, TTA_SHIFTS
    from eqx_fmnist.config import TrainConfig

    assert TrainConfig().views is None
    assert TrainConfig(tta="mirror").views == TTA_MIRROR == ((0, 0, False), (0, 0, True))
    assert TrainConfig(tta="shifts").views == TTA_SHIFTS and len(TTA_SHIFTS) == 6
