import os
import stat

import pytest


def test_an_atomic_write_gets_the_permissions_open_would_give(tmp_path):
    from eqx_fmnist.fileio import atomic_write

    old = os.umask(0o027)
    try:
        with atomic_write(tmp_path / "a.bin") as f:
            f.write(b"x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a.bin").stat().st_mode) == 0o640


def test_a_failed_atomic_write_leaves_the_old_file_and_no_temporary(tmp_path):
    from eqx_fmnist.fileio import atomic_write

    path = tmp_path / "a.txt"
    path.write_text("old")
    with pytest.raises(RuntimeError), atomic_write(path, "w") as f:
        f.write("new")
        raise RuntimeError("disk on fire")
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["a.txt"]


def test_the_folder_lock_is_the_kernels_not_a_pid_check(tmp_path):
    """A held lock refuses a second writer (naming the holder); a lock file left by a dead
    writer, or naming a live process that holds no lock (a reused pid), is taken over."""
    from eqx_fmnist.fileio import FolderInUse, FolderLock

    path = tmp_path / ".lock"
    with FolderLock(path):
        assert f"pid {os.getpid()} on " in path.read_text()
        with pytest.raises(
            FolderInUse, match=f"another run \\(pid {os.getpid()} on .*\\) is writing"
        ):
            FolderLock(path).__enter__()
    assert not path.exists()
    path.write_text(f"pid {os.getppid()} on elsewhere")  # alive, but it holds no lock
    with FolderLock(path):
        assert f"pid {os.getpid()} on " in path.read_text()


def test_a_failed_write_names_the_file_asked_for_not_the_temporary_one(tmp_path):
    """A disk that fills during a write (the body's OSError carries no file name) is
    reported against the path the caller gave; the temporary file goes."""
    import errno

    from eqx_fmnist.fileio import atomic_write

    path = tmp_path / "summary.json"
    with pytest.raises(OSError) as info:
        with atomic_write(path, "w") as f:
            f.write("{")
            raise OSError(errno.ENOSPC, "No space left on device")
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(path)
    assert list(tmp_path.iterdir()) == []


def test_a_callers_own_os_error_passes_through_unchanged(tmp_path):
    """A `URLError` is an `OSError` without an errno and with another constructor: it
    leaves the block as it came (renaming it once raised a `TypeError`)."""
    import urllib.error

    from eqx_fmnist.fileio import atomic_write

    with pytest.raises(urllib.error.URLError) as info:
        with atomic_write(tmp_path / "x.gz") as f:
            f.write(b"1")
            raise urllib.error.URLError(ConnectionRefusedError(111, "Connection refused"))
    assert isinstance(info.value.reason, ConnectionRefusedError)
    assert list(tmp_path.iterdir()) == []


def test_a_killed_writers_part_files_are_removed_when_a_run_takes_the_folder(tmp_path):
    from eqx_fmnist.config import TrainConfig
    from eqx_fmnist.runs import RunFolder

    stale = tmp_path / ".checkpoint.eqx.k3j2.part"
    stale.write_bytes(b"half a checkpoint")
    (tmp_path / "keep.part").write_text("not ours: no leading dot")
    with RunFolder(tmp_path, TrainConfig(steps=4, batch_size=32), num_train=256):
        pass
    assert not stale.exists() and (tmp_path / "keep.part").exists()


@pytest.mark.parametrize(
    "code, hint",
    [(28, "free some space"), (30, "read-only"), (13, "no permission"), (21, "a folder")],
)
def test_an_os_error_is_one_line_with_the_path_and_what_to_do(code, hint):
    import os

    from eqx_fmnist.fileio import os_error_line

    line = os_error_line(OSError(code, os.strerror(code), "runs/a/summary.json"))
    assert line.startswith(os.strerror(code) + " (runs/a/summary.json); ") and hint in line
    assert "\n" not in line


def test_a_permission_error_says_nothing_of_writing_elsewhere():
    """Reading a file without permission is not helped by `--out`: the hint says what
    fixes either a read or a write."""
    import errno

    from eqx_fmnist.fileio import os_error_line

    line = os_error_line(PermissionError(errno.EACCES, "Permission denied", "data/x.gz"))
    assert "--out" not in line and "permissions" in line


def test_a_full_disk_names_the_flag_the_command_writes_elsewhere_with():
    """`predict --show` has no `--out`: its hint names its own flags, and `data` its
    folder's; the others write elsewhere with `--out`."""
    import errno

    from eqx_fmnist.cli.command import build_parser
    from eqx_fmnist.fileio import os_error_line

    parser = build_parser()
    shows = parser.parse_args(["predict", "run", "x.png", "--show"])
    assert shows.elsewhere == "--show DIR, --explain DIR"
    assert parser.parse_args(["data"]).elsewhere.startswith("--data-dir")
    assert not hasattr(parser.parse_args(["train"]), "elsewhere")

    full = OSError(errno.ENOSPC, "No space left on device", "x.prepared.png")
    assert "write elsewhere (--show DIR, --explain DIR)" in os_error_line(full, shows.elsewhere)
    assert "write elsewhere (--out)" in os_error_line(full)


def test_the_lock_is_never_taken_through_a_link(tmp_path):
    """A symbolic link where the lock file goes would make the lock truncate and rewrite
    its target, outside the folder: it is refused, and the target is left as it was."""
    from eqx_fmnist.fileio import FolderInUse, FolderLock

    outside = tmp_path / "precious.txt"
    outside.write_text("keep me")
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / ".eqx-fmnist.lock").symlink_to(outside)
    with pytest.raises(FolderInUse, match="is a symbolic link"):
        with FolderLock(folder / ".eqx-fmnist.lock"):
            pass
    assert outside.read_text() == "keep me"


def test_a_name_too_long_for_a_temporary_beside_it_is_still_written_atomically(tmp_path):
    """A legal 250-byte name leaves no room for `.NAME.xxxxxxxx.part`: the temporary
    file gets a short stand-in name, and the file lands under its own."""
    from eqx_fmnist.fileio import NAME_MAX, PART, atomic_write

    path = tmp_path / ("m" * 245 + ".json")
    assert len(path.name) == 250 <= NAME_MAX
    seen = []
    with atomic_write(path, "w") as f:
        seen = [p.name for p in tmp_path.iterdir()]
        f.write("{}")
    assert path.read_text() == "{}" and len(seen) == 1 and seen[0].endswith(PART)
    assert len(seen[0]) <= NAME_MAX and not any(p.name.endswith(PART) for p in tmp_path.iterdir())


def test_files_that_belong_together_land_together_or_not_at_all(tmp_path, monkeypatch):
    """An artifact and its manifest: both replaced; when a move fails, neither new file
    stays and no older partner is left beside a new one, and no temporary remains."""
    import errno
    import os

    from eqx_fmnist.fileio import atomic_writes

    artifact = tmp_path / "model.onnx"
    manifest = tmp_path / "model.onnx.manifest.json"
    artifact.write_bytes(b"old")
    manifest.write_bytes(b"old manifest")
    atomic_writes({artifact: b"new", manifest: b"new manifest"})
    assert artifact.read_bytes() == b"new" and manifest.read_bytes() == b"new manifest"
    real = os.replace

    def full_for_the_artifact(src, dst):
        if str(dst).endswith(".onnx"):
            raise OSError(errno.ENOSPC, "No space left on device", str(dst))
        real(src, dst)

    monkeypatch.setattr(os, "replace", full_for_the_artifact)
    with pytest.raises(OSError, match="No space left"):
        atomic_writes({artifact: b"newer", manifest: b"newer manifest"})
    assert sorted(tmp_path.iterdir()) == []
