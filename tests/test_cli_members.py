"""`eqx-fmnist train --seeds N`, `eqx-fmnist sweep`, and how evaluate and predict show
an ensemble."""

import json

import numpy as np
import pytest

from helpers import run_cli_here, start_cli

SMALL = ("--hidden", "32", "--log-every", "20")


@pytest.fixture(scope="module")
def ensemble_run(tmp_path_factory, real_data):
    out = tmp_path_factory.mktemp("ens") / "run"
    result = run_cli_here(
        "train",
        "--steps",
        "40",
        "--seeds",
        "3",
        *SMALL,
        "--out",
        out,
        "--data-dir",
        real_data.source,
    )
    assert result.returncode == 0, result.stderr
    return out, result


@pytest.mark.slow
def test_train_with_seeds_writes_one_folder_for_the_ensemble(ensemble_run):
    from eqx_fmnist.checkpoint import load_checkpoint

    out, result = ensemble_run
    text = " ".join(result.stdout.split())  # rich wraps long lines
    assert "3 members in one program (seeds 0-2)" in text
    assert "ensemble (mean probability)" in text
    summary = json.loads((out / "summary.json").read_text())
    assert [m["seed"] for m in summary["members"]] == [0, 1, 2]
    accs = [m["test_accuracy"] for m in summary["members"]]
    assert summary["member_accuracy_mean"] == pytest.approx(np.mean(accs))
    ckpt = load_checkpoint(out / "checkpoint.eqx")
    assert ckpt.step == 40 and [c.seed for c in ckpt.members] == [0, 1, 2]
    assert ckpt.state.model.layers[0].weight.shape == (3, 32, 784)
    lines = (out / "history.jsonl").read_text().splitlines()
    assert [len(json.loads(x)["members"]) for x in lines] == [3, 3]
    for name in ("training_curve.png", "confusion_matrix.png", "predictions.png"):
        assert (out / name).stat().st_size > 1000


@pytest.mark.slow
def test_evaluate_reports_the_ensemble_and_each_member(ensemble_run, real_data):
    out, _ = ensemble_run
    summary = json.loads((out / "summary.json").read_text())
    result = run_cli_here("evaluate", out, "--members", "--data-dir", real_data.source)
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())  # rich wraps long lines
    assert f"ensemble test accuracy {summary['test_accuracy']:.4f}" in text
    for m in summary["members"]:
        assert f"{m['test_accuracy']:.4f}" in text
    assert "member 2" in text


@pytest.mark.slow
def test_predict_uses_the_ensemble_and_can_show_each_member(ensemble_run, real_data, tmp_path):
    from PIL import Image

    import eqx_fmnist as ef

    out, _ = ensemble_run
    Image.fromarray(real_data.test_images[0]).save(tmp_path / "item.png")
    result = run_cli_here("predict", out, tmp_path / "item.png", "--members", "--top", "1")
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())  # rich may wrap the line
    guesses = text.split("(members: ")[1].split(")")[0].split(", ")
    assert len(guesses) == 3 and all(g in ef.CLASS_NAMES for g in guesses), text
    assert "not calibrated" in text  # an ensemble is calibrated with --calibrate too


@pytest.mark.slow
def test_a_sweep_writes_its_table_heatmap_and_all_members(tmp_path, real_data):
    out = tmp_path / "sweep"
    result = run_cli_here(
        "sweep",
        "--steps",
        "20",
        *SMALL,
        "--learning-rate",
        "1e-3,1e-2",
        "--label-smoothing",
        "0,0.1",
        "--seeds",
        "2",
        "--validation-size",
        "2000",
        "--out",
        out,
        "--data-dir",
        real_data.source,
    )
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())  # rich wraps long lines
    assert "8 members in one program" in text and "| rank |" in text
    for name in ("sweep.md", "sweep.json", "sweep_heatmap.png", "checkpoint.eqx"):
        assert (out / name).is_file(), name
    saved = json.loads((out / "sweep.json").read_text())
    assert len(saved["points"]) == 4 and saved["seeds"] == [0, 1]
    means = [p["validation_mean"] for p in saved["points"]]
    assert saved["best"]["index"] == int(np.argmax(means))
    assert saved["config"]["validation_size"] == 2000
    # What the sweep's folder answers and exports is its winner, the table's first row
    # (the winner's two seeds as an ensemble), not the mean of every grid point.
    import jax.tree_util as jtu

    from eqx_fmnist.runs import Run, RunError
    from eqx_fmnist.state import select_members

    run, best = Run.open(out), saved["best"]["index"]
    assert run.winner == [2 * best, 2 * best + 1]
    assert [c.learning_rate for c in run.members] == [saved["best"]["learning_rate"]] * 2
    winner = select_members(run.saved.state.eval_model, run.winner)
    assert all(
        np.array_equal(a, b)
        for a, b in zip(jtu.tree_leaves(run.model), jtu.tree_leaves(winner), strict=True)
    )
    (out / "summary.json").unlink()  # unfinished: no winner to answer with
    with pytest.raises(RunError, match="a grid run without a finished summary.json"):
        Run.open(out).model  # noqa: B018


@pytest.mark.parametrize(
    "args, message",
    [
        (("sweep", "--steps", "5"), "give values to sweep"),
        (("sweep", "--learning-rate", "1e-3,x"), "comma-separated numbers"),
        (("sweep", "--learning-rate", "1e-3,-1"), "learning_rate"),
        (("train", "--seeds", "0", "--steps", "5"), "seeds"),
    ],
)
def test_bad_member_flags_are_one_line_status_2(args, message, tmp_path, real_data, capsys):
    from eqx_fmnist import cli

    argv = ["--no-compile-cache", *args, "--out", str(tmp_path / "x")]
    try:
        status = cli.main([*argv, "--data-dir", str(real_data.source)])
    except SystemExit as e:  # argparse's own usage errors
        status = e.code
    err = capsys.readouterr().err
    assert status == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "x" / "summary.json").exists()


def test_a_single_runs_checkpoint_is_not_a_sweep(tmp_path, capsys):
    from eqx_fmnist import cli
    from eqx_fmnist.checkpoint import save_checkpoint
    from eqx_fmnist.config import TrainConfig
    from eqx_fmnist.state import init_state

    config = TrainConfig(steps=5, hidden_sizes=(8,))
    save_checkpoint(tmp_path / "c.eqx", init_state(config, 100), config, num_train=100)
    # A folder without the data: the checkpoint is refused before the data are looked for.
    (nowhere := tmp_path / "no-data").mkdir()
    argv = ["sweep", "--resume", str(tmp_path / "c.eqx"), "--data-dir", str(nowhere)]
    status = cli.main(["--no-compile-cache", *argv])
    assert status == 2 and "not of a sweep run" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.optimized  # 600 steps and 60 validations of two members
def test_an_interrupted_sweep_resumes_to_the_end(tmp_path, real_data):
    import signal
    import time

    from eqx_fmnist.checkpoint import load_checkpoint

    out = tmp_path / "sweep"
    args = (
        "--steps",
        "600",
        "--hidden",
        "32",
        "--log-every",
        "10",
        "--seeds",
        "1",
        "--learning-rate",
        "1e-3,3e-3",
        "--validation-size",
        "1000",
    )
    proc = start_cli("sweep", *args, "--out", out, "--data-dir", real_data.source)
    try:
        deadline = time.monotonic() + 120
        while not (out / "history.jsonl").exists() or not (out / "history.jsonl").read_text():
            assert time.monotonic() < deadline, "no interval finished in time"
            time.sleep(0.01)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "eqx-fmnist sweep --resume" in err
    stopped_at = load_checkpoint(out / "checkpoint.eqx").step
    assert 10 <= stopped_at < 600
    result = run_cli_here("sweep", "--resume", out, "--data-dir", real_data.source)
    assert result.returncode == 0, result.stderr
    assert f"resuming at step {stopped_at:,}" in " ".join(result.stdout.split())
    history = [json.loads(x) for x in (out / "history.jsonl").read_text().splitlines()]
    assert [h["step"] for h in history] == list(range(10, 601, 10))
    assert json.loads((out / "sweep.json").read_text())["seeds"] == [0]
