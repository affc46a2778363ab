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
