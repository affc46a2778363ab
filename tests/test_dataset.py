import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from helpers import cpu, feistel_order, synthetic_arrays


def _synthetic_dataset(n=60):
    from eqx_fmnist.dataset import ArrayDataset

    arrays = synthetic_arrays(n_train=n)
    return ArrayDataset(arrays["train_images"], arrays["train_labels"]), arrays


def test_dataset_holds_flat_uint8_pixels_and_int_labels_on_a_device():
    ds, arrays = _synthetic_dataset()
    assert ds.images.shape == (60, 784) and ds.images.dtype == jnp.uint8
    assert ds.labels.dtype == jnp.int32 and len(ds) == 60
    np.testing.assert_array_equal(np.asarray(ds.images), arrays["train_images"].reshape(60, -1))
    assert ds.devices == {jax.devices()[0]}
    moved = ds.to(cpu())
    assert moved.devices == {cpu()}
    assert moved.images.committed


def test_normalize_scales_to_unit_interval_like_numpy():
    from eqx_fmnist.dataset import normalize

    pixels = np.arange(256, dtype=np.uint8).reshape(1, 256).repeat(4, 1)[:, :784]
    got = normalize(jnp.asarray(pixels))
    assert got.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(got), pixels.astype(np.float64) / 255, rtol=1e-6)
    already = jnp.full((784,), 0.5)
    assert normalize(already) is already


@pytest.mark.parametrize(
    "images, labels, error, match",
    [
        (np.zeros((3, 28, 28), np.int32), np.zeros(3, np.uint8), TypeError, "uint8"),
        (np.zeros(3, np.uint8), np.zeros(3, np.uint8), ValueError, "shape"),
        # The annotation catches this one first under the test suite's type checker.
        (np.zeros((3, 28, 28), np.uint8), np.array([0.0, 1.5, 1.0]), TypeError, "labels"),
        # The annotation catches this one first under the test suite's type checker.
        (np.zeros((3, 28, 28), np.uint8), np.zeros(2, np.uint8), (ValueError, TypeError), "labels"),
        (np.zeros((3, 28, 28), np.uint8), np.array([0, 10, 1], np.uint8), ValueError, "0..9"),
    ],
)
def test_bad_arrays_are_refused_with_a_clear_error(images, labels, error, match):
    from eqx_fmnist.dataset import ArrayDataset

    with pytest.raises(error, match=match):
        ArrayDataset(images, labels)


def test_epoch_permutation_visits_every_index_once(real_datasets):
    from eqx_fmnist.dataset import epoch_indices

    train, _ = real_datasets
    idx = np.asarray(jax.jit(epoch_indices, static_argnums=(1, 2))(jr.key(0), len(train), 500))
    assert idx.shape == (120, 500)
    np.testing.assert_array_equal(np.sort(idx.ravel()), np.arange(60_000))
    # With a batch that does not divide 60,000 the remainder is dropped, nothing repeats,
    # and another epoch's key gives another order.
    indices = jax.jit(epoch_indices, static_argnums=(1, 2))
    idx512, other = (np.asarray(indices(jr.key(k), len(train), 512)) for k in (0, 1))
    assert idx512.shape == (117, 512) and len(np.unique(idx512)) == 117 * 512
    assert not np.array_equal(idx512, other)


@pytest.mark.parametrize("n", [1, 2, 3, 7, 16, 17, 255, 256, 257, 1000, 4097, 60_000])
def test_permute_is_a_bijection_that_matches_its_definition(n):
    from eqx_fmnist.dataset import FEISTEL_ROUNDS, permute

    key = jr.fold_in(jr.key(3), n)
    got = np.asarray(jax.jit(permute, static_argnums=2)(key, np.arange(n, dtype=np.int32), n))
    np.testing.assert_array_equal(np.sort(got), np.arange(n))
    round_keys = np.asarray(jr.bits(key, (FEISTEL_ROUNDS,), jnp.uint32))
    np.testing.assert_array_equal(got, feistel_order(round_keys, n))
    # Elementwise: any subset of positions, in any shape, maps as the whole range does.
    positions = np.arange(n)[::-1][: 2 * (n // 2)].reshape(2, -1)
    np.testing.assert_array_equal(
        np.asarray(jax.jit(permute, static_argnums=2)(key, jnp.asarray(positions), n)),
        got[positions],
    )


def test_permute_mixes_like_a_random_permutation():
    """Batches of a class-sorted set hold each class about equally often (chi-square near
    its 9 degrees of freedom, as for `jr.permutation`), and order and index are unrelated."""
    from eqx_fmnist.dataset import epoch_indices

    n, batch = 60_000, 512
    labels = np.repeat(np.arange(10), n // 10)
    indices = jax.jit(epoch_indices, static_argnums=(1, 2))
    for seed in range(3):
        idx = np.asarray(indices(jr.key(seed), n, batch))
        counts = np.stack([np.bincount(labels[b], minlength=10) for b in idx])
        chi2 = ((counts - batch / 10) ** 2 / (batch / 10)).sum(axis=1)
        assert 7.0 < chi2.mean() < 11.0, chi2.mean()  # identity order: ~4,600
        assert abs(np.corrcoef(np.arange(idx.size), idx.ravel())[0, 1]) < 0.02
    first, other = (np.asarray(indices(jr.key(k), n, batch)) for k in (0, 1))
    assert (first == other).mean() < 0.01  # another key, another order


def test_batch_indices_is_the_steps_slice_of_its_epoch():
    from eqx_fmnist.dataset import batch_indices, epoch_indices

    key, n, batch = jr.key(7), 1000, 64  # 15 steps per epoch
    indices = jax.jit(lambda key, epoch: epoch_indices(jr.fold_in(key, epoch), n, batch))
    for step in (0, 1, 14, 15, 16, 44, 45):
        epoch = np.asarray(indices(key, step // 15))
        got = np.asarray(jax.jit(batch_indices, static_argnums=(2, 3))(key, step, n, batch))
        np.testing.assert_array_equal(got, epoch[step % 15])


def test_padded_batches_cover_the_test_set_exactly_once(real_datasets, real_data):
    from eqx_fmnist.dataset import pad_to_batches

    _, test = real_datasets
    images, mask = pad_to_batches(test.images, 512)
    labels, _ = pad_to_batches(test.labels, 512)
    assert images.shape == (20, 512, 784) and mask.shape == (20, 512)
    mask = np.asarray(mask).ravel()
    assert mask.sum() == 10_000 and not mask[10_000:].any()
    real_images = np.asarray(images).reshape(-1, 784)[mask]
    np.testing.assert_array_equal(real_images, real_data.test_images.reshape(-1, 784))
    np.testing.assert_array_equal(np.asarray(labels).ravel()[mask], real_data.test_labels)


def test_split_is_disjoint_and_complete():
    ds, arrays = _synthetic_dataset(n=50)
    train, valid = ds.split(10, key=jr.key(3))
    assert len(train) == 40 and len(valid) == 10
    rows = {tuple(r) for r in np.asarray(train.images)} | {
        tuple(r) for r in np.asarray(valid.images)
    }
    assert len(rows) == 50
    with pytest.raises(ValueError, match="n_valid"):
        ds.split(50, key=jr.key(0))


def test_steps_per_epoch_refuses_bad_batch_sizes():
    from eqx_fmnist.dataset import steps_per_epoch

    assert steps_per_epoch(60_000, 512) == 117
    for bad in (0, -3, 60_001):
        with pytest.raises(ValueError, match="batch_size"):
            steps_per_epoch(60_000, bad)


@pytest.mark.parametrize("sizes", [(256, 0), (200, 56), (0, 300)])
def test_held_out_sets_that_leave_nothing_to_train_on_name_the_fields(sizes):
    """One line naming the config's fields and the flags, not the internal `n_valid`."""
    from eqx_fmnist.dataset import ArrayDataset, split_data

    a = synthetic_arrays(n_train=256)
    train = ArrayDataset(a["train_images"], a["train_labels"])
    validation_size, calibration_size = sizes
    with pytest.raises(
        ValueError, match=r"of the 256 training images and leave none .*--calibrate"
    ):
        split_data(
            (train, train), validation_size=validation_size, calibration_size=calibration_size
        )


def test_the_images_door_takes_batches_of_28_x_28_and_refuses_what_it_would_misread():
    """`(n, 28, 28)` is flattened; one image `(784,)`, floats of 0-255, NaN and ints are
    refused with the argument named (they gave JAX's dot_general error, an image 255
    times too bright, class 0, or a silent cast)."""
    import numpy as np
    import pytest

    from eqx_fmnist.dataset import as_images

    pixels = np.arange(2 * 784, dtype=np.uint8).reshape(2, 28, 28)
    np.testing.assert_array_equal(as_images(pixels), pixels.reshape(2, 784))
    floats = (pixels / 255.0).astype(np.float32)
    np.testing.assert_array_equal(as_images(floats), floats.reshape(2, 784))
    with pytest.raises(ValueError, match=r"`images` must have shape .* got \(784,\)"):
        as_images(pixels[0].reshape(784))
    for bad in (pixels.astype(np.float32), np.full((2, 784), np.nan, np.float32)):
        with pytest.raises(ValueError, match="`images` holds floats outside"):
            as_images(bad)
    with pytest.raises(TypeError, match="uint8 pixels .* but got int64"):
        as_images(pixels.astype(np.int64))
    unchecked = getattr(as_images, "__wrapped__", as_images)  # as a user runs it
    with pytest.raises(TypeError, match=r"not a list: np\.stack"):
        unchecked(list(pixels))  # a list of images, as a newcomer may pass them
