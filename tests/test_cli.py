import os
import subprocess
import sys


def run_cli(*args, env=None, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "eqx_fmnist", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "120", **(env or {})},
        timeout=timeout,
    )


def test_data_command_shows_the_splits(real_data):
    out = run_cli("data", "--data-dir", str(real_data.source))
    assert out.returncode == 0, out.stderr
    assert "checksums verified" in out.stdout
    assert "60,000" in out.stdout and "10,000" in out.stdout
    assert out.stdout.count("6,000") == 10 and "Ankle boot" in out.stdout


def test_data_command_without_data_is_one_clear_line(tmp_path, monkeypatch, capsys):
    import eqx_fmnist.cli as cli
    import eqx_fmnist.data as data

    monkeypatch.setattr(data, "DEBIAN_DIR", tmp_path / "no-debian")
    status = cli.main(["data", "--data-dir", str(tmp_path / "none"), "--no-download"])
    err = capsys.readouterr().err
    assert status == 2
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "dataset-fashion-mnist" in err and "no-debian" in err
