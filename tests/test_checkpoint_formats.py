"""What the library saved, it loads: checkpoints and run folders of every format it has
written (the fixtures in `tests/data/checkpoints/`, made by the code of the commits that
wrote each format; see the README there)."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

FIXTURES = Path(__file__).parent / "data" / "checkpoints"
FORMATS = (1, 2, 3)


def test_every_format_has_its_fixtures():
    from eqx_fmnist.checkpoint import FORMAT_VERSION, FORMATS as KNOWN

    assert set(KNOWN) == set(FORMATS) and FORMAT_VERSION == max(FORMATS)
    for fmt in FORMATS:
        for name in ("run/checkpoint.eqx", "members/checkpoint.eqx", "halfway.eqx"):
            header = json.loads(_header_bytes(FIXTURES / f"format{fmt}" / name))
            assert header["format_version"] == fmt, name


def _header_bytes(path: Path) -> bytes:
    from eqx_fmnist.checkpoint import MAGIC

    blob = path.read_bytes()
    n = int.from_bytes(blob[len(MAGIC) : len(MAGIC) + 8], "little")
    return blob[len(MAGIC) + 8 : len(MAGIC) + 8 + n]


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_checkpoint_of_every_format_loads_as_it_was_trained(fmt):
    """Formats 1 and 2 were written before augmentation: their configs lack `shift` and
    `mirror`, which must load as what those runs did (none), not as today's defaults."""
    import eqx_fmnist as ef

    for name, members in (("run", None), ("members", 2)):
        ckpt = ef.load_checkpoint(FIXTURES / f"format{fmt}" / name / "checkpoint.eqx")
        assert ckpt.step == 6 and ckpt.state.num_members == members
        assert ckpt.state.model.layers[0].weight.shape[-2:] == (8, 784)
        assert int(np.asarray(ckpt.state.opt_state.count).max()) == 6  # the schedule's count
        if fmt < 3:
            assert (ckpt.config.shift, ckpt.config.mirror) == (0, False)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_run_stopped_halfway_in_every_format_resumes_to_the_straight_run(fmt, real_splits):
    """The independent computation: the same 12 steps run without stopping by the code
    that wrote the format. The fixtures were made on an AMD EPYC with AVX-512; another CPU
    rounds the float32 sums differently, so the parameters are held to the reference
    runs' cross-machine tolerance (tests/test_reference.py), and on the machine that
    made them they agree to 1e-6."""
    import jax

    import eqx_fmnist as ef

    ckpt = ef.load_checkpoint(FIXTURES / f"format{fmt}" / "halfway.eqx")
    assert ckpt.step == 6 and ckpt.config.steps == 12
    resumed = ef.fit(ckpt.config, real_splits, state=ckpt.state)
    straight = np.load(FIXTURES / f"format{fmt}" / "straight.npz")
    want = [straight[f"arr_{i}"] for i in range(len(straight.files) - 1)]
    got = [np.asarray(x) for x in jax.tree.leaves(resumed.model)]
    assert [g.shape for g in got] == [w.shape for w in want]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=2e-3, atol=1e-4)
    assert abs(resumed.test.accuracy - float(straight["test_accuracy"])) < 0.01


@pytest.mark.slow
@pytest.mark.parametrize("fmt", FORMATS[:-1])
def test_a_run_folder_of_every_format_works_with_every_command(fmt, real_data, tmp_path):
    """evaluate, predict, export and --resume on the run folders as the old code wrote
    them; evaluate gives the test accuracy the old code recorded in summary.json. (The
    current format's run folders are what every other CLI test makes.)"""
    from PIL import Image

    from helpers import run_cli_here as run_cli

    data = ("--data-dir", real_data.source)
    Image.fromarray(255 - real_data.test_images[0]).resize((90, 90)).save(tmp_path / "item.png")
    for name, extra in (("run", ()), ("members", ("--members",))):
        run = tmp_path / name
        shutil.copytree(FIXTURES / f"format{fmt}" / name, run)
        recorded = json.loads((run / "summary.json").read_text())["test_accuracy"]
        evaluated = run_cli("evaluate", run, *extra, *data)
        assert evaluated.returncode == 0, evaluated.stderr[-2000:]
        assert f"accuracy {recorded:.4f}" in " ".join(evaluated.stdout.split())
        assert "Per-class accuracy" in evaluated.stdout
        predicted = run_cli("predict", run, tmp_path / "item.png", *extra)
        assert predicted.returncode == 0, predicted.stderr[-2000:]
        assert predicted.stdout.startswith(str(tmp_path / "item.png"))
        exported = run_cli("export", run, "--out", tmp_path / f"{name}.stablehlo", *data)
        assert exported.returncode == 0, exported.stderr[-2000:]
        assert "0 of 10,000 test images predicted differently" in " ".join(exported.stdout.split())
        # A finished run is read-only to --resume; --overwrite finishes it again.
        refused = run_cli("train", "--resume", run / "checkpoint.eqx", *data)
        assert refused.returncode == 2 and "has finished" in refused.stderr
        resumed = run_cli("train", "--resume", run / "checkpoint.eqx", "--overwrite", *data)
        assert resumed.returncode == 0, resumed.stderr[-2000:]
        config = json.loads((run / "config.json").read_text())
        if fmt < 3:  # written back in today's format, still without augmentation
            assert (config["shift"], config["mirror"]) == (0, False)


def test_a_format_from_the_future_is_refused_with_who_wrote_it_and_who_reads_it(tmp_path):
    import eqx_fmnist as ef
    from eqx_fmnist.checkpoint import MAGIC, CheckpointError

    blob = (FIXTURES / "format3" / "run" / "checkpoint.eqx").read_bytes()
    head = _header_bytes(FIXTURES / "format3" / "run" / "checkpoint.eqx")
    header = json.loads(head)
    header["format_version"], header["versions"]["eqx_fmnist"] = 9, "7.0.0"
    new = json.dumps(header).encode()
    path = tmp_path / "future.eqx"
    path.write_bytes(
        MAGIC + len(new).to_bytes(8, "little") + new + blob[len(MAGIC) + 8 + len(head) :]
    )
    with pytest.raises(
        CheckpointError, match=r"format 9, written by eqx_fmnist 7\.0\.0.*reads formats 1, 2, 3"
    ) as e:
        ef.load_checkpoint(path)
    assert str(path) in str(e.value)
