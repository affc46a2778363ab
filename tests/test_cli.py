import numpy as np
import pytest

from helpers import run_cli, run_cli_here, start_cli


def test_data_command_shows_the_splits(real_data):
    out = run_cli_here("data", "--data-dir", str(real_data.source))
    assert out.returncode == 0, out.stderr
    assert "checksums verified" in out.stdout
    assert "60,000" in out.stdout and "10,000" in out.stdout
    assert out.stdout.count("6,000") == 10 and "Ankle boot" in out.stdout


def test_data_command_without_data_is_one_clear_line(tmp_path, monkeypatch, capsys):
    import eqx_fmnist.cli.command as cli
    import eqx_fmnist.data as data

    monkeypatch.setattr(data.facts, "DEBIAN_DIR", tmp_path / "no-debian")
    status = cli.main(["data", "--no-download"])
    err = capsys.readouterr().err
    assert status == 2
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "dataset-fashion-mnist" in err and "no-debian" in err


@pytest.mark.parametrize("command", ["data", "train"])
def test_an_empty_data_dir_is_an_error_not_a_silent_fallback(command, tmp_path, capsys, real_data):
    """The Debian copy is installed, but an explicit folder is never replaced by it."""
    import eqx_fmnist.cli.command as cli

    empty = tmp_path / "empty-folder"
    empty.mkdir()
    out = tmp_path / "run"
    extra = ["--steps", "5", "--out", str(out)] if command == "train" else []
    status = cli.main([command, "--data-dir", str(empty), *extra])
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert str(empty) in err and "train-images-idx3-ubyte" in err
    assert not out.exists()


# ----------------------------------------------------------------------------- train & co


def _train_args(out, real_data) -> list:
    return ["train", "--steps", 60, "--log-every", 20, "--out", out, "--data-dir", real_data.source]


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory, real_data):
    """A short run, trained in this process: the folder the other commands read."""
    out = tmp_path_factory.mktemp("runs") / "run"
    result = run_cli_here(*_train_args(out, real_data))
    assert result.returncode == 0, result.stderr
    return out, result


@pytest.mark.slow  # a CLI process, compiling into an empty cache
def test_train_keeps_compiled_programs_and_writes_a_profile(tmp_path, real_data):
    import gzip
    import json

    out = tmp_path / "run"
    result = run_cli(
        *_train_args(out, real_data),
        "--profile",
        env={"EQX_FMNIST_COMPILE_CACHE": str(tmp_path / "compile-cache")},
    )
    assert result.returncode == 0, result.stderr
    cached = list((tmp_path / "compile-cache").iterdir())
    assert any(p.name.startswith("jit__steps") for p in cached), sorted(p.name for p in cached)
    traces = list((out / "profile").rglob("perfetto_trace.json.gz"))
    assert len(traces) == 1 and str(traces[0]) in result.stdout.replace("\n", "")
    with gzip.open(traces[0], "rt") as f:
        events = json.load(f)["traceEvents"]
    # Intervals 2 and 3 were traced: the training chunk ran in the trace, twice.
    runs = {
        e["args"]["run_id"] for e in events if e.get("args", {}).get("hlo_module") == "jit__steps"
    }
    assert len(runs) == 2


@pytest.mark.slow  # cold: compiles several programs or trains on the real data
@pytest.mark.figures
def test_train_writes_a_complete_run_folder(trained_run):
    import json

    import jax
    from PIL import Image

    from eqx_fmnist.runs import TIME_SPLIT

    out, result = trained_run
    files = ["config.json", "history.jsonl", "summary.json", "checkpoint.eqx"]
    figures = ["examples.png", "training_curve.png", "predictions.png"]
    figures += ["confusion_matrix.png", "reliability.png", "robustness.png"]
    for name in files + figures:
        assert (out / name).is_file(), name
    summary = json.loads((out / "summary.json").read_text())
    for key in (
        "test_accuracy",
        "test_loss",
        "examples_per_sec",
        "projected_tokens_per_sec",
        "compile_seconds",
        "train_seconds",
        "per_class_accuracy",
    ):
        assert key in summary
    # The run's device as JAX names its kind ("TPU v5 lite"), or "cpu".
    device = jax.devices()[0]
    kind = "cpu" if device.platform == "cpu" else device.device_kind
    assert summary["matmul_products"] == "float32 (highest)" and summary["device"] == kind
    assert summary["test_count"] == 10_000 and summary["test_accuracy"] > 0.5  # chance: 0.1
    history = [json.loads(x) for x in (out / "history.jsonl").read_text().splitlines()]
    assert [h["step"] for h in history] == [20, 40, 60]
    for name, min_size in [
        ("examples.png", (800, 300)),
        ("training_curve.png", (600, 300)),
        ("predictions.png", (1000, 1000)),
        ("confusion_matrix.png", (800, 700)),
    ]:
        with Image.open(out / name) as im:
            assert im.size[0] >= min_size[0] and im.size[1] >= min_size[1], (name, im.size)
            pixels = np.asarray(im.convert("L"))
        assert pixels.std() > 10, f"{name} looks blank"
    assert (
        "Test results (10,000 images)" in result.stdout and "tokens/sec projected" in result.stdout
    )
    # Where the wall time went: every part, none negative; the training calls' wall time
    # as the summary's own throughput implies (60 steps of 512 at its examples/sec), at
    # least the host's waits for them (the rest ran while the host logged).
    seconds = summary["seconds"]
    assert list(seconds) == list(TIME_SPLIT) and min(seconds.values()) >= 0
    assert seconds["checkpoints"] > 0 and seconds["figures"] > 0 and seconds["report"] > 0
    trained = summary["train_seconds"]
    assert trained == pytest.approx(60 * 512 / summary["examples_per_sec"], rel=0.01, abs=2e-3)
    assert trained >= 0.99 * (seconds["steps"] + seconds["host_reads"])
    assert "time (s): load " in result.stdout and "figures " in result.stdout


def test_evaluate_reproduces_the_summary(trained_run, real_data):
    import json

    out, _ = trained_run
    summary = json.loads((out / "summary.json").read_text())
    result = run_cli_here("evaluate", str(out), "--data-dir", str(real_data.source))
    assert result.returncode == 0, result.stderr
    assert f"test accuracy {summary['test_accuracy']:.4f}" in result.stdout
    assert "Per-class accuracy" in result.stdout and "Ankle boot" in result.stdout


def test_predict_classifies_a_png_of_a_test_image(trained_run, real_data, tmp_path):
    import jax.numpy as jnp
    from PIL import Image

    from eqx_fmnist.checkpoint import load_checkpoint
    from eqx_fmnist.data import CLASS_NAMES
    from eqx_fmnist.evaluation import predict

    out, _ = trained_run
    model = load_checkpoint(out / "checkpoint.eqx").state.model
    images = real_data.test_images[:50]
    pred = np.asarray(predict(model, jnp.asarray(images.reshape(50, -1))))
    i = int(np.nonzero(pred == real_data.test_labels[:50])[0][0])
    # Scaled up 4x, as a user's image would not be 28 x 28.
    Image.fromarray(images[i]).resize((112, 112)).save(tmp_path / "item.png")
    Image.fromarray(255 - images[i]).save(tmp_path / "dark_on_light.png")
    result = run_cli_here("predict", str(out), str(tmp_path / "item.png"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.split(": ", 1)[1].startswith(CLASS_NAMES[real_data.test_labels[i]])
    result = run_cli_here("predict", str(out), str(tmp_path / "dark_on_light.png"), "--invert")
    assert result.stdout.split(": ", 1)[1].startswith(CLASS_NAMES[real_data.test_labels[i]])


@pytest.mark.figures
def test_predict_explain_writes_the_attribution_figure_of_the_shown_class(trained_run, tmp_path):
    import json

    from PIL import Image

    from eqx_fmnist.data import CLASS_NAMES

    out, _ = trained_run
    Image.fromarray(np.full((40, 30), 255, np.uint8)).save(tmp_path / "white.png")
    Image.fromarray(np.eye(28, dtype=np.uint8) * 255).save(tmp_path / "line.png")
    images = [str(tmp_path / n) for n in ("white.png", "line.png")]
    result = run_cli_here(
        "predict", str(out), *images, "--json", "--explain", str(tmp_path / "why")
    )
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    for record, name in zip(records, ("white", "line"), strict=True):
        figure = tmp_path / "why" / f"{name}.explained.png"
        assert record["explained"] == str(figure)
        with Image.open(figure) as png:
            assert png.size[0] > 500  # a PNG of three panels
        assert record["top"][0]["class"] in CLASS_NAMES


@pytest.mark.parametrize(
    "case",
    [
        "missing checkpoint",
        "not a checkpoint",
        "unreadable image",
        "bad precision",
        "negative batch size",
        "bad hidden",
        "resume with flags",
        "shift larger than the image",
        "teacher not a run",
        "teacher missing",
        "explain an artifact",
        "seed past 2**32",
        "sweep of no seeds",
        "config nested too deeply",
        "out under a file",
        "out empty",
    ],
)
def test_bad_input_is_one_line_status_2_and_writes_nothing(case, tmp_path, trained_run):
    out_dir = tmp_path / "out"
    junk = tmp_path / "junk.eqx"
    junk.write_bytes(b"not a checkpoint at all")
    artifact = tmp_path / "model.stablehlo"  # refused by its kind, before it is read
    artifact.write_bytes(b"")
    (tmp_path / "model.stablehlo.manifest.json").write_text("{}")
    text = tmp_path / "image.png"
    text.write_text("this is not a PNG")
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    args = {
        "missing checkpoint": ["evaluate", str(tmp_path / "nope"), "--out", str(out_dir)],
        "not a checkpoint": ["evaluate", str(junk), "--out", str(out_dir)],
        "unreadable image": ["predict", str(trained_run[0]), str(text)],
        "bad precision": ["train", "--precision", "p=f32,c=f8", "--out", str(out_dir)],
        "negative batch size": ["train", "--batch-size", "-5", "--out", str(out_dir)],
        "bad hidden": ["train", "--hidden", "256,x", "--out", str(out_dir)],
        "shift larger than the image": ["train", "--shift", "30", "--out", str(out_dir)],
        "teacher not a run": ["train", "--teacher", str(junk), "--out", str(out_dir)],
        "teacher missing": ["train", "--teacher", str(tmp_path / "nope"), "--out", str(out_dir)],
        "explain an artifact": ["predict", str(artifact), str(text), "--explain", str(out_dir)],
        "seed past 2**32": ["train", "--seed", str(2**32), "--out", str(out_dir)],
        "sweep of no seeds": ["sweep", "--lr", "1e-3,3e-3", "--seeds", "0", "--out", str(out_dir)],
        "config nested too deeply": ["train", "--config", str(deep), "--out", str(out_dir)],
        "out under a file": ["evaluate", str(trained_run[0]), "--out", str(text / "figures")],
        "out empty": ["train", "--out", ""],
        "resume with flags": [
            "train",
            "--resume",
            str(trained_run[0]),
            "--lr",
            "0.1",
            "--out",
            str(out_dir),
        ],
    }[case]
    result = run_cli_here(*args)
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.rstrip("\n").splitlines()  # no blank line before it either
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "error" in lines[0]
    assert not out_dir.exists() or not any(out_dir.iterdir())


@pytest.mark.parametrize(
    "case, phrase",
    [
        ("train --out FILE", "is a file, not a folder"),
        ("data --data-dir FILE", "is a file, not a folder"),
        ("a value swept twice", "lists 0.001 more than once"),
        ("an artifact without its manifest", "manifest model.stablehlo.manifest.json is not"),
    ],
)
def test_a_path_or_a_grid_is_named_for_what_it_is(case, phrase, tmp_path, real_data, monkeypatch):
    """The error says what is wrong with the thing given: a file where a folder was
    wanted, a grid value given twice (the same member would be trained and ranked
    twice), an export separated from its manifest (not 'not a checkpoint')."""
    from PIL import Image

    monkeypatch.setenv("EQX_FMNIST_DATA", str(real_data.source))
    file, image = tmp_path / "a-file", tmp_path / "shoe.png"
    file.write_text("x")
    Image.new("L", (28, 28)).save(image)
    (tmp_path / "model.stablehlo").write_bytes(b"an artifact")
    args = {
        "train --out FILE": ["train", "--steps", "1", "--out", file],
        "data --data-dir FILE": ["data", "--data-dir", file],
        "a value swept twice": ["sweep", "--lr", "1e-3,1e-3", "--out", tmp_path / "s"],
        "an artifact without its manifest": ["predict", tmp_path / "model.stablehlo", image],
    }[case]
    result = run_cli_here(*args)
    assert result.returncode == 2, (result.stdout, result.stderr)
    (line,) = result.stderr.strip().splitlines()
    assert phrase in line, line
    assert file.read_text() == "x" and not (tmp_path / "s").exists()


def test_train_refuses_a_folder_with_results(trained_run, real_data):
    out, _ = trained_run
    data = ("--data-dir", str(real_data.source))
    result = run_cli_here("train", "--steps", "1", "--out", str(out), *data)
    assert result.returncode == 2 and "--overwrite" in result.stderr


@pytest.mark.slow  # a CLI process
def test_resume_continues_the_step_count_and_history(tmp_path, real_data):
    import json

    from eqx_fmnist.checkpoint import save_checkpoint
    from eqx_fmnist.config import TrainConfig
    from eqx_fmnist.dataset import to_datasets
    from eqx_fmnist.state import init_state
    from eqx_fmnist.step import train_steps

    config = TrainConfig(steps=60, log_every=20)
    train, _ = to_datasets(real_data)
    state, _ = train_steps(init_state(config, len(train)), train, batch_size=512, num_steps=20)
    run = tmp_path / "run"
    run.mkdir()
    save_checkpoint(run / "checkpoint.eqx", state, config, num_train=len(train))
    (run / "history.jsonl").write_text(
        json.dumps({"step": 20, "loss": 1.0, "accuracy": 0.5}) + "\n"
    )
    result = run_cli_here(
        "train", "--resume", str(run / "checkpoint.eqx"), "--data-dir", str(real_data.source)
    )
    assert result.returncode == 0, result.stderr
    assert "resuming at step 20" in result.stdout
    history = [json.loads(x) for x in (run / "history.jsonl").read_text().splitlines()]
    assert [h["step"] for h in history] == [20, 40, 60]
    assert json.loads((run / "summary.json").read_text())["steps"] == 60


@pytest.mark.slow  # a CLI process
@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_an_interrupted_run_keeps_a_loadable_checkpoint(sig, tmp_path, real_data):
    """A signal stops the run at the end of the interval, after a checkpoint, whatever
    the checkpoint cadence (60 s by default: none was due yet)."""
    import json
    import signal
    import time

    from eqx_fmnist.checkpoint import load_checkpoint

    out = tmp_path / "run"
    args = ("--steps", 100000, "--log-every", 10, "--hidden", 32)
    proc = start_cli("train", *args, "--out", out, "--data-dir", real_data.source)
    try:
        deadline = time.monotonic() + 120
        while not (out / "history.jsonl").exists() or not (out / "history.jsonl").read_text():
            assert time.monotonic() < deadline, "no interval finished in time"
            time.sleep(0.01)
        assert not (out / "checkpoint.eqx").exists()  # the cadence has not come round
        proc.send_signal(getattr(signal, sig))
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "interrupted" in err and "--resume" in err and "Traceback" not in err
    ckpt = load_checkpoint(out / "checkpoint.eqx")
    last = json.loads((out / "history.jsonl").read_text().splitlines()[-1])
    assert ckpt.step == last["step"] >= 10 and ckpt.step % 10 == 0
    assert not (out / ".eqx-fmnist.lock").exists()


def test_an_internal_type_error_is_a_bug_with_a_traceback_not_a_usage_error(monkeypatch):
    import eqx_fmnist.cli.command as cli
    import eqx_fmnist.cli.info as info

    def broken(args):
        raise TypeError("unsupported operand type(s) for +: 'int' and 'str'")

    monkeypatch.setattr(info, "cmd_data", broken)
    with pytest.raises(TypeError, match="unsupported operand"):
        cli.main(["--no-compile-cache", "data"])


def test_a_finished_run_is_read_only_to_resume(trained_run, tmp_path):
    """`train --resume` of a finished run, into its folder or into another run's, is one
    line and changes nothing (it once rewrote the summary's timings as 0)."""
    import shutil

    run, _ = trained_run
    summary = (run / "summary.json").read_bytes()
    other = tmp_path / "other"
    shutil.copytree(run, other)
    for out in ((), ("--out", str(other))):
        result = run_cli_here("train", "--resume", str(run / "checkpoint.eqx"), *out)
        assert result.returncode == 2, result.stdout
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert (run / "summary.json").read_bytes() == summary
    assert (other / "summary.json").read_bytes() == summary


def test_help_lists_the_exit_statuses():
    result = run_cli_here("--help")
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    for status in ("0 done", "1 training stopped on a NaN", "2 bad input", "130 interrupted"):
        assert status in text


def test_a_signal_a_run_in_the_suites_process_took_is_passed_on_to_the_suite(monkeypatch):
    """`timeout`'s SIGTERM to the suite, taken by a command's run in the suite's process
    (`run_cli_here`), ends the suite as it would have ended the command's process."""
    import signal
    import types

    from eqx_fmnist.runs.writing import RunFolder

    import helpers

    raised = []
    monkeypatch.setattr(signal, "raise_signal", raised.append)
    with helpers._signals_taken_by_runs() as taken:
        folder = types.SimpleNamespace(_stop_reason=None)
        RunFolder.request_stop(folder, "interrupted (SIGTERM)")  # what its handler does
    assert folder._stop_reason == "interrupted (SIGTERM)"  # the run still stops
    helpers.pass_on_signals(taken)
    helpers.pass_on_signals(["the time limit was reached"])  # not a signal
    assert raised == [signal.SIGTERM]


# ------------------------------------------------------ no output destroys, one line


def test_an_export_never_replaces_a_runs_checkpoint_or_an_artifact_unasked(
    trained_run, real_data, tmp_path
):
    """`export --out RUN/checkpoint.eqx` is refused (the run's only checkpoint stays);
    an artifact there already is replaced only with `--overwrite`; another run's folder
    is never written into."""
    import shutil

    out, _ = trained_run
    data = ("--data-dir", real_data.source)
    before = (out / "checkpoint.eqx").read_bytes()
    refused = run_cli_here("export", out, "--out", out / "checkpoint.eqx", *data)
    assert refused.returncode == 2 and "command's own file" in refused.stderr
    assert (out / "checkpoint.eqx").read_bytes() == before
    other = tmp_path / "other"
    shutil.copytree(out, other)
    into = run_cli_here("export", out, "--out", other / "model.stablehlo", *data)
    assert into.returncode == 2 and "holds another run" in into.stderr
    target = tmp_path / "m.stablehlo"
    assert run_cli_here("export", out, "--out", target, *data).returncode == 0
    again = run_cli_here("export", out, "--out", target, *data)
    assert again.returncode == 2 and "--overwrite" in again.stderr
    assert run_cli_here("export", out, "--out", target, "--overwrite", *data).returncode == 0


def test_evaluate_writes_into_no_other_run_and_predict_names_never_collide(
    trained_run, real_data, tmp_path, monkeypatch
):
    """`evaluate A --out B` refuses B when B is a run (its figures are B's); two photos
    of one name in different folders give two files, not one over the other; a second
    `--show` into the same folder is refused without `--overwrite`."""
    import shutil

    from PIL import Image

    out, _ = trained_run
    other = tmp_path / "other"
    shutil.copytree(out, other)
    figure = (other / "confusion_matrix.png").read_bytes()
    refused = run_cli_here("evaluate", out, "--out", other, "--data-dir", real_data.source)
    assert refused.returncode == 2 and "holds another run" in refused.stderr
    assert (other / "confusion_matrix.png").read_bytes() == figure
    photos = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        photos.append(tmp_path / name / "x.png")
        Image.fromarray(real_data.test_images[len(photos)]).save(photos[-1])
    shown = tmp_path / "shown"
    said = run_cli_here("predict", out, *photos, "--show", shown)
    assert said.returncode == 0, said.stderr
    assert sorted(p.name for p in shown.iterdir()) == ["x-2.prepared.png", "x.prepared.png"]
    again = run_cli_here("predict", out, *photos, "--show", shown)
    assert again.returncode == 2 and "--overwrite" in again.stderr
    assert run_cli_here("predict", out, *photos, "--show", shown, "--overwrite").returncode == 0


def test_a_lock_file_that_is_a_link_is_refused_and_its_target_untouched(real_data, tmp_path):
    out = tmp_path / "r"
    out.mkdir()
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me")
    (out / ".eqx-fmnist.lock").symlink_to(precious)
    refused = run_cli_here("train", "--steps", 4, "--out", out, "--data-dir", real_data.source)
    assert refused.returncode == 2 and "symbolic link" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert precious.read_text() == "keep me"


def test_a_resume_refuses_a_teacher_it_would_ignore(trained_run, real_data):
    out, _ = trained_run
    refused = run_cli_here("train", "--resume", out / "checkpoint.eqx", "--teacher", "nowhere")
    assert refused.returncode == 2 and "drop --teacher" in refused.stderr


def test_sigterm_before_training_ends_as_interrupted_not_killed(real_data, monkeypatch, capsys):
    """Run as a program (`main()` reading its own command line), SIGTERM is Ctrl-C: a
    command not yet training ends with status 130 and one line, as the table says."""
    import signal
    import sys

    import eqx_fmnist.cli.command as cli
    import eqx_fmnist.cli.common as common

    def terminated(args):
        signal.raise_signal(signal.SIGTERM)

    monkeypatch.setattr(common, "load_data", terminated)
    monkeypatch.setattr(cli.info, "load_data", terminated)
    monkeypatch.setattr(sys, "argv", ["eqx-fmnist", "data"])
    before = signal.getsignal(signal.SIGTERM)
    assert cli.main() == 130
    assert capsys.readouterr().err.strip() == "eqx-fmnist: interrupted"
    assert signal.getsignal(signal.SIGTERM) is before  # given back
    assert "130  interrupted" in cli.EXIT_STATUSES and "143" in cli.EXIT_STATUSES


@pytest.mark.slow  # trains a CNN teacher (stopped, continued) and its student
@pytest.mark.optimized  # the teacher's table: its CNN on 50 views of every image
def test_a_distilled_recipe_stopped_while_its_teacher_trains_continues_by_its_own_command(
    real_data, tmp_path, monkeypatch
):
    """Stopped during the teacher, the command says how to continue the whole recipe
    (its own command, the folder named, quoted for a shell); that command continues the
    teacher from its checkpoint, then trains the student."""
    import shlex

    import eqx_fmnist.config
    from eqx_fmnist.runs.writing import RunFolder

    from helpers import use_a_slice

    use_a_slice(real_data, monkeypatch, 2048, 500)
    monkeypatch.setattr(eqx_fmnist.config, "TEACHER_EPOCHS", 2)
    out = tmp_path / "my run [1]"
    args = ["train", "--distilled", "--epochs", "1", "--hidden", "32", "--log-every", "4"]
    real = RunFolder.callback

    def stop_the_teacher(self, record, state):
        if self.folder.name == "teacher":
            self.request_stop("stopped by the test")
        real(self, record, state)

    with monkeypatch.context() as patched:
        patched.setattr(RunFolder, "callback", stop_the_teacher)
        stopped = run_cli_here(*args, "--out", out, "--overwrite")
    assert stopped.returncode == 130, stopped.stderr
    command = stopped.stderr.split("continue with `")[1].split("`")[0]
    argv = shlex.split(command)
    assert argv[0] == "eqx-fmnist" and "--overwrite" not in argv
    assert argv[argv.index("train") :][: len(args)] == list(map(str, args))
    assert argv[argv.index("--out") + 1] == str(out)
    again = run_cli_here(*argv[1:])
    assert again.returncode == 0, again.stderr
    assert "resuming at step 4" in again.stdout and again.stdout.count("Test results") == 2


@pytest.mark.slow  # CLI processes, each starting JAX
@pytest.mark.parametrize("platforms", ["cuda", "bogus"])
def test_a_backend_jax_platforms_names_but_this_machine_lacks_is_one_line(platforms, tmp_path):
    """`JAX_PLATFORMS` naming a backend that cannot start: one line naming the variable
    and the fix, exit 2, nothing written (a bare `AssertionError` deep in JAX before)."""
    import shutil

    if platforms == "cuda" and shutil.which("nvidia-smi"):
        pytest.skip("a GPU machine: its cuda backend starts")
    out = tmp_path / "run"
    result = run_cli("train", "--steps", 2, "--out", out, env={"JAX_PLATFORMS": platforms})
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert f"JAX_PLATFORMS='{platforms}'" in result.stderr and "unset it" in result.stderr
    assert not out.exists()


@pytest.mark.slow  # CLI processes, each importing JAX
@pytest.mark.parametrize("setting", ["JAX_ENABLE_X64", "JAX_DISABLE_JIT"])
def test_a_jax_setting_a_run_cannot_keep_is_refused_in_one_line(setting, tmp_path):
    """64-bit JAX (other random draws than the config names) and jit disabled (no
    ahead-of-time compilation): one line naming the variable, exit 2, nothing written."""
    out = tmp_path / "run"
    result = run_cli("train", "--steps", 2, "--out", out, env={setting: "1"})
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert f"{setting} is set, but" in result.stderr and "unset it" in result.stderr
    assert not out.exists()


def test_a_zero_width_terminal_and_a_closed_pipe(real_data):
    """`COLUMNS=0` prints the tables (at 80 columns), not nothing; a reader that closes
    the pipe early ends the command quietly (exit 1, no traceback)."""
    import os
    import subprocess
    import sys

    from conftest import real_data_dir

    env = {"EQX_FMNIST_DATA": str(real_data_dir()[0]), "COLUMNS": "0"}
    shown = run_cli("data", env=env)
    assert shown.returncode == 0 and "Ankle boot" in shown.stdout, shown.stderr
    command = [sys.executable, "-m", "eqx_fmnist", "data"]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, **env}
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()
    with process.stderr:
        assert process.wait(timeout=120) == 1
        assert "Traceback" not in process.stderr.read().decode()


def test_evaluate_refuses_a_run_in_use_before_it_prints(trained_run):
    """`evaluate` of a run whose folder another process writes: refused in one line
    before a result is printed (it printed the results, then failed on the lock)."""
    from eqx_fmnist.fileio import FolderLock
    from eqx_fmnist.runs import LOCK_NAME

    out, _ = trained_run
    with FolderLock(out / LOCK_NAME):
        result = run_cli_here("evaluate", out)
    assert result.returncode == 2 and "is writing to" in result.stderr
    assert result.stdout == ""
