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
