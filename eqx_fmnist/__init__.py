"""eqx_fmnist: a typed Equinox library that trains an MLP on Fashion-MNIST."""

import importlib.metadata

from . import data as data, dataset as dataset
from .data import (
    CLASS_NAMES as CLASS_NAMES,
    ChecksumError as ChecksumError,
    DataError as DataError,
    DataNotFoundError as DataNotFoundError,
    DownloadError as DownloadError,
    FashionMNIST as FashionMNIST,
    download_fashion_mnist as download_fashion_mnist,
    load_fashion_mnist as load_fashion_mnist,
    read_idx as read_idx,
)
from .dataset import (
    ArrayDataset as ArrayDataset,
    epoch_indices as epoch_indices,
    normalize as normalize,
    padded_batches as padded_batches,
    to_datasets as to_datasets,
)

__version__ = importlib.metadata.version("eqx_fmnist")
