"""Members in one program: each member is the single run it stands for; sweeps compile
once, rank on validation and refuse what cannot be batched; checkpoints and resumes."""

import dataclasses

import equinox as eqx
import jax
import numpy as np
import pytest

from helpers import F32_U, mlp_logits_atol, same_arrays, small_config as config


def params(model):
    return [np.asarray(x) for x in jax.tree.leaves(eqx.filter(model, eqx.is_inexact_array))]


def max_diff(a, b) -> float:
    return max(float(np.max(np.abs(x - y))) for x, y in zip(params(a), params(b), strict=True))


# ----------------------------------------------------------------------------- init


# ----------------------------------------------------------------------------- training


@pytest.mark.slow  # cold: compiles several programs or trains on the real data
def test_each_member_is_the_run_fit_would_have_made(small):
    """Same batches and, up to the rounding of batched matmuls, the same parameters and
    metrics: the single runs are the independent computation."""
    import eqx_fmnist as ef

    c = config()
    ens = ef.fit_ensemble(c, ef.Splits(small, small), seeds=(0, 5))
    assert type(ens) is ef.TrainResult and ens.num_members == 2  # the one result type
    assert [h["step"] for h in ens.history] == [8, 16]
    assert all(len(h["members"]) == 2 for h in ens.history)
    for i, seed in enumerate((0, 5)):
        single = ef.fit(c.with_changes(seed=seed), ef.Splits(small, small))
        assert max_diff(ef.select_members(ens.model, i), single.model) < 1e-5
        assert np.array_equal(ens.state.key[i], single.state.key)
        np.testing.assert_allclose(
            [h["members"][i]["loss"] for h in ens.history],
            [h["loss"] for h in single.history],
            rtol=1e-5,
        )
        assert abs(ens.test.members[i].accuracy - single.test.accuracy) <= 1 / len(small)


@pytest.mark.slow
def test_members_that_differ_in_numbers_match_their_single_runs(small):
    """Learning rate, weight decay and label smoothing as arrays in the state (one
    program) against the single runs, where they are constants of the program."""
    import eqx_fmnist as ef

    configs = [
        config(learning_rate=1e-3, weight_decay=0.0, label_smoothing=0.0, schedule="cosine"),
        config(learning_rate=3e-3, weight_decay=0.1, label_smoothing=0.2, schedule="cosine"),
    ]
    ens = ef.fit(configs[0], ef.Splits(small, small), members=ef.ensemble.Listed(configs))
    for i, c in enumerate(configs):
        single = ef.fit(c, ef.Splits(small, small))
        assert max_diff(ef.select_members(ens.model, i), single.model) < 1e-5
        assert ens.history[-1]["members"][i]["learning_rate"] == pytest.approx(
            single.history[-1]["learning_rate"], rel=1e-6
        )
    # They did train differently: the two members are far apart.
    assert max_diff(ef.select_members(ens.model, 0), ef.select_members(ens.model, 1)) > 1e-2


@pytest.mark.slow
def test_the_ensemble_evaluation_against_numpy(small):
    import eqx_fmnist as ef

    ens = ef.fit_ensemble(config(), ef.Splits(small, small), seeds=3)
    labels = np.asarray(small.labels)
    probs = np.stack(
        [
            np.asarray(ef.predict_proba(ef.select_members(ens.model, i), small.images))
            for i in range(3)
        ]
    )
    for i, m in enumerate(ens.test.members):
        assert m.accuracy == pytest.approx(np.mean(probs[i].argmax(-1) == labels))
    mean = probs.mean(axis=0)
    assert ens.test.accuracy == pytest.approx(np.mean(mean.argmax(-1) == labels))
    nll = -np.log(mean[np.arange(len(labels)), labels]).mean()
    assert ens.test.loss == pytest.approx(nll, rel=1e-4)
    accs = [m.accuracy for m in ens.test.members]
    assert ens.test.accuracy_std == pytest.approx(np.std(accs, ddof=1))
    # The one function for an ensemble's probabilities, against numpy's mean of the members'
    # alone: batched logits within d of each member's, so probabilities within e^(2d) - 1.
    d = max(mlp_logits_atol(ef.select_members(ens.model, i), small.images) for i in range(3))
    atol = np.expm1(2 * d) + 8 * F32_U
    np.testing.assert_allclose(ef.predict_proba(ens.model, small.images), mean, rtol=0, atol=atol)


def test_a_member_that_diverges_is_named(small):
    import eqx_fmnist as ef

    members = ef.ensemble.Listed((config(seed=0), config(seed=1, learning_rate=1e30)))
    with pytest.raises(ef.NonFiniteError, match=r"member 1 \(seed=1, learning_rate=1e\+30"):
        ef.fit(config(), ef.Splits(small, small), members=members)


def test_members_that_would_not_fit_in_memory_are_refused_before_compiling(small, monkeypatch):
    import eqx_fmnist as ef
    from eqx_fmnist import intervals, step

    monkeypatch.setattr(intervals, "_device_memory", lambda device: (50 * 2**20, "free"))
    traces = eqx.debug.get_num_traces(step._steps_traced)
    with pytest.raises(ValueError, match=r"100 members need about .* GiB.*at most \d+ members"):
        ef.fit_ensemble(config(hidden_sizes=(256, 128)), ef.Splits(small, small), seeds=100)
    # Every kind of members is checked where fit plans the run: cross-validation too.
    with pytest.raises(ValueError, match=r"100 members need about .* GiB"):
        ef.fit(
            config(hidden_sizes=(256, 128)), ef.Splits(small, None), members=ef.ensemble.Folds(100)
        )
    assert eqx.debug.get_num_traces(step._steps_traced) == traces


def test_the_memory_estimate_grows_with_the_members():
    from eqx_fmnist.intervals import check_memory
    from eqx_fmnist.state import state_bytes

    c = config()
    one, four = check_memory([c], 256), check_memory([c] * 4, 256)
    assert four - one == 3 * (one)
    assert one > 4 * state_bytes(c, 256)


@pytest.mark.parametrize("seeds", [0, (), (1, 1)])
def test_bad_seeds_are_refused(seeds, small):
    import eqx_fmnist as ef

    with pytest.raises(ValueError, match="seeds"):
        ef.fit_ensemble(config(), ef.Splits(small, small), seeds=seeds)


# ----------------------------------------------------------------------------- sweeps


@pytest.mark.slow  # cold: compiles several programs or trains on the real data
def test_a_sweep_is_one_compile_ranked_on_validation(small, tmp_path):
    import eqx_fmnist as ef
    from eqx_fmnist import step

    grid = {"learning_rate": [1e-3, 1e-2], "label_smoothing": [0.0, 0.1]}
    traces = eqx.debug.get_num_traces(step._steps_traced)
    splits = ef.split_data((small, small), validation_size=64)
    result = ef.sweep(config(steps=8), splits, grid, seeds=2)
    assert eqx.debug.get_num_traces(step._steps_traced) - traces == 1
    assert len(result.members.configs) == 8 and len(result.points) == 4
    # Ranked by validation accuracy, recomputed here member by member.
    train, valid = small.split(64, key=jax.random.PRNGKey(ef.dataset.VALIDATION_SEED))
    accs = np.array(
        [
            ef.evaluate(ef.select_members(result.members.model, i), valid).accuracy
            for i in range(len(result.members.configs))
        ]
    ).reshape(4, 2)
    np.testing.assert_allclose(result.validation_accuracy, accs)
    assert result.best == int(np.argmax(accs.mean(axis=1)))
    # The test set is touched only for the winner's seeds.
    assert result.members.test is None
    assert len(result.test.members) == 2 and result.test.count == len(small)
    winner = result.best_point
    assert result.members.configs[result.best * 2].learning_rate == winner["learning_rate"]
    written = ef.runs.write_sweep(tmp_path, result)
    assert [p.name for p in written] == ["sweep.md", "sweep.json", "sweep_heatmap.png"]
    table = (tmp_path / "sweep.md").read_text()
    assert table.count("\n| ") == 4 and f"**{accs.mean(axis=1).max():.4f}**" in table


@pytest.mark.parametrize(
    "grid, message",
    [
        ({"hidden_sizes": [(64,), (128,)]}, "'hidden_sizes' cannot be swept inside one program"),
        ({"batch_size": [32, 64]}, "'batch_size' cannot be swept"),
        ({"seed": [0, 1]}, "use `seeds`"),
        ({"learning_rat": [1e-3]}, "not a TrainConfig field"),
        ({"learning_rate": []}, "non-empty list"),
        ({"learning_rate": [-1.0]}, "learning_rate"),
        ({}, "the grid is empty"),
    ],
)
def test_a_grid_that_cannot_be_batched_is_refused_with_its_name(grid, message):
    from eqx_fmnist.ensemble import grid_configs

    with pytest.raises(ValueError, match=message):
        grid_configs(config(), grid, 2)


def test_a_sweep_needs_a_validation_split(small):
    import eqx_fmnist as ef

    with pytest.raises(ValueError, match="validation_size"):
        ef.sweep(config(), ef.Splits(small, small), {"learning_rate": [1e-3]})


def test_the_grid_comes_back_from_the_member_configs():
    from eqx_fmnist.ensemble import grid_configs, grid_of

    grid = {"weight_decay": [0.0, 0.1], "learning_rate": [1e-3, 2e-3, 3e-3]}
    _, seeds, configs = grid_configs(config(seed=4), grid, 2)
    back, back_seeds = grid_of(configs)
    assert back == grid and back_seeds == seeds == (4, 5)
    assert grid_configs(configs[0], back, back_seeds)[2] == configs
    with pytest.raises(ValueError, match="not a sweep"):
        grid_of([configs[1], configs[0], *configs[2:]])


# ----------------------------------------------------------------------------- checkpoints


def test_an_interrupted_ensemble_resumes_exactly(small, tmp_path):
    from eqx_fmnist.checkpoint import load_checkpoint, save_checkpoint
    from eqx_fmnist.dataset import Splits
    from eqx_fmnist.ensemble import Listed, members_from
    from eqx_fmnist.runs import Interrupted, RunFolder
    from eqx_fmnist.train import fit

    configs = [config(seed=s, learning_rate=lr) for s, lr in ((0, 1e-3), (1, 3e-3))]
    members = Listed(tuple(configs))
    whole = fit(configs[0], Splits(small, small), members=members)
    with RunFolder(tmp_path, configs[0], num_train=len(small), members=members) as run:

        def stop_after_first(record, state):
            run.request_stop()
            run.callback(record, state)

        with pytest.raises(Interrupted):
            fit(configs[0], Splits(small, small), members=members, callback=stop_after_first)
    ckpt = load_checkpoint(tmp_path / "checkpoint.eqx")
    assert ckpt.step == 8 and ckpt.members == tuple(configs)
    assert members_from(ckpt.choice, ckpt.members) == members  # the choice was recorded
    resumed = fit(ckpt.config, Splits(small, small), members=members, state=ckpt.state)
    assert same_arrays(resumed.state.model, whole.state.model)
    assert [h["step"] for h in resumed.history] == [16]
    # A stacked state needs its member configs, and the other way round.
    with pytest.raises(ValueError, match="stacked members"):
        save_checkpoint(tmp_path / "x.eqx", whole.state, configs[0], num_train=len(small))
    with pytest.raises(ValueError, match="holds 2 members, but 3"):
        three = Listed((*configs, config(seed=9)))
        fit(configs[0], Splits(small, small), members=three, state=ckpt.state)
    with pytest.raises(ValueError, match="holds 2 members, but one config"):
        fit(configs[0], Splits(small, small), state=ckpt.state)


@pytest.mark.slow
def test_an_ensemble_run_folder_summarises_members_and_ensemble(small, real_data, tmp_path):
    import json

    import eqx_fmnist as ef
    from eqx_fmnist.runs import RunFolder

    configs = [config(seed=s) for s in (0, 1)]
    seeds = ef.ensemble.Seeds((0, 1))
    with RunFolder(tmp_path, configs[0], num_train=len(small), members=seeds) as run:
        test = ef.ArrayDataset(real_data.test_images[:256], real_data.test_labels[:256])
        data = dataclasses.replace(
            real_data,
            test_images=real_data.test_images[:256],
            test_labels=real_data.test_labels[:256],
        )
        result = ef.fit(configs[0], ef.Splits(small, test), members=seeds, callback=run.callback)
        report = ef.runs.run_report(result.model, result.policy, test.images, test.labels)
        summary = run.finish(result, data, report)
    assert summary["test_accuracy"] == pytest.approx(result.test.accuracy)
    assert [m["seed"] for m in summary["members"]] == [0, 1]
    lines = [json.loads(x) for x in (tmp_path / "history.jsonl").read_text().splitlines()]
    assert len(lines[-1]["members"]) == 2
    assert lines[-1]["loss"] == pytest.approx(np.mean([m["loss"] for m in lines[-1]["members"]]))


def test_seeds_past_the_largest_are_named_as_the_user_gave_them():
    """`--seed 4294967295 --seeds 2` complained of a seed the user never typed."""
    import pytest

    import eqx_fmnist as ef

    with pytest.raises(ValueError, match="2 seeds from seed 4294967295 run past the largest"):
        ef.ensemble.member_seeds(ef.TrainConfig(seed=2**32 - 1), 2)
    assert ef.ensemble.member_seeds(ef.TrainConfig(seed=2**32 - 2), 2) == (2**32 - 2, 2**32 - 1)
