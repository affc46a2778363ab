import gzip
import hashlib
import os
from pathlib import Path

import numpy as np
import pytest

from helpers import (
    idx_bytes,
    serve_locally,
    specs_for,
    synthetic_arrays,
)


def write_idx(path: Path, array: np.ndarray, *, gz: bool = True) -> Path:
    raw = idx_bytes(array)
    path.write_bytes(gzip.compress(raw) if gz else raw)
    return path


def write_fmnist_dir(folder: Path, arrays: dict[str, np.ndarray], *, gz: bool = True) -> Path:
    from eqx_fmnist.data import FILES

    folder.mkdir(parents=True, exist_ok=True)
    for key, spec in FILES.items():
        write_idx(folder / (spec.name + (".gz" if gz else "")), arrays[key], gz=gz)
    return folder


# ----------------------------------------------------------------------------- parsing


@pytest.mark.parametrize("gz", [True, False])
def test_good_idx_files_parse_to_the_arrays_written(tmp_path, gz):
    from eqx_fmnist.data import IMAGES_MAGIC, LABELS_MAGIC, read_idx

    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, (7, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, (7,), dtype=np.uint8)
    suffix = ".gz" if gz else ""
    got_images = read_idx(write_idx(tmp_path / f"i{suffix}", images, gz=gz), magic=IMAGES_MAGIC)
    got_labels = read_idx(write_idx(tmp_path / f"l{suffix}", labels, gz=gz), magic=LABELS_MAGIC)
    np.testing.assert_array_equal(got_images, images)
    np.testing.assert_array_equal(got_labels, labels)
    assert got_images.dtype == np.uint8


def _bad_files(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    images = np.zeros((3, 28, 28), np.uint8)
    good = idx_bytes(images)
    wrong_magic = bytearray(good)
    wrong_magic[3] = 1  # 2049 (labels) where images are expected
    bad_count = bytearray(good)
    bad_count[4:8] = (5).to_bytes(4, "big")  # header says 5 images, data holds 3
    cases = {
        "bad magic": (bytes(wrong_magic), "magic number 2049, expected 2051"),
        "not unsigned bytes": (b"\x00\x00\x0d\x03" + good[4:], "not an unsigned-byte"),
        "truncated": (good[:-100], "truncated or corrupt"),
        "count disagrees": (bytes(bad_count), "header says shape (5, 28, 28)"),
        "tiny": (b"\x00\x00", "too short"),
    }
    out = {}
    for name, (raw, msg) in cases.items():
        path = tmp_path / f"{name.replace(' ', '_')}.gz"
        path.write_bytes(gzip.compress(raw))
        out[name] = (path, msg)
    not_gzip = tmp_path / "plain_bytes_named.gz"
    not_gzip.write_bytes(good)
    out["non-gzip .gz"] = (not_gzip, "not a valid gzip file")
    cut_gzip = tmp_path / "cut_gzip.gz"
    blob = gzip.compress(good)
    cut_gzip.write_bytes(blob[: len(blob) // 2])
    out["cut gzip stream"] = (cut_gzip, "not a valid gzip file")
    return out


@pytest.mark.parametrize(
    "case",
    [
        "bad magic",
        "not unsigned bytes",
        "truncated",
        "count disagrees",
        "tiny",
        "non-gzip .gz",
        "cut gzip stream",
    ],
)
def test_bad_idx_files_raise_data_error_naming_the_file(tmp_path, case):
    from eqx_fmnist.data import IMAGES_MAGIC, DataError, read_idx

    path, message = _bad_files(tmp_path)[case]
    with pytest.raises(DataError) as info:
        read_idx(path, magic=IMAGES_MAGIC)
    assert str(path) in str(info.value)
    assert message in str(info.value)


def test_parse_is_a_view_not_a_python_loop():
    from eqx_fmnist.data import parse_idx

    raw = idx_bytes(np.arange(2 * 28 * 28, dtype=np.uint32).astype(np.uint8).reshape(2, 28, 28))
    arr = parse_idx(raw, magic=2051)
    assert arr.base is not None  # np.frombuffer view over the bytes
    assert arr[1, 0, 0] == (28 * 28) % 256


# ----------------------------------------------------------------------------- search order


@pytest.fixture
def four_sources(tmp_path, monkeypatch):
    """Four folders with distinguishable synthetic data, one per source."""
    import eqx_fmnist.data as data

    folders = {}
    for i, name in enumerate(["explicit", "env", "cache", "debian"]):
        arrays = synthetic_arrays(n_train=10 + i, n_test=10, seed=i)
        folders[name] = write_fmnist_dir(tmp_path / name, arrays, gz=(i % 2 == 0))
    monkeypatch.setenv("EQX_FMNIST_DATA", str(folders["env"]))
    monkeypatch.setattr(data.facts, "DEBIAN_DIR", folders["debian"])
    cache = data.cache_dir()
    cache.parent.mkdir(parents=True, exist_ok=True)
    folders["cache"].rename(cache)
    folders["cache"] = cache
    return folders


def test_each_source_wins_over_the_ones_after_it(four_sources, monkeypatch):
    import shutil

    from eqx_fmnist.data import load_fashion_mnist

    def n_train(data_dir=None):
        return len(load_fashion_mnist(data_dir, download=False, verify=False).train_images)

    assert n_train(four_sources["explicit"]) == 10
    assert n_train() == 11  # $EQX_FMNIST_DATA
    monkeypatch.delenv("EQX_FMNIST_DATA")
    assert n_train() == 12  # user cache
    shutil.rmtree(four_sources["cache"])
    assert n_train() == 13  # Debian


def test_a_folder_counts_only_with_all_four_files(four_sources):
    from eqx_fmnist.data import find_data_dir

    (four_sources["env"] / "t10k-labels-idx1-ubyte").unlink()
    source, folder = find_data_dir()
    assert folder == four_sources["cache"] and source == "user cache"


def test_an_explicit_folder_without_the_files_is_an_error_not_a_fallback(four_sources):
    import eqx_fmnist.data as data

    (four_sources["explicit"] / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(data.DataNotFoundError) as info:
        data.load_fashion_mnist(four_sources["explicit"], download=False)
    message = str(info.value)
    assert str(four_sources["explicit"]) in message and "t10k-labels-idx1-ubyte" in message
    assert "train-images" not in message  # only what is missing
    with pytest.raises(data.DataNotFoundError, match="does not exist"):
        data.load_fashion_mnist(four_sources["explicit"] / "nope", download=False)


def test_not_found_lists_every_place_and_the_three_fixes(tmp_path, monkeypatch):
    import eqx_fmnist.data as data

    monkeypatch.setattr(data.facts, "DEBIAN_DIR", tmp_path / "no-debian")
    monkeypatch.setenv("EQX_FMNIST_DATA", str(tmp_path / "no-env"))
    with pytest.raises(data.DataNotFoundError) as info:
        data.load_fashion_mnist(download=False)
    message = str(info.value)
    for place in ["no-env", str(data.cache_dir()), "no-debian"]:
        assert place in message
    for fix in ["apt-get install dataset-fashion-mnist", "EQX_FMNIST_DATA", "download"]:
        assert fix in message


# ----------------------------------------------------------------------------- verification


def test_verification_is_remembered_and_redone_when_the_file_changes(tmp_path, monkeypatch):
    import eqx_fmnist.data as data

    arrays = synthetic_arrays()
    folder = write_fmnist_dir(tmp_path / "d", arrays)
    blobs = {k: (folder / f"{s.name}.gz").read_bytes() for k, s in data.facts.FILES.items()}
    monkeypatch.setattr(data.facts, "FILES", specs_for(arrays, blobs))
    calls = []
    real_check = data.store._check_sha256
    monkeypatch.setattr(
        data.store, "_check_sha256", lambda *a: (calls.append(a[2]), real_check(*a))
    )

    data.load_fashion_mnist(folder, download=False)
    assert sorted(calls) == sorted(folder.glob("*.gz"))
    data.load_fashion_mnist(folder, download=False)
    # The sources are remembered (path, size, modification time); the library's own
    # decoded copies, read instead of them, are checked by their content every time.
    assert len(calls) == 8 and all(p.parent.parent == data.decoded_dir() for p in calls[4:])
    changed = folder / "train-labels-idx1-ubyte.gz"
    os.utime(changed, ns=(0, 1_000_000_000))
    data.load_fashion_mnist(folder, download=False)
    assert changed in calls[8:] and sum(p.parent == folder for p in calls[8:]) == 1


def test_wrong_content_fails_verification(tmp_path, monkeypatch):
    import eqx_fmnist.data as data

    folder = write_fmnist_dir(tmp_path / "d", synthetic_arrays())
    with pytest.raises(data.ChecksumError, match="train-images-idx3-ubyte.gz: content"):
        data.load_fashion_mnist(folder, download=False)
    assert len(data.load_fashion_mnist(folder, download=False, verify=False).train_images) == 60


@pytest.mark.parametrize("stamps", ["[]", "null", '"x"', "{not json"])
def test_a_verified_record_of_another_shape_is_ignored_and_rewritten(
    stamps, gz_folder, caplog, monkeypatch
):
    """`verified.json` is a cache: a JSON list, null, a string or no JSON at all counts
    as nothing verified (said in the log), and the next verification writes it whole."""
    import json
    import logging

    import eqx_fmnist.data as data

    folder, _ = gz_folder
    stamp = data.cache_dir().parent / "verified.json"
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(stamps)
    with caplog.at_level(logging.WARNING, logger="eqx_fmnist.data.store"):
        assert len(data.load_fashion_mnist(folder, download=False).train_images) == 60
    assert "not a record of verified files" in caplog.text
    assert isinstance(json.loads(stamp.read_text()), dict)


def test_a_giant_file_is_refused_by_its_size_before_it_is_read(gz_folder, monkeypatch):
    """A sparse 100 GB file named like the training images is refused by its size on
    disk, before a byte is read (it would not fit in memory); so is a gzip file whose
    content runs past the size of the file it is named for."""
    import gzip

    import eqx_fmnist.data as data

    folder, _ = gz_folder
    name = data.facts.FILES["train_images"].name
    (folder / f"{name}.gz").unlink()
    with open(folder / name, "wb") as f:
        f.truncate(100 * 2**30)  # sparse: nothing written
    reads = []
    with monkeypatch.context() as patched:
        patched.setattr(data.idx.Path, "read_bytes", lambda p: reads.append(p))
        with pytest.raises(data.DataError, match=f"{name} holds more than the"):
            data.load_fashion_mnist(folder, download=False)
    assert not reads
    (folder / name).unlink()
    size = data.facts.FILES["train_images"].size
    (folder / f"{name}.gz").write_bytes(gzip.compress(b"\x00" * (size + 1000)))
    with pytest.raises(data.DataError, match=f"{name}.gz holds more than the"):
        data.load_fashion_mnist(folder, download=False)


# ----------------------------------------------------------------------------- decoded cache


@pytest.fixture
def gz_folder(tmp_path, monkeypatch):
    """Four synthetic `.gz` files whose checksums the library is told to expect."""
    import eqx_fmnist.data as data

    arrays = synthetic_arrays()
    folder = write_fmnist_dir(tmp_path / "d", arrays)
    blobs = {k: (folder / f"{s.name}.gz").read_bytes() for k, s in data.facts.FILES.items()}
    monkeypatch.setattr(data.facts, "FILES", specs_for(arrays, blobs))
    return folder, arrays


def _opened_gzips(monkeypatch):
    import eqx_fmnist.data as data

    opened, real_open = [], gzip.open
    monkeypatch.setattr(
        data.idx.gzip, "open", lambda p, *a: (opened.append(Path(p)), real_open(p, *a))[1]
    )
    return opened


def test_a_second_load_reads_decoded_copies_instead_of_gunzipping(gz_folder, monkeypatch):
    import eqx_fmnist.data as data

    folder, arrays = gz_folder
    data.load_fashion_mnist(folder, download=False)
    copies = {p.name: p for p in data.decoded_dir().rglob("*-ubyte")}
    assert len(copies) == 4
    for key, spec in data.facts.FILES.items():  # each copy is the file's decompressed content
        assert copies[spec.name].read_bytes() == idx_bytes(arrays[key])
    opened = _opened_gzips(monkeypatch)
    again = data.load_fashion_mnist(folder, download=False)
    assert opened == []
    np.testing.assert_array_equal(again.train_images, arrays["train_images"])
    np.testing.assert_array_equal(again.test_labels, arrays["test_labels"])
    changed = folder / "t10k-images-idx3-ubyte.gz"
    os.utime(changed, ns=(0, 1_000_000_000))  # the source changed: its copy is stale
    data.load_fashion_mnist(folder, download=False)
    assert opened == [changed]


def test_a_damaged_decoded_copy_is_dropped_and_made_again(gz_folder, monkeypatch):
    import eqx_fmnist.data as data

    folder, arrays = gz_folder
    data.load_fashion_mnist(folder, download=False)
    data.load_fashion_mnist(folder, download=False)  # the copy read once, and remembered
    copy = next(data.decoded_dir().rglob("train-labels-idx1-ubyte"))
    before = copy.stat()
    damaged = bytearray(copy.read_bytes())
    damaged[-1] ^= 0x01  # a label changed, the size and modification time as they were
    copy.write_bytes(bytes(damaged))
    os.utime(copy, ns=(before.st_atime_ns, before.st_mtime_ns))
    got = data.load_fashion_mnist(folder, download=False)
    np.testing.assert_array_equal(got.train_labels, arrays["train_labels"])
    assert copy.read_bytes() == idx_bytes(arrays["train_labels"])


def test_unverified_loads_keep_no_decoded_copy(gz_folder):
    import eqx_fmnist.data as data

    folder, arrays = gz_folder
    got = data.load_fashion_mnist(folder, download=False, verify=False)
    np.testing.assert_array_equal(got.train_labels, arrays["train_labels"])
    assert not data.decoded_dir().exists()


# ----------------------------------------------------------------------------- download


@pytest.fixture
def server(tmp_path, monkeypatch):
    import eqx_fmnist.data as data

    arrays = synthetic_arrays()
    blobs = {k: gzip.compress(idx_bytes(arrays[k])) for k in data.facts.FILES}
    monkeypatch.setattr(data.facts, "FILES", specs_for(arrays, blobs))
    monkeypatch.setattr(data.facts, "DEBIAN_DIR", tmp_path / "no-debian")
    srv = serve_locally({f"{data.facts.FILES[k].name}.gz": blobs[k] for k in blobs})
    srv.arrays = arrays
    yield srv
    srv.close()


def test_good_download_verifies_and_lands_in_the_cache(server):
    import eqx_fmnist.data as data

    progress = []
    fm = data.load_fashion_mnist(
        mirrors=[server.url + "/a/"], progress=lambda *a: progress.append(a)
    )
    assert fm.source == data.cache_dir()
    np.testing.assert_array_equal(fm.test_images, server.arrays["test_images"])
    assert sorted(p.name for p in data.cache_dir().iterdir()) == sorted(
        f"{s.name}.gz" for s in data.facts.FILES.values()
    )
    assert progress[-1][1] == progress[-1][2]  # the last report is complete
    # A second load finds the cache and asks the server for nothing.
    before = len(server.requests)
    data.load_fashion_mnist(mirrors=[server.url + "/a/"])
    assert len(server.requests) == before


@pytest.mark.parametrize("fault", ["corrupt", "cut"])
def test_a_bad_transfer_leaves_nothing_behind(server, fault):
    import eqx_fmnist.data as data

    server.faults["a"] = fault
    with pytest.raises(data.DataNotFoundError) as info:
        data.load_fashion_mnist(mirrors=[server.url + "/a/"])
    reason = "MD5" if fault == "corrupt" else "interrupted"
    assert reason in str(info.value) and server.url + "/a/" in str(info.value)
    assert list(data.cache_dir().iterdir()) == []


def test_404_on_the_first_mirror_falls_back_to_the_second(server):
    import eqx_fmnist.data as data

    server.faults["a"] = "404"
    fm = data.load_fashion_mnist(mirrors=[server.url + "/a/", server.url + "/b/"])
    np.testing.assert_array_equal(fm.train_labels, server.arrays["train_labels"])
    assert any(r.startswith("/a/") for r in server.requests)


def test_the_final_error_lists_every_url_and_why(server):
    import eqx_fmnist.data as data

    server.faults.update(a="404", b="corrupt")
    with pytest.raises(data.DownloadError) as info:
        data.download_fashion_mnist(mirrors=[server.url + "/a/", server.url + "/b/"])
    message = str(info.value)
    assert f"{server.url}/a/train-images-idx3-ubyte.gz: Not Found" in message
    assert f"{server.url}/b/train-images-idx3-ubyte.gz: MD5" in message
    assert list(data.cache_dir().iterdir()) == []


def test_a_refused_connection_is_one_line_and_leaves_nothing(server):
    """A machine whose sockets are refused (no network): urllib raises a `URLError`
    inside the temporary file's block, and the error says which URL and why."""
    import socket

    import eqx_fmnist.data as data

    with socket.socket() as s:  # a port that was free a moment ago: nothing listens
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(data.DownloadError) as info:
        data.download_fashion_mnist(mirrors=[f"http://127.0.0.1:{port}/"], timeout=5.0)
    assert f"http://127.0.0.1:{port}/train-images-idx3-ubyte.gz: " in str(info.value)
    assert "refused" in str(info.value).lower()
    assert list(data.cache_dir().iterdir()) == []


def test_only_https_mirrors_are_accepted():
    import eqx_fmnist.data as data

    with pytest.raises(ValueError, match="not HTTPS"):
        data.download_fashion_mnist(mirrors=["http://example.com/"])


# ----------------------------------------------------------------------------- real data


def test_real_data_shapes_counts_and_checksums(real_data):
    import eqx_fmnist.data as data

    assert real_data.train_images.shape == (60_000, 28, 28)
    assert real_data.test_images.shape == (10_000, 28, 28)
    assert real_data.train_images.dtype == np.uint8
    np.testing.assert_array_equal(np.bincount(real_data.train_labels), [6000] * 10)
    np.testing.assert_array_equal(np.bincount(real_data.test_labels), [1000] * 10)
    # Verified from a cold stamp: the library hashes and accepts the files found ...
    fm = data.load_fashion_mnist(real_data.source, download=False, verify=True)
    np.testing.assert_array_equal(fm.test_labels, real_data.test_labels)
    # ... and an independent hash of the decompressed files agrees with DESIGN.md.
    expected = {
        "t10k-labels-idx1-ubyte": "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
        "train-labels-idx1-ubyte": "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
    }
    for name, digest in expected.items():
        path = real_data.source / f"{name}.gz"
        raw = (
            gzip.decompress(path.read_bytes())
            if path.is_file()
            else (path.with_suffix("")).read_bytes()
        )
        assert hashlib.sha256(raw).hexdigest() == digest
