"""eqx_fmnist: a typed Equinox library that trains an MLP on Fashion-MNIST."""

import importlib.metadata

from . import (
    cache as cache,
    config as config,
    data as data,
    dataset as dataset,
    ensemble as ensemble,
    evaluate as evaluate,
    export as export,
    losses as losses,
    model as model,
    precision as precision,
    state as state,
    step as step,
    train as train,
)
from .cache import (
    compile_cache_dir as compile_cache_dir,
    enable_compile_cache as enable_compile_cache,
)
from .config import TrainConfig as TrainConfig, make_optimizer as make_optimizer
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
    batch_indices as batch_indices,
    epoch_indices as epoch_indices,
    normalize as normalize,
    padded_batches as padded_batches,
    permute as permute,
    to_datasets as to_datasets,
)
from .ensemble import (
    EnsembleResult as EnsembleResult,
    SweepResult as SweepResult,
    fit_ensemble as fit_ensemble,
    sweep as sweep,
)
from .evaluate import (
    EvalResult as EvalResult,
    confusion_matrix as confusion_matrix,
    evaluate as evaluate_model,  # noqa: F401  (eqx_fmnist.evaluate stays the module)
    evaluate_ensemble as evaluate_ensemble,
    member_probabilities as member_probabilities,
    per_class_accuracy as per_class_accuracy,
    predict as predict,
    predict_logits as predict_logits,
    predict_proba as predict_proba,
)
from .losses import accuracy as accuracy, cross_entropy as cross_entropy
from .model import MLP as MLP, count_params as count_params
from .precision import (
    FLOAT32 as FLOAT32,
    MIXED_BF16 as MIXED_BF16,
    MIXED_F16 as MIXED_F16,
    DynamicLossScale as DynamicLossScale,
    NoOpLossScale as NoOpLossScale,
    Policy as Policy,
    StaticLossScale as StaticLossScale,
)
from .state import (
    TrainState as TrainState,
    init_members as init_members,
    init_state as init_state,
)
from .step import (
    compile_steps as compile_steps,
    train_epoch as train_epoch,
    train_step as train_step,
    train_steps as train_steps,
)
from .train import (
    History as History,
    NonFiniteError as NonFiniteError,
    TrainResult as TrainResult,
    fit as fit,
)

__version__ = importlib.metadata.version("eqx_fmnist")
