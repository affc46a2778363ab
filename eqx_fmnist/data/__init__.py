"""Fashion-MNIST files: finding, downloading, verifying and parsing them into numpy.

This package has no JAX in it. It turns the four IDX files of Fashion-MNIST into
`uint8` numpy arrays. An explicit `data_dir` is the only folder looked in (a folder
without the four files is an error naming what is missing); otherwise the first of
these that holds all four files, gzipped (`*.gz`) or raw:

1. the folder named by `$EQX_FMNIST_DATA`;
2. the user cache, `$XDG_CACHE_HOME/eqx_fmnist/fashion-mnist` (default
   `~/.cache/eqx_fmnist/fashion-mnist`);
3. Debian's `/usr/share/datasets/fashion-mnist` (`apt install dataset-fashion-mnist`).

When no folder has them, the files are downloaded into the user cache over HTTPS and
accepted only after their checksums match. The modules: `facts` (classes, files,
checksums, places), `errors`, `idx` (parsing), `store` (finding, remembered
verification, the decoded-array cache), `download`, `load` (`load_fashion_mnist`),
`images` (users' own pictures).
"""

from . import facts as facts, idx as idx, store as store
from .download import download_fashion_mnist as download_fashion_mnist
from .errors import (
    ChecksumError as ChecksumError,
    DataError as DataError,
    DataNotFoundError as DataNotFoundError,
    DownloadError as DownloadError,
)
from .facts import (
    CLASS_NAMES as CLASS_NAMES,
    DEBIAN_DIR as DEBIAN_DIR,
    ENV_VAR as ENV_VAR,
    FILES as FILES,
    IMAGE_SHAPE as IMAGE_SHAPE,
    IMAGE_SIZE as IMAGE_SIZE,
    IMAGES_MAGIC as IMAGES_MAGIC,
    LABELS_MAGIC as LABELS_MAGIC,
    MIRRORS as MIRRORS,
    NUM_CLASSES as NUM_CLASSES,
    IdxFile as IdxFile,
    ProgressFn as ProgressFn,
)
from .idx import parse_idx as parse_idx, read_idx as read_idx
from .images import (
    PreparedImage as PreparedImage,
    load_image as load_image,
    prepare_image as prepare_image,
)
from .load import FashionMNIST as FashionMNIST, load_fashion_mnist as load_fashion_mnist
from .store import (
    cache_dir as cache_dir,
    candidate_dirs as candidate_dirs,
    decoded_dir as decoded_dir,
    files_in as files_in,
    find_data_dir as find_data_dir,
)
