"""Members on different subsets of one training set: the folds partition the data, a
member is the single run on its rows, resumes exactly and never learns what it did not
see; cross-validation's out-of-fold figures; the label audit against numpy; `cv` and
`audit` on the command line."""

import json

import equinox as eqx
import jax
import numpy as np
import pytest

from helpers import run_cli_here, small_config as config


def max_diff(a, b) -> float:
    leaves = [jax.tree.leaves(eqx.filter(m, eqx.is_inexact_array)) for m in (a, b)]
    return max(
        float(np.max(np.abs(np.asarray(x) - np.asarray(y)))) for x, y in zip(*leaves, strict=True)
    )


@pytest.mark.slow  # cold: compiles several programs or trains on the real data
def test_a_member_on_a_subset_is_the_single_run_on_those_rows(small):
    """Same batches (its own keyed order over its own rows), so up to the rounding of
    batched matmuls the same weights as `fit` on `train.take(rows)`."""
    import eqx_fmnist as ef
    from eqx_fmnist.ensemble import Bootstrap, Folds

    for members, c in ((Folds(2), config(seed=0)), (Bootstrap(2), config(seed=4))):
        together = ef.fit(c, ef.Splits(small, small), members=members)
        subsets = members.rows(len(small), c)
        for i, each in enumerate(members.configs(c)):
            alone = ef.fit(each, ef.Splits(small.take(subsets.train[i]), small))
            assert max_diff(ef.select_members(together.model, i), alone.model) < 1e-5
        assert (
            max_diff(
                ef.select_members(together.model, 0),
                ef.fit(c, ef.Splits(small, small)).model,
            )
            > 1e-3
        )  # not the run on every row


@pytest.mark.slow  # cold: compiles several programs or trains on the real data
def test_fold_members_are_validated_on_their_own_folds(small):
    import eqx_fmnist as ef
    from eqx_fmnist.ensemble import Folds

    result = ef.fit(config(seed=0), ef.Splits(small, small), members=Folds(4))
    subsets = Folds(4).rows(len(small), config(seed=0))
    v = result.validation
    assert v.count == len(small) and len(v.members) == 4
    for i, fold in enumerate(subsets.held_out):  # numpy on each member's own fold
        probs = np.asarray(ef.predict_proba(ef.select_members(result.model, i), small.images[fold]))
        right = probs.argmax(1) == np.asarray(small.labels)[fold]
        assert v.members[i].accuracy == pytest.approx(right.mean())
        assert v.members[i].count == len(fold)
    assert v.accuracy == pytest.approx(np.mean([m.accuracy for m in v.members]))  # equal folds
    assert all("valid_accuracy" in m for m in result.history[-1]["members"])


def test_subsets_are_refused_where_they_do_not_fit(small):
    import eqx_fmnist as ef
    from eqx_fmnist.ensemble import Folds, Listed
    from eqx_fmnist.subsets import kfold
    from eqx_fmnist.train import _check_arguments

    subsets = kfold(len(small), 2)
    with pytest.raises(ValueError, match="2 members' rows"):
        Listed(tuple(config(seed=s) for s in range(3)), subsets)
    with pytest.raises(ValueError, match="rows outside the 100 training examples"):
        two = Listed((config(), config(seed=1)), kfold(len(small), 2))
        ef.fit(config(), ef.Splits(small.take(np.arange(100)), small), members=two)
    with pytest.raises(ValueError, match="validation split"):
        ef.fit(config(), ef.Splits(small, small, validation=small), members=Folds(2))
    # One rule, in the folds: a config that holds out a validation split.
    with pytest.raises(ValueError, match="on its own fold: give validation_size=0"):
        ef.cross_validate(config(validation_size=64), ef.Splits(small, small), k=2)
    with pytest.raises(ValueError, match="at least 2 folds"):
        Folds(1)
    # Configs where `members` is meant: the suite's type checker refuses them in `fit`;
    # without one, fit's own check names the fix.
    with pytest.raises(TypeError, match="config"):
        ef.fit([config(), config(seed=1)], ef.Splits(small, small))
    with pytest.raises(TypeError, match=r"not list; for members pass `members=ef\.ensemble"):
        _check_arguments([config(), config(seed=1)], ef.Splits(small, small), None, [])


def test_a_run_on_subsets_resumes_exactly(small, tmp_path):
    """Stopped at step 8 and saved, loaded and continued with the same folds: the
    uninterrupted run's weights, bit for bit."""
    import eqx_fmnist as ef
    from eqx_fmnist.ensemble import Folds, members_from

    c, folds = config(seed=1), Folds(2)
    whole = ef.fit(c, ef.Splits(small, small), members=folds)
    saved, n = {}, folds.rows(len(small), c).size

    def keep(record, state):
        if record["step"] == 8:
            saved["path"] = ef.save_checkpoint(
                tmp_path / "c.eqx",
                state,
                c,
                num_train=n,
                members=folds.configs(c),
                choice=folds.to_dict(),
            )

    ef.fit(c, ef.Splits(small, small), members=folds, callback=keep)
    loaded = ef.load_checkpoint(saved["path"])
    assert loaded.state.global_step == 8
    rebuilt = members_from(loaded.choice, loaded.members)
    assert rebuilt == folds
    resumed = ef.fit(loaded.config, ef.Splits(small, small), members=rebuilt, state=loaded.state)
    assert max_diff(resumed.model, whole.model) == 0.0


@pytest.mark.slow
def test_a_member_never_learns_a_class_it_never_saw(real_data):
    """Member 0 trains on every row but class 3's, member 1 on all of them: member 0
    never predicts Dress (its logit is only ever pushed down), member 1 does."""
    import eqx_fmnist as ef
    from eqx_fmnist.subsets import Subsets

    splits = ef.split_data(real_data)
    labels = np.asarray(splits.train.labels)
    rows = np.flatnonzero(labels != 3)[:48_000]
    table = np.stack([rows, np.arange(48_000)]).astype(np.int32)
    c = ef.TrainConfig(steps=300, batch_size=256, hidden_sizes=(64,), log_every=100)
    members = ef.ensemble.Listed((c, c.with_changes(seed=1)), Subsets(table, None, "rows"))
    result = ef.fit(c, splits, members=members)
    said = [
        np.asarray(ef.predict(ef.select_members(result.model, i), splits.test.images))
        for i in range(2)
    ]
    assert (said[0] == 3).mean() < 0.001 and (said[1] == 3).mean() > 0.05


@pytest.mark.slow
def test_cv_then_audit_on_the_command_line(real_data, tmp_path, monkeypatch):
    """On a slice of the real data (6,000 training and 1,000 test images)."""
    pytest.importorskip("cleanlab")
    from helpers import use_a_slice

    sliced = use_a_slice(real_data, monkeypatch, 6000, 1000)
    data = ("--data-dir", real_data.source)
    refused = run_cli_here("cv", "--folds", "1", "--out", tmp_path / "no", *data)
    assert refused.returncode == 2 and "at least 2 folds" in refused.stderr
    assert not (tmp_path / "no").exists()
    out = tmp_path / "cv"
    done = run_cli_here(
        "cv",
        "--folds",
        "3",
        "--steps",
        "60",
        "--hidden",
        "32",
        "--log-every",
        "20",
        "--out",
        out,
        *data,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads((out / "cv.json").read_text())
    oof = np.load(out / "out_of_fold.npz")
    assert oof["probabilities"].shape == (6000, 10)
    assert np.array_equal(oof["labels"], sliced.train_labels)
    for i, accuracy in enumerate(summary["fold_accuracy"]):  # numpy on the saved rows
        rows = oof["fold"] == i
        right = oof["probabilities"][rows].argmax(1) == oof["labels"][rows]
        assert accuracy == pytest.approx(right.mean(), abs=1e-6)
    assert summary["accuracy_std"] == pytest.approx(np.std(summary["fold_accuracy"], ddof=1))
    assert (out / "folds.png").is_file() and (out / "checkpoint.eqx").is_file()
    # Finished, it is read-only to --resume; finished again (--overwrite), the folds are
    # dealt again: the same figures.
    refused = run_cli_here("cv", "--resume", out / "checkpoint.eqx", "--steps", "9", *data)
    assert refused.returncode == 2 and "drop --steps" in refused.stderr
    finished = run_cli_here("cv", "--resume", out / "checkpoint.eqx", *data)
    assert finished.returncode == 2 and "has finished" in finished.stderr
    again = run_cli_here("cv", "--resume", out / "checkpoint.eqx", "--overwrite", *data)
    assert again.returncode == 0, again.stderr
    assert json.loads((out / "cv.json").read_text())["fold_accuracy"] == summary["fold_accuracy"]
    audited = run_cli_here("audit", out, "--top", "10", *data)
    assert audited.returncode == 0, audited.stderr
    rows = json.loads((out / "suspects_train.json").read_text())["suspects"]
    csv_lines = (out / "suspects_train.csv").read_text().splitlines()
    assert csv_lines[0] == "index,given,suggested,score" and len(csv_lines) == len(rows) + 1
    scores = [r["score"] for r in rows]
    assert scores == sorted(scores)
    first = rows[0]
    assert first["score"] == pytest.approx(
        oof["probabilities"][first["index"], oof["labels"][first["index"]]], rel=1e-6
    )
    for name in ("suspects_train.png", "suspects_test.png", "suspects_test_by_class.png"):
        assert (out / name).is_file()
