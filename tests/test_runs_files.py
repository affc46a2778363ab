"""`runs.files`: what a sweep, `cv` and `audit` write beside a run folder's own files
(the out-of-fold probabilities read back or named when damaged, the suspects' tables and
grids, `audit_run`)."""

import json

import numpy as np
import pytest


@pytest.mark.parametrize("damage", ["not a zip", "truncated", "no labels", "wrong shape"])
def test_damaged_out_of_fold_probabilities_are_named(tmp_path, damage):
    import io

    import numpy as np

    from eqx_fmnist.runs import OUT_OF_FOLD, RunError, read_out_of_fold

    good = {"probabilities": np.full((4, 10), 0.1, np.float32), "labels": np.arange(4)}
    good["fold"] = np.zeros(4, np.int16)
    if damage == "no labels":
        del good["labels"]
    if damage == "wrong shape":
        good["probabilities"] = np.zeros((4, 3), np.float32)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **good)
    blob = {"not a zip": b"hello", "truncated": buffer.getvalue()[:60]}.get(damage)
    (tmp_path / OUT_OF_FOLD).write_bytes(blob if blob is not None else buffer.getvalue())
    with pytest.raises(RunError, match=OUT_OF_FOLD):
        read_out_of_fold(tmp_path)


def test_write_suspects_writes_the_tables_and_grids_it_names(tmp_path):
    """`write_suspects` of a hand-made audit: the CSV's rows are the suspects in order,
    the JSON says the same, and both grids are PNG files."""

    from eqx_fmnist.audit import LabelAudit
    from eqx_fmnist.runs import write_suspects

    found = LabelAudit(
        np.array([7, 2]), np.array([0, 9]), np.array([6, 7]), np.array([0.01, 0.2]), 50
    )
    images = np.zeros((50, 28, 28), np.uint8)
    paths = write_suspects(tmp_path, "train", found, images, top=2)
    assert sorted(p.name for p in paths) == sorted(
        f"suspects_train{end}" for end in (".csv", ".json", ".png", "_by_class.png")
    )
    lines = (tmp_path / "suspects_train.csv").read_text().splitlines()
    assert lines[1].startswith("7,T-shirt/top,Shirt") and lines[2].startswith("2,Ankle boot,")
    saved = json.loads((tmp_path / "suspects_train.json").read_text())
    assert saved["examples"] == 50 and [r["index"] for r in saved["suspects"]] == [7, 2]
    assert saved["suspects"][1]["suggested"] == "Sneaker"
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in paths if p.suffix == ".png")


def test_audit_run_finds_the_suspects_in_the_out_of_fold_answers(small, small_cv_run, tmp_path):
    """`audit_run` on a finished cv run, written elsewhere (the run is left as it was):
    each training suspect's score is the out-of-fold probability of its given label,
    its suggestion the most probable class; a test suspect's are those of the folds'
    ensemble (a float64 numpy forward pass); `top` outside `1..MAX_TOP` is refused."""
    pytest.importorskip("cleanlab")
    from eqx_fmnist.runs import Run, audit_run
    from eqx_fmnist.state import select_members

    from helpers import fashion_mnist_of, numpy_reference, probabilities_atol

    before = {p.name for p in small_cv_run.iterdir()}
    found = audit_run(small_cv_run, fashion_mnist_of(small), out=tmp_path / "audit", top=3)
    assert {p.name for p in small_cv_run.iterdir()} == before
    oof = np.load(small_cv_run / "out_of_fold.npz")
    train = found["train"]
    assert train.examples == len(small) and len(train.indices) > 0
    np.testing.assert_array_equal(train.given, oof["labels"][train.indices])
    probs = oof["probabilities"][train.indices]
    np.testing.assert_allclose(train.score, probs[np.arange(len(probs)), train.given], atol=1e-6)
    np.testing.assert_array_equal(train.suggested, probs.argmax(1))
    test, images = found["test"], np.asarray(small.images)
    stack = Run.open(small_cv_run).model
    want = numpy_reference(stack, images)["probabilities"][test.indices]
    atol = probabilities_atol([select_members(stack, i) for i in range(2)], images)
    np.testing.assert_allclose(test.score, want[np.arange(len(want)), test.given], atol=atol)
    for name in ("train", "test"):
        rows = json.loads((tmp_path / "audit" / f"suspects_{name}.json").read_text())
        assert [r["index"] for r in rows["suspects"]] == found[name].indices.tolist()
    from eqx_fmnist.runs import MAX_TOP

    for top in (0, MAX_TOP + 1, 10**9):  # a ceiling: each image drawn costs megabytes
        with pytest.raises(ValueError, match=rf"`top` must be an int in 1..{MAX_TOP}"):
            audit_run(small_cv_run, fashion_mnist_of(small), out=tmp_path / "no", top=top)
    assert not (tmp_path / "no").exists()


def test_an_audit_never_replaces_a_reviewed_csv_nor_writes_into_another_run(
    small, small_cv_run, tmp_path
):
    """Audited again, a cv folder's suspects are replaced only with `overwrite`, and a
    CSV edited since the audit wrote it (a reviewed one) never; an audit's `out` in
    another run's folder is refused. Each refusal before anything is written."""
    import shutil

    pytest.importorskip("cleanlab")
    from eqx_fmnist.runs import RunError, audit_run

    from helpers import fashion_mnist_of, recorded

    run = tmp_path / "cv"
    shutil.copytree(small_cv_run, run)
    data = fashion_mnist_of(small)
    audit_run(run, data, top=3)
    with pytest.raises(RunError, match="suspects_train.csv exists; replace it with --overwrite"):
        audit_run(run, data, top=3)
    audit_run(run, data, top=3, overwrite=True)
    reviewed = (run / "suspects_train.csv").read_text() + "7,checked by hand\n"
    (run / "suspects_train.csv").write_text(reviewed)
    with pytest.raises(RunError, match="suspects_train.csv was changed since it was written"):
        audit_run(run, data, top=3, overwrite=True)
    assert (run / "suspects_train.csv").read_text() == reviewed
    other = recorded(tmp_path / "other", {"checkpoint.eqx": "k", "summary.json": "{}"})
    with pytest.raises(RunError, match="holds another run"):
        audit_run(run, data, top=3, out=other)
    assert sorted(p.name for p in other.iterdir()) == [
        ".eqx-fmnist.record",
        "checkpoint.eqx",
        "summary.json",
    ]
