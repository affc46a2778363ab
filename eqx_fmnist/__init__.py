"""eqx_fmnist: a typed Equinox library that trains an MLP on Fashion-MNIST."""

import importlib as _importlib
import importlib.metadata as _metadata
import typing as _typing

from . import (
    augment as augment,
    build as build,
    cache as cache,
    calibration as calibration,
    checkpoint as checkpoint,
    config as config,
    data as data,
    dataset as dataset,
    distill as distill,
    ensemble as ensemble,
    evaluation as evaluation,
    hardware as hardware,
    intervals as intervals,
    losses as losses,
    model as model,
    optim as optim,
    parallel as parallel,
    precision as precision,
    robustness as robustness,
    state as state,
    step as step,
    subsets as subsets,
    train as train,
    trust as trust,
)
from .augment import Augmentation as Augmentation
from .build import Examples as Examples, ModelSource as ModelSource, build_model as build_model
from .cache import (
    compile_cache_dir as compile_cache_dir,
    enable_compile_cache as enable_compile_cache,
)
from .calibration import (
    Calibration as Calibration,
    ViewsError as ViewsError,
    calibrate as calibrate,
    calibration_metrics as calibration_metrics,
)
from .checkpoint import (
    load_checkpoint as load_checkpoint,
    save_checkpoint as save_checkpoint,
    save_result as save_result,
)
from .config import (
    TrainConfig as TrainConfig,
)
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
    Splits as Splits,
    normalize as normalize,
    split_data as split_data,
    to_datasets as to_datasets,
)
from .distill import Teacher as Teacher
from .ensemble import (
    CrossValidation as CrossValidation,
    SweepResult as SweepResult,
    cross_validate as cross_validate,
    fit_ensemble as fit_ensemble,
    sweep as sweep,
)
from .evaluation import (
    EvalResult as EvalResult,
    confusion_matrix as confusion_matrix,
    evaluate as evaluate,
    member_probabilities as member_probabilities,
    per_class_accuracy as per_class_accuracy,
    predict as predict,
    predict_logits as predict_logits,
    predict_proba as predict_proba,
)
from .intervals import History as History, NonFiniteError as NonFiniteError
from .losses import (
    Loss as Loss,
    accuracy as accuracy,
    cross_entropy as cross_entropy,
    recipe_loss as recipe_loss,
)
from .model import (
    CNN as CNN,
    MLP as MLP,
    Model as Model,
    Stack as Stack,
    combine as combine,
    count_params as count_params,
    ensemble_log_probs as ensemble_log_probs,
    num_members as num_members,
    per_member as per_member,
)
from .optim import make_optimizer as make_optimizer, make_schedule as make_schedule
from .precision import (
    FLOAT32 as FLOAT32,
    MIXED_BF16 as MIXED_BF16,
    MIXED_F16 as MIXED_F16,
    DynamicLossScale as DynamicLossScale,
    NoOpLossScale as NoOpLossScale,
    Policy as Policy,
    StaticLossScale as StaticLossScale,
)
from .robustness import Robustness as Robustness, evaluate_robustness as evaluate_robustness
from .state import (
    TrainState as TrainState,
    init_members as init_members,
    init_state as init_state,
    select_members as select_members,
)
from .step import (
    compile_steps as compile_steps,
    train_epoch as train_epoch,
    train_step as train_step,
    train_steps as train_steps,
)
from .train import TrainResult as TrainResult, fit as fit
from .trust import trust_moves as trust_moves
from .views import move_images as move_images

__version__ = _metadata.version("eqx_fmnist")

_LAZY = {
    **dict.fromkeys(("answers", "attributions", "audit", "export", "plots", "runs")),
    **dict.fromkeys(("Answer", "answer"), "answers"),
    **dict.fromkeys(("Explanation", "explain"), "attributions"),
    **dict.fromkeys(("LabelAudit", "audit_labels"), "audit"),
    "RunFolder": "runs",
}
"""What imports matplotlib or the answer, export and run-folder machinery: imported where
first used (PEP 562), so that `import eqx_fmnist` pays for none of it."""


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'eqx_fmnist' has no attribute {name!r}")
    module = _importlib.import_module(f".{_LAZY[name] or name}", __name__)
    value = module if _LAZY[name] is None else getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


if _typing.TYPE_CHECKING:  # what the names above are, for a type checker and an editor
    from . import (
        answers as answers,
        attributions as attributions,
        audit as audit,
        export as export,
        plots as plots,
        runs as runs,
    )
    from .answers import Answer as Answer, answer as answer
    from .attributions import Explanation as Explanation, explain as explain
    from .audit import LabelAudit as LabelAudit, audit_labels as audit_labels
    from .runs import RunFolder as RunFolder
