"""Checkpoints: one file holding a JSON header and the state's leaves, written atomically.

The layout of a checkpoint file:

1. the magic line `EQX-FMNIST-CHECKPOINT\\n`;
2. the header's length as 8 bytes, little-endian, then the header: UTF-8 JSON with the
   format version, the step, the `TrainConfig`, the training-set size, the library,
   JAX and Equinox versions, and the SHA-256 and length of the payload;
3. the payload: the state's array leaves from `eqx.tree_serialise_leaves`.

A checkpoint of members trained as one program (an ensemble or a sweep) holds their
stacked state, and its header lists each member's `seed` and batched numbers under
`"members"`; loading rebuilds the stack with
[`init_members`][eqx_fmnist.state.init_members].

Loading rebuilds the state's skeleton from the saved config, as shapes alone
(`eqx.filter_eval_shape` of `init_state` or `init_members`: nothing is compiled or
allocated), and reads the leaves into it, so nothing is ever unpickled. The header's
checksum (`header_sha256`, over its other fields) and the payload's are checked first: a
truncated or altered file raises instead of loading as valid but wrong.

The module is kept whole: the file's layout, its checks and every earlier format's
migration, read and written in one place.
"""

import dataclasses
import datetime
import hashlib
import io
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import equinox as eqx
import jax.tree_util as jtu
import optax

from .build import FASHION, Examples, ModelSource
from .checks import door
from .config import TrainConfig
from .fileio import atomic_write, digest
from .hardware import library_versions
from .model import CNN, MLP, Model
from .parallel import to_local
from .state import PER_MEMBER, TrainState, init_members, init_state
from .train import TrainResult

MAGIC = b"EQX-FMNIST-CHECKPOINT\n"
FORMAT_VERSION = 3
"""The format this version writes. Every earlier one loads, migrated (`FORMATS`)."""

FORMATS = {
    1: "AdamW as a plain optax.adamw chain; no augmentation (written by eqx_fmnist 0.1.0)",
    2: "the learning rate and weight decay injected as arrays of the optimiser state; "
    "no augmentation (eqx_fmnist 0.1.0)",
    3: "an optional weight average; augmentation (eqx_fmnist 0.1.0 and 0.2.0)",
}
"""Each checkpoint format this library has written, and what set it apart."""

_BEFORE_AUGMENTATION = {"shift": 0, "mirror": False}
"""What a config of format 1 or 2 meant by the fields it did not have yet: those runs
trained on the images as they are (today's defaults move and mirror them)."""


HEADER_FIELDS = {"format_version": int, "step": int, "payload_bytes": int, "payload_sha256": str}
"""The header fields every checkpoint format has, and their JSON types."""


class CheckpointError(ValueError):
    """A checkpoint is missing, truncated, corrupt, or does not fit the config."""


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """A loaded checkpoint: the state, the config it was trained with, and its header.

    For members trained as one program, `state` is their stack, `members` their configs
    and `config` member 0's; otherwise `members` is `None`.
    """

    state: TrainState
    config: TrainConfig
    num_train: int
    metadata: dict[str, Any]
    members: tuple[TrainConfig, ...] | None = None

    @property
    def step(self) -> int:
        return int(self.metadata["step"])

    @property
    def model(self) -> Model:
        """The model the run evaluates: its weight average where it kept one
        (`ema_decay`), else the trained weights (`state.eval_model`; `state.model` is
        always the last step's own weights)."""
        return self.state.eval_model

    @property
    def choice(self) -> dict[str, Any] | None:
        """What the members are, as saved (`kind` and its numbers); `None` for one run,
        or members saved before the choice was recorded."""
        choice = self.metadata.get("members_choice")
        return choice if isinstance(choice, dict) else None


def save_checkpoint(
    path: str | os.PathLike,
    state: TrainState,
    config: TrainConfig,
    *,
    num_train: int,
    members: Sequence[TrainConfig] | None = None,
    choice: Mapping[str, Any] | None = None,
    run_folder: Mapping[str, Any] | None = None,
    examples: Examples = FASHION,
) -> Path:
    """Write `state` and `config` to `path` atomically.

    The file is written under a temporary name in the same folder, flushed to disk, and
    moved into place with `os.replace`: a crash leaves the previous checkpoint (if any)
    untouched and never a half-written one.

    **Arguments:**

    - `path`: the file to write, conventionally `*.eqx`.
    - `state`: the state to save.
    - `config`: the config it was trained with.
    - `num_train`: the size of its training set (the schedule's length depends on it).
    - `members`: for a stacked state, each member's config (`config` is then the one
        they share). Defaults to `None`: one run.
    - `choice`: what the members are ([`Members.to_dict`][eqx_fmnist.hooks.Members.to_dict]:
        seeds, a grid, folds, ...), so that a resume rebuilds the same choice. Defaults
        to `None`.
    - `run_folder`: the run folder's own choices (its checkpoint cadence), so that a
        resume keeps them. Defaults to `None`.
    - `examples`: the training data's [`Examples`][eqx_fmnist.build.Examples] (what the
        library's model was built for). Defaults to Fashion-MNIST's.

    A model or an optimiser of your own is named in the header (`model_class`,
    `optimizer: "own"`): loading it needs the same model and optimiser again.

    In a multi-process run every process calls it at the same step, because members
    split over processes are gathered first (a collective); keep process 0's file (the
    others write to a scratch path).

    **Returns:**

    The path written.
    """
    path = Path(path)
    stacked = state.num_members
    if (stacked is None) != (members is None) or (members and len(members) != stacked):
        raise ValueError(
            f"save_checkpoint: the state holds {stacked or 'no'} stacked members but "
            f"{'no' if members is None else len(members)} member configs were given."
        )
    buffer = io.BytesIO()
    eqx.tree_serialise_leaves(buffer, to_local(state))
    payload = buffer.getvalue()
    header = {
        "format_version": FORMAT_VERSION,
        "step": state.global_step,
        "config": config.to_dict(),
        "num_train": int(num_train),
        **_own_parts(state, examples),
        **({} if members is None else {"members": [_member_fields(c) for c in members]}),
        **({} if choice is None else {"members_choice": dict(choice)}),
        **({} if run_folder is None else {"run_folder": dict(run_folder)}),
        "versions": library_versions(),
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "payload_bytes": len(payload),
        "payload_sha256": hashlib.sha256(payload).hexdigest(),
    }
    header["header_sha256"] = digest(header)
    head = json.dumps(header).encode()
    with atomic_write(path, fsync=True) as f:
        f.write(MAGIC + len(head).to_bytes(8, "little") + head + payload)
    return path


def save_result(path: str | os.PathLike, result: TrainResult) -> Path:
    """Save what [`fit`][eqx_fmnist.train.fit] returned: its state, config (each
    member's, for members) and training-set size, as
    [`save_checkpoint`][eqx_fmnist.checkpoint.save_checkpoint] writes them; the path.
    [`load_checkpoint`][eqx_fmnist.checkpoint.load_checkpoint] reads it back, and its
    `.model` is the model `result.model` was.

    !!! example

        ```python
        result = ef.fit(config, splits)
        ef.save_result("model.eqx", result)
        model = ef.load_checkpoint("model.eqx").model  # as result.model
        ```
    """
    members = result.configs if result.num_members is not None else None
    return save_checkpoint(
        path,
        to_local(result.state),
        result.config,
        num_train=result.num_train,
        members=members,
        examples=result.examples,
    )


def _own_parts(state: TrainState, examples: Examples) -> dict[str, Any]:
    """What the header records of the parts a run was given instead of the recipe's:
    a model of your own's class (`model_class`), that the optimiser is your own, and
    the data's features and classes where they are not Fashion-MNIST's."""
    own: dict[str, Any] = {}
    if not isinstance(state.model, MLP | CNN):
        kind = type(state.model)
        own["model_class"] = f"{kind.__module__}.{kind.__qualname__}"
    if state.settings.schedule is None:
        own["optimizer"] = "own"
    if examples != FASHION:
        own["examples"] = dataclasses.asdict(examples)
    return own


def _member_fields(config: TrainConfig) -> dict[str, Any]:
    return {name: getattr(config, name) for name in PER_MEMBER}


def read_header(path: str | os.PathLike) -> tuple[dict[str, Any], bytes]:
    """The parsed header and the raw payload of a checkpoint file, checksum checked.

    **Raises:**

    `CheckpointError` naming the file and what is wrong with it.
    """
    path = Path(path)
    try:
        with open(path, "rb") as f:
            header = _head(f, path)
            size = os.fstat(f.fileno()).st_size - f.tell()  # read only if it is the size
            payload = f.read() if size == header.get("payload_bytes") else b""
    except FileNotFoundError:
        raise CheckpointError(f"no checkpoint at {path}.") from None
    except IsADirectoryError:
        raise CheckpointError(f"{path} is a folder, not a checkpoint file.") from None
    except OSError as e:
        raise CheckpointError(f"cannot read checkpoint {path}: {e}") from e
    _check_header_digest(path, header)
    for name, kind in HEADER_FIELDS.items():
        if type(header.get(name)) is not kind:
            what = "missing" if name not in header else f"{header[name]!r}"
            wanted = "an int" if kind is int else "a string"
            raise CheckpointError(
                f"{path}: the header's `{name}` is {what}, not {wanted}: the file is damaged; "
                "use an earlier checkpoint."
            )
    version = header["format_version"]
    expected_bytes = header["payload_bytes"]
    expected_sha = header["payload_sha256"]
    if version not in FORMATS:
        versions = header.get("versions")
        wrote = versions.get("eqx_fmnist") if isinstance(versions, dict) else None
        wrote = wrote or "an unknown version"
        raise CheckpointError(
            f"{path}: checkpoint format {version!r}, written by eqx_fmnist {wrote}; this "
            f"eqx_fmnist ({library_versions()['eqx_fmnist']}) reads formats "
            f"{', '.join(map(str, FORMATS))}: load it with eqx_fmnist {wrote} or newer."
        )
    if size != expected_bytes or hashlib.sha256(payload).hexdigest() != expected_sha:
        raise CheckpointError(
            f"{path}: the payload is truncated or corrupt ({size:,} bytes, expected "
            f"{expected_bytes:,}, or its SHA-256 differs); use an earlier checkpoint."
        )
    return header, payload


def _check_header_digest(path: Path, header: dict[str, Any]) -> None:
    """`CheckpointError` for a header whose fields are not those written (its
    `header_sha256` differs); a header from before it recorded one is read as before."""
    if "header_sha256" not in header:
        return
    written = header["header_sha256"]
    if written != digest({k: v for k, v in header.items() if k != "header_sha256"}):
        raise CheckpointError(
            f"{path}: the header is damaged (its SHA-256 differs from the one written, "
            "header_sha256); use an earlier checkpoint."
        )


def payload_digest(path: str | os.PathLike) -> str:
    """The SHA-256 of a checkpoint's payload, read from its header alone: what a file
    that belongs to that checkpoint records of it (a run's calibration, a distilled run's
    record of its teacher), so that a stale or replaced file is told apart.

    **Raises:**

    `CheckpointError` naming the file when its header cannot be read.
    """
    path = Path(path)
    try:
        with open(path, "rb") as f:
            header = _head(f, path)
        payload = header["payload_sha256"]
        if not isinstance(payload, str):
            raise ValueError("no payload checksum")
    except (OSError, KeyError, TypeError) as e:  # `_head`'s own refusals pass as they are
        raise CheckpointError(f"{path} is not a readable checkpoint ({e}).") from None
    _check_header_digest(path, header)
    return payload


MAX_HEADER_BYTES = 16 * 2**20
"""The largest header a checkpoint may have (a sweep's thousands of members' numbers fit
many times over): a length field past it, or past the file's end, is a damaged file, not
an allocation."""


def _head(f, path: Path) -> dict[str, Any]:
    """A checkpoint's header, read from the open file `f` at its start: its magic line
    checked before anything else is read, its length bounded by `MAX_HEADER_BYTES` and
    the file's size before it is read (a flipped bit in the length is one line, never
    a `MemoryError`); the payload is left unread."""
    if f.read(len(MAGIC)) != MAGIC:
        raise CheckpointError(f"{path} is not an eqx_fmnist checkpoint (no header line).")
    length = int.from_bytes(f.read(8), "little")
    if length > min(MAX_HEADER_BYTES, os.fstat(f.fileno()).st_size - f.tell()):
        raise CheckpointError(
            f"{path}: the header's length field says {length:,} bytes, more than the file "
            "holds or a header takes: the file is damaged; use an earlier checkpoint."
        )
    try:
        header = json.loads(f.read(length))
        if not isinstance(header, dict):
            raise ValueError("header is not a JSON object")
    except (ValueError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path}: the header is truncated or corrupt ({e}).") from e
    return header


def check_compatible(saved: TrainConfig, config: TrainConfig) -> None:
    """Raise `CheckpointError` if `saved` and `config` differ in the model or its state."""
    diffs = [
        f"{name} {getattr(saved, name)!r} (config: {getattr(config, name)!r})"
        for name in TrainConfig.state_fields()
        if getattr(saved, name) != getattr(config, name)
    ]
    if diffs:
        raise CheckpointError(
            "the checkpoint was trained with " + ", ".join(diffs) + "; train with the "
            "checkpoint's settings or start a new run."
        )


@door
def load_checkpoint(
    path: str | os.PathLike,
    *,
    expect: TrainConfig | None = None,
    model: ModelSource = None,
    optimizer: optax.GradientTransformation | None = None,
) -> Checkpoint:
    """Load a checkpoint written by [`save_checkpoint`][eqx_fmnist.checkpoint.save_checkpoint].

    **Arguments:**

    - `path`: the file.
    - `expect`: a config the checkpoint must fit (same hidden sizes, precision, ...).
        Defaults to `None`: take the saved config as it is.
    - `model`: for a model of your own (trained with `fit(..., model=...)`), the same
        model or constructor, which gives the structure the saved arrays fill (the
        header names its class, `model_class`). Defaults to `None`: the library's model
        the saved config names.
    - `optimizer`: for a run trained with an optimiser of your own (`fit(...,
        optimizer=...)`), the same Optax transformation: it gives the structure of the
        saved optimiser state and trains the state on. Defaults to `None`: the recipe's.

    **Returns:**

    A [`Checkpoint`][eqx_fmnist.checkpoint.Checkpoint]; `fit(checkpoint.config,
    splits, state=checkpoint.state)` continues the run exactly where it stopped.

    **Raises:**

    `CheckpointError` when the file is missing, not a checkpoint, truncated, corrupt,
    from another format version, or does not fit `expect`.
    """
    header, payload = read_header(path)
    version = header["format_version"]
    try:
        saved = dict(header["config"])
        if version < 3:
            saved = {**_BEFORE_AUGMENTATION, **saved}
        config = TrainConfig.from_dict(saved)
        num_train = int(header["num_train"])
        members = header.get("members")
        if members is not None:
            members = tuple(config.with_changes(**m) for m in members)
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"{path}: the saved config cannot be read ({e}).") from e
    if expect is not None:
        check_compatible(config, expect)
    parts = _parts_given(path, header, model, optimizer)
    try:
        if version == 1:
            state = _from_format_1(payload, config, members, num_train, path)
        else:  # format 2 holds the same arrays as 3 without a weight average (None)
            if members is None:
                skeleton = eqx.filter_eval_shape(init_state, config, num_train, **parts)
            else:
                skeleton = eqx.filter_eval_shape(init_members, members, num_train, **parts)
            state = eqx.tree_deserialise_leaves(io.BytesIO(payload), skeleton)
    except CheckpointError:
        raise
    except Exception as e:  # equinox raises several types for a mismatched tree
        raise CheckpointError(
            f"{path}: the saved arrays do not fit a model and optimiser built from its "
            f"config ({e})."
        ) from e
    return Checkpoint(state, config, num_train, header, members)


def _parts_given(path, header: dict[str, Any], model, optimizer) -> dict[str, Any]:
    """What the state is rebuilt from besides its config: the `model` and `optimizer`
    given (refused unless the header says the run had its own), and the examples the
    header records. `CheckpointError` names what to give."""
    own = header.get("model_class")
    if own is not None and model is None:
        raise CheckpointError(
            f"{path} holds a model of your own, {own}: load it with "
            f"load_checkpoint(path, model=...) given its class or constructor."
        )
    if header.get("optimizer") == "own" and optimizer is None:
        raise CheckpointError(
            f"{path} was trained with an optimiser of your own: load it with "
            "load_checkpoint(path, optimizer=...) given the same Optax transformation."
        )
    if header.get("optimizer") != "own" and optimizer is not None:
        raise CheckpointError(
            f"{path} was trained with the recipe's optimiser: load it without `optimizer`."
        )
    try:
        examples = Examples(**header.get("examples", {}))
    except TypeError as e:
        raise CheckpointError(f"{path}: the saved examples cannot be read ({e}).") from e
    return {"model": model, "optimizer": optimizer, "examples": examples}


def _adam_state(opt_state) -> optax.ScaleByAdamState:
    """The AdamW moments inside an optimiser state, wherever the chain puts them."""
    is_adam = lambda x: isinstance(x, optax.ScaleByAdamState)  # noqa: E731
    return next(x for x in jtu.tree_leaves(opt_state, is_leaf=is_adam) if is_adam(x))


def _from_format_1(payload: bytes, config, members, num_train: int, path) -> TrainState:
    """A state of today's layout from a format-1 payload.

    Format 1 stored the model, a plain AdamW chain's state (Adam's count and moments,
    then the schedule's count), the step, the key and the loss scale, and no numbers of
    its own for a run or for members that differed only in seed. Those arrays go into a
    freshly built state in their new places: the schedule's count becomes the injected
    optimiser's count (the schedule reads it), the moments and their count stay Adam's,
    and the injected learning rate and weight decay are the config's (each step
    overwrites the rate before it is used).
    """
    if members is not None and any(
        getattr(m, f) != getattr(config, f) for m in members for f in PER_MEMBER if f != "seed"
    ):
        raise CheckpointError(
            f"{path}: a format-1 checkpoint of members with different numbers (a sweep) "
            "cannot be migrated; retrain the sweep with this version."
        )
    fresh = init_state(config, num_train) if members is None else init_members(members, num_train)
    old_layout = (
        fresh.model,
        (_adam_state(fresh.opt_state), fresh.opt_state.count),
        fresh.step,
        fresh.key,
        fresh.loss_scale,
    )
    model, (adam, schedule_count), step, key, loss_scale = eqx.tree_deserialise_leaves(
        io.BytesIO(payload), old_layout
    )
    return eqx.tree_at(
        lambda s: (
            s.model,
            _adam_state(s.opt_state),
            s.opt_state.count,
            s.step,
            s.key,
            s.loss_scale,
        ),
        fresh,
        (model, adam, schedule_count, step, key, loss_scale),
    )
