"""Concurrent use: two processes filling one empty cache at once."""

import gzip
import json
import os
import subprocess
import sys

import pytest

from helpers import idx_bytes, serve_locally, specs_for, synthetic_arrays

LOADER = """
import json, sys, dataclasses
import eqx_fmnist.data as data
specs = json.loads(sys.argv[1])
data.facts.FILES = {k: data.IdxFile(**v) for k, v in specs.items()}
from pathlib import Path
data.facts.DEBIAN_DIR = Path(sys.argv[3])
fm = data.load_fashion_mnist(mirrors=[sys.argv[2]])
print(len(fm.train_images), fm.source)
"""


@pytest.mark.slow  # cold: compiles several programs or trains on the real data
def test_two_processes_download_into_one_empty_cache(tmp_path):
    import dataclasses

    from eqx_fmnist.data import FILES

    arrays = synthetic_arrays(n_train=2000, n_test=500)
    blobs = {k: gzip.compress(idx_bytes(arrays[k])) for k in FILES}
    specs = specs_for(arrays, blobs)
    server = serve_locally({f"{FILES[k].name}.gz": blobs[k] for k in blobs})
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    args = [
        json.dumps({k: dataclasses.asdict(v) for k, v in specs.items()}),
        server.url + "/a/",
        str(tmp_path / "no-debian"),
    ]
    try:
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", LOADER, *args],
                env=env,
                text=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            for _ in range(2)
        ]
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        server.close()
        for p in procs:
            p.kill()
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
        assert out.startswith("2000 ")
    folder = tmp_path / "cache" / "eqx_fmnist" / "fashion-mnist"
    assert sorted(f.name for f in folder.iterdir()) == sorted(
        f"{s.name}.gz" for s in FILES.values()
    )
    for key, spec in specs.items():  # exactly one verified copy of each, nothing partial
        assert (folder / f"{spec.name}.gz").read_bytes() == blobs[key]
