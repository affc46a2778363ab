"""The in-memory device dataset: arrays on an accelerator, batched inside compiled code.

There is no data loader. The whole split lives on the device as `uint8` pixels (four
times smaller than float32, and a fraction of the bandwidth to gather), and each step
computes its own batch's indices on the device with a keyed bijection
([`permute`][eqx_fmnist.dataset.permute]) and gathers just those rows, so that any
number of steps can run as one `lax.scan` with no per-call set-up. Pixels become `float32` in `[0, 1]`
inside the compiled step, by [`normalize`][eqx_fmnist.dataset.normalize].

The module is kept whole: the examples on the device, their checks, the splits and the
batch order that reads them.
"""

import functools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Bool, Float, Int, Integer, PRNGKeyArray, Shaped, UInt32

from .fashion import IMAGE_SHAPE, IMAGE_SIZE, NUM_CLASSES, FashionMNIST


def normalize(images: Shaped[Array, "*batch features"]) -> Float[Array, "*batch features"]:
    """Scale `uint8` pixels to `float32` in `[0, 1]`; float input is returned unchanged.

    **Arguments:**

    - `images`: pixels of shape `(..., features)` (`(..., 784)` for Fashion-MNIST).

    **Returns:**

    An array of the same shape, floating point.
    """
    if jnp.issubdtype(images.dtype, jnp.floating):
        return images
    return images.astype(jnp.float32) / 255.0


def as_images(
    images: Shaped[Array | np.ndarray, "n ..."], name: str = "images"
) -> Shaped[Array, "n 784"]:
    """`images` as the library's functions take them: `(n, 784)` (a batch `(n, 28, 28)`
    flattened), `uint8` pixels or floats in `[0, 1]`, on the device.

    **Raises:**

    `ValueError` naming `name` for another shape (one image `(784,)` included: pass
    `image[None]`), or floats outside `[0, 1]` or not finite (pixels of 0-255 as floats
    would be read as bright as 255 times their value); `TypeError` for another dtype.
    """
    if not hasattr(images, "shape"):
        raise TypeError(
            f"`{name}` must be an array of shape (n, 784) or (n, 28, 28), not a "
            f"{type(images).__name__}: np.stack(...) turns a list of images into one."
        )
    shape = tuple(images.shape)
    if not (len(shape) == 2 and shape[1] == IMAGE_SIZE) and shape[1:] != (28, 28):
        raise ValueError(
            f"`{name}` must have shape (n, 784) or (n, 28, 28), but got {shape}; for one "
            "image, pass image[None]."
        )
    x = jnp.reshape(jnp.asarray(images), (shape[0], IMAGE_SIZE))
    if x.dtype == jnp.uint8:
        return x
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise TypeError(
            f"`{name}` must be uint8 pixels (0-255) or floats in [0, 1], but got "
            f"{getattr(images, 'dtype', x.dtype)}."
        )
    check_unit_floats(x, name)
    return x


def check_unit_floats(x, name: str) -> None:
    """`ValueError` naming `name` for floats outside `[0, 1]` or not finite (pixels of
    0-255 as floats would be read as bright as 255 times their value); numpy's on the
    host, unseen where traced in a compiled function."""
    xp = np if isinstance(x, np.ndarray) else jnp
    try:
        inside = bool(xp.all((x >= 0) & (x <= 1)))  # NaN is neither
    except jax.errors.ConcretizationTypeError:
        return
    if not inside:
        raise ValueError(
            f"`{name}` holds floats outside [0, 1] or not finite; pixels of 0-255 go in as "
            "uint8 (`x.astype(np.uint8)`), or as floats divided by 255."
        )


class ArrayDataset(eqx.Module):
    """A split held as device arrays: each example's inputs as one flat row (`uint8`
    pixels or floats), its integer label, the examples' shape and the number of
    classes."""

    images: Shaped[Array, "n features"]
    labels: Int[Array, " n"]
    shape: tuple[int, ...] = eqx.field(static=True)
    num_classes: int = eqx.field(static=True)

    def __init__(
        self,
        images: Shaped[Array | np.ndarray, "n ..."],
        labels: Integer[Array | np.ndarray, " n"],
        *,
        num_classes: int = NUM_CLASSES,
        device=None,
    ):
        """**Arguments:**

        - `images`: `n` examples of any shape, `(n, *shape)`: `uint8` pixels (scaled to
            `[0, 1]` inside the compiled step) or floats in `[0, 1]` (taken as they are). Fashion-MNIST's
            are `(n, 28, 28)` (or `(n, 784)`). Each is held as one flat row of
            `features` values, which is what a model is given.
        - `labels`: integer labels of shape `(n,)`, each in `0..num_classes-1` (checked,
            from numpy or JAX arrays alike).
        - `num_classes`: how many classes the labels name (a model's logits). Defaults
            to `10`.
        - `device`: a `jax.Device` or `jax.sharding.Sharding` to place the arrays on.
            Defaults to JAX's default device.
        """
        if not hasattr(images, "shape") or len(images.shape) < 2:
            raise ValueError(
                f"`images` must be an array of n examples, shape (n, ...), but got "
                f"{getattr(images, 'shape', type(images).__name__)}."
            )
        if images.dtype != np.uint8 and not jnp.issubdtype(images.dtype, jnp.floating):
            raise TypeError(
                f"`images` must be uint8 pixels (0..255) or floats, but got dtype "
                f"{images.dtype}: cast integers with `.astype(np.uint8)` (0..255) or to "
                "float32."
            )
        if images.dtype != np.uint8:
            check_unit_floats(images, "images")
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2:
            raise ValueError(
                f"`num_classes` must be an int of at least 2, but got {num_classes!r}."
            )
        n = images.shape[0]
        check_labels(labels, n, num_classes)
        shape = tuple(int(d) for d in images.shape[1:])
        if shape == (IMAGE_SIZE,):  # Fashion-MNIST's flat rows: its images
            shape = IMAGE_SHAPE
        # numpy's own reshape and cast on the host: no program is compiled for them
        xp = np if isinstance(images, np.ndarray) else jnp
        self.images = jax.device_put(xp.reshape(images, (n, math.prod(shape))), device)
        xp = np if isinstance(labels, np.ndarray) else jnp
        self.labels = jax.device_put(xp.asarray(labels, dtype=np.int32), device)
        self.shape = shape
        self.num_classes = num_classes

    def __len__(self) -> int:
        return self.labels.shape[0]

    @property
    def features(self) -> int:
        """The values of one example, flat: the length of the rows a model is given."""
        return math.prod(self.shape)

    @property
    def devices(self) -> set[jax.Device]:  # pyright: ignore[reportInvalidTypeForm]
        """The devices the arrays live on."""
        return set(self.images.devices()) | set(self.labels.devices())

    def to(self, device) -> "ArrayDataset":
        """A copy on another `jax.Device` (or under another sharding)."""
        return jax.device_put(self, device)

    def take(self, indices: Int[Array | np.ndarray, " k"]) -> "ArrayDataset":
        """The examples at `indices`, as a new dataset on the same device."""
        return self._like(*_rows(self.images, self.labels, jnp.asarray(indices)))

    def split(self, n_valid: int, *, key: PRNGKeyArray) -> tuple["ArrayDataset", "ArrayDataset"]:
        """Split off a random validation set of `n_valid` examples, which `key` picks:
        `(train, valid)`, with `len(self) - n_valid` and `n_valid` examples."""
        if not 0 < n_valid < len(self):
            raise ValueError(f"`n_valid` must be in 1..{len(self) - 1}, but got {n_valid}.")
        kept, held_out = _split_order(key, len(self), n_valid)
        return self.take(kept), self.take(held_out)

    def _like(self, images, labels) -> "ArrayDataset":
        """Rows of this dataset (checked already) as a dataset of the same shape and
        classes."""
        return eqx.tree_at(lambda d: (d.images, d.labels), self, (images, labels))


def check_labels(labels, n: int, num_classes: int, name: str = "labels") -> None:
    """`TypeError` unless `labels` are integers (of numpy or JAX); `ValueError` unless
    their shape is `(n,)` and each lies in `0..num_classes-1`, naming the first that
    does not. A traced array (inside a compiled function) is checked for its type and
    shape only."""
    dtype = getattr(labels, "dtype", None)
    if dtype is None or not jnp.issubdtype(dtype, jnp.integer):
        raise TypeError(
            f"`{name}` must be integer class numbers, but got "
            f"{dtype or type(labels).__name__}: cast with `.astype(np.int32)` after "
            "checking that no label is fractional or NaN."
        )
    if tuple(labels.shape) != (n,):
        raise ValueError(f"`{name}` must have shape ({n},), but got {tuple(labels.shape)}.")
    try:
        values = np.asarray(labels)
    except (jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError):
        return  # traced inside a compiled function: unseen
    bad = np.flatnonzero((values < 0) | (values >= num_classes))
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"`{name}` must lie in 0..{num_classes - 1}, but {name}[{i}] is {values[i]} "
            f"({bad.size:,} out of range); give num_classes= for more classes, or "
            "renumber them from 0."
        )


# Compiled whole: run eagerly, each operation of an index (bounds, gather, slices) would
# be a program of its own, compiled for each shape it meets.
@jax.jit
def _rows(images: Array, labels: Array, indices: Array) -> tuple[Array, Array]:
    return images[indices], labels[indices]


@functools.partial(jax.jit, static_argnums=(1, 2))
def _split_order(key: PRNGKeyArray, n: int, n_valid: int) -> tuple[Array, Array]:
    perm = jr.permutation(key, n)
    return perm[n_valid:], perm[:n_valid]


def to_datasets(data: FashionMNIST, *, device=None) -> tuple[ArrayDataset, ArrayDataset]:
    """Put both splits of a [`FashionMNIST`][eqx_fmnist.fashion.FashionMNIST] on a device.

    **Returns:**

    `(train, test)` as [`ArrayDataset`][eqx_fmnist.dataset.ArrayDataset]s.
    """
    train = ArrayDataset(data.train_images, data.train_labels, device=device)
    test = ArrayDataset(data.test_images, data.test_labels, device=device)
    return train, test


VALIDATION_SEED = 20_241_130
"""Fixed seed of the validation split, so every training seed sees the same split."""
CALIBRATION_SEED = 20_261_201
"""Fixed seed of the calibration split (taken after the validation split)."""


class Splits(eqx.Module):
    """The splits of one run, on the device: what [`split_data`][eqx_fmnist.dataset.split_data]
    makes and [`fit`][eqx_fmnist.train.fit] takes.

    **Fields:** `train` (what the model trains on), `test` (the test set, or `None`),
    `validation` (training images held out to tune on, or `None`), `calibration`
    (training images held out to calibrate on after training, or `None`).
    """

    train: ArrayDataset
    test: ArrayDataset | None = None
    validation: ArrayDataset | None = None
    calibration: ArrayDataset | None = None

    def __check_init__(self):
        for name in ("train", "test", "validation", "calibration"):
            value = getattr(self, name)
            if not (isinstance(value, ArrayDataset) or (value is None and name != "train")):
                raise TypeError(
                    f"Splits: `{name}` must be an ArrayDataset (`ef.ArrayDataset(images, "
                    f"labels)`), but got {type(value).__name__}."
                )

    def check_held_out(self, validation_size: int, calibration_size: int) -> None:
        """`ValueError` unless the held-out sets are of these sizes (a config's), so that
        no image a run holds out is trained on without a word."""
        for name, size in (("validation", validation_size), ("calibration", calibration_size)):
            held = getattr(self, name)
            if size and (held is None or len(held) != size):
                raise ValueError(
                    f"the config's {name}_size is {size:,}, but the splits' {name} set holds "
                    f"{0 if held is None else len(held):,} images: make the splits from this "
                    "config's sizes (`ef.split_data(data, validation_size=..., "
                    "calibration_size=...)`, or `ef.runs.run_splits(config)`)."
                )


def split_data(
    data: "FashionMNIST | tuple[ArrayDataset, ArrayDataset | None] | Splits",
    *,
    validation_size: int = 0,
    calibration_size: int = 0,
    device=None,
) -> Splits:
    """The one place a run's splits are made: the training set, less a validation split
    and then a calibration split (fixed random splits: every seed and every run sees
    the same), and the test set.

    **Arguments:**

    - `data`: a [`FashionMNIST`][eqx_fmnist.fashion.FashionMNIST], or `(train, test)`
        [`ArrayDataset`][eqx_fmnist.dataset.ArrayDataset]s (`test` may be `None`), or
        `Splits` already made (returned as they are when no size is given).
    - `validation_size`: training images held out to tune on (`VALIDATION_SEED`).
        Defaults to `0`: none.
    - `calibration_size`: training images held out, after the validation split, to
        calibrate on (`CALIBRATION_SEED`). Defaults to `0`: none.
    - `device`: where a `FashionMNIST`'s arrays go. Defaults to JAX's default device.

    **Returns:**

    [`Splits`][eqx_fmnist.dataset.Splits]; `len(splits.train)` is what a run's
    schedule is planned on.

    !!! example

        ```python
        config = ef.TrainConfig(validation_size=5000)
        splits = ef.split_data(ef.load_fashion_mnist(), validation_size=config.validation_size)
        ```
    """
    if isinstance(data, Splits):
        if validation_size or calibration_size:
            raise ValueError("`data` is already split: give the sizes when you first split it.")
        return data
    if isinstance(data, FashionMNIST):
        train, test = to_datasets(data, device=device)
    else:
        train, test = data
    if validation_size + calibration_size >= len(train):
        raise ValueError(
            f"validation_size {validation_size:,} and calibration_size {calibration_size:,} "
            f"hold out {validation_size + calibration_size:,} of the {len(train):,} training "
            "images and leave none to train on: hold out fewer (--validation-size, "
            "--calibrate)."
        )
    validation = calibration = None
    if validation_size:
        train, validation = train.split(validation_size, key=jr.PRNGKey(VALIDATION_SEED))
    if calibration_size:
        train, calibration = train.split(calibration_size, key=jr.PRNGKey(CALIBRATION_SEED))
    return Splits(train, test, validation, calibration)


def steps_per_epoch(n: int, batch_size: int) -> int:
    """Full batches in an epoch of `n` examples; the remainder is dropped."""
    if batch_size <= 0 or batch_size > n:
        raise ValueError(f"`batch_size` must be in 1..{n} for {n} examples, but got {batch_size}.")
    return n // batch_size


FEISTEL_ROUNDS = 6
"""Rounds of the keyed Feistel network behind [`permute`][eqx_fmnist.dataset.permute]."""


def _mix32(x: UInt32[Array, "*shape"]) -> UInt32[Array, "*shape"]:
    """MurmurHash3's 32-bit finaliser: every input bit flips each output bit with
    probability about 1/2."""
    x = x ^ (x >> 16)
    x = x * jnp.uint32(0x85EBCA6B)
    x = x ^ (x >> 13)
    x = x * jnp.uint32(0xC2B2AE35)
    return x ^ (x >> 16)


def permute(key: PRNGKeyArray, positions: Integer[Array, "*shape"], n: int) -> Int[Array, "*shape"]:
    """A keyed bijection of `0..n-1`, applied elementwise: position -> example index.

    A balanced Feistel network of [`FEISTEL_ROUNDS`][eqx_fmnist.dataset.FEISTEL_ROUNDS]
    rounds permutes the `2b`-bit integers, `2b` the smallest even bit width that holds
    `n - 1`; round `r` maps the halves `(L, R)` to `(R, L ^ h(R ^ k_r))`, with `h`
    MurmurHash3's finaliser and the round keys `k = jr.bits(key, (FEISTEL_ROUNDS,),
    uint32)`. A result outside `0..n-1` is encrypted again until it falls inside
    (cycle-walking), which keeps the map a bijection of `0..n-1`.

    Unlike `jr.permutation`, nothing is sorted and nothing of size `n` is built: the
    cost is a few integer operations per position asked for, so the batch order of any
    step can be computed inside the compiled step itself.

    **Arguments:**

    - `key`: the PRNG key that picks the permutation.
    - `positions`: integers in `0..n-1`, any shape.
    - `n`: the size of the permuted range; static.

    **Returns:**

    `int32` indices of the same shape; distinct positions give distinct indices.
    """
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"`n` must be a positive int, but got {n!r}.")
    half = max(1, ((n - 1).bit_length() + 1) // 2)
    mask = jnp.uint32((1 << half) - 1)
    round_keys = jr.bits(key, (FEISTEL_ROUNDS,), jnp.uint32)

    def encrypt(x):
        left, right = x >> half, x & mask
        for r in range(FEISTEL_ROUNDS):
            left, right = right, left ^ (_mix32(right ^ round_keys[r]) & mask)
        return (left << half) | right

    x = encrypt(positions.astype(jnp.uint32))
    x = jax.lax.while_loop(lambda x: jnp.any(x >= n), lambda x: jnp.where(x >= n, encrypt(x), x), x)
    return x.astype(jnp.int32)


def epoch_indices(key: PRNGKeyArray, n: int, batch_size: int) -> Int[Array, "steps batch"]:
    """An epoch's order: a [`permute`][eqx_fmnist.dataset.permute] of `0..n-1` by `key`,
    cut into full batches (remainder dropped).

    Pure and fixed-shape, so it runs inside `jit`: every index appears at most once, and
    exactly `steps * batch_size` of them appear.
    """
    steps = steps_per_epoch(n, batch_size)
    return permute(key, jnp.arange(steps * batch_size), n).reshape(steps, batch_size)


def batch_indices(
    key: PRNGKeyArray, step: Integer[Array, ""] | int, n: int, batch_size: int
) -> Int[Array, " batch"]:
    """The example indices of global step `step` of a run whose key is `key`.

    Step `s` is batch `s % steps_per_epoch` of epoch `e = s // steps_per_epoch`, whose
    order is `epoch_indices(jr.fold_in(key, e), n, batch_size)`. Only this batch's
    `batch_size` indices are computed, so the order is a pure function of the run's key
    and the global step that costs the same in every step: results do not depend on how
    steps are grouped into compiled calls, and a resumed run continues exactly.

    **Arguments:**

    - `key`: the run's data key.
    - `step`: the global step, from 0; may be traced.
    - `n`: the number of training examples; static.
    - `batch_size`: examples per step; static.

    **Returns:**

    `batch_size` distinct indices in `0..n-1`.
    """
    spe = steps_per_epoch(n, batch_size)
    step = jnp.asarray(step, jnp.int32)
    positions = (step % spe) * batch_size + jnp.arange(batch_size, dtype=jnp.int32)
    return permute(jr.fold_in(key, step // spe), positions, n)


def pad_to_batches(
    x: Shaped[Array, "n *rest"],  # noqa: F821
    batch_size: int,
) -> tuple[Shaped[Array, "steps batch *rest"], Bool[Array, "steps batch"]]:  # noqa: F821
    """Cut `x` into batches along its first axis, padding the last batch.

    **Arguments:**

    - `x`: an array of shape `(n, ...)`.
    - `batch_size`: the batch size.

    **Returns:**

    `(batches, mask)` of shapes `(steps, batch, ...)` and `(steps, batch)` with
    `steps = ceil(n / batch)`. Padding repeats row 0 and is `False` in the mask, so every
    row is counted exactly once.
    """
    n = x.shape[0]
    if not isinstance(batch_size, int) or batch_size <= 0:
        raise ValueError(f"`batch_size` must be a positive int, but got {batch_size}.")
    steps = -(-n // batch_size)
    pad = steps * batch_size - n
    if pad:
        x = jnp.concatenate([x, jnp.broadcast_to(x[:1], (pad, *x.shape[1:]))])
    mask = jnp.arange(steps * batch_size) < n
    return x.reshape(steps, batch_size, *x.shape[1:]), mask.reshape(steps, batch_size)
