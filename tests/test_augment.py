"""On-device augmentation: moves and mirrors against numpy, the random choices within
their bounds and pure in (key, step), the step's batch is the augmented gather, the
weight average against a hand-computed one, distillation's loss and its checks."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from helpers import moved_numpy, tree_allclose


@pytest.fixture
def images():
    rng = np.random.default_rng(0)
    return rng.integers(1, 256, (64, 784), dtype=np.uint8)  # no zero pixel: moves show


@pytest.mark.parametrize(
    "dx, dy, mirror", [(2, 0, False), (-3, 1, False), (0, -2, True), (1, 1, True)]
)
def test_fixed_moves_match_numpy(images, dx, dy, mirror):
    from eqx_fmnist.views import move_images

    got = np.asarray(move_images(jnp.asarray(images), dx=dx, dy=dy, mirror=mirror))
    np.testing.assert_array_equal(got, moved_numpy(images, dx, dy, mirror))


def test_random_moves_stay_in_bounds_use_both_mirrors_and_are_pure(images):
    from eqx_fmnist.augment import Augmentation, augment

    aug = Augmentation(shift=2, mirror=True)
    key = jr.PRNGKey(3)
    out = np.asarray(augment(key, jnp.asarray(images), aug))
    np.testing.assert_array_equal(out, np.asarray(augment(key, jnp.asarray(images), aug)))
    assert not np.array_equal(out, np.asarray(augment(jr.PRNGKey(4), jnp.asarray(images), aug)))
    moves = [(dx, dy, m) for dx in range(-2, 3) for dy in range(-2, 3) for m in (False, True)]
    found = []
    for b in range(len(images)):
        hits = [
            mv for mv in moves if np.array_equal(out[b], moved_numpy(images[b : b + 1], *mv)[0])
        ]
        assert len(hits) == 1, b  # exactly one allowed move explains each image
        found.append(hits[0])
    flips = [m for _, _, m in found]
    assert 10 < sum(flips) < 54  # about half mirrored
    assert len({(dx, dy) for dx, dy, _ in found}) > 10


@pytest.mark.parametrize(
    "shift, distribution, probs",
    [
        (2, "uniform", [1 / 5] * 5),
        (2, "triangular", [1 / 9, 2 / 9, 3 / 9, 2 / 9, 1 / 9]),
        (3, "triangular", [1 / 15, 2 / 15, 3 / 15, 3 / 15, 3 / 15, 2 / 15, 1 / 15]),
    ],
)
def test_moves_are_drawn_as_their_distribution_says(shift, distribution, probs):
    from eqx_fmnist.augment import random_shifts

    draw = jax.jit(random_shifts, static_argnums=(1, 2, 3))
    d = np.asarray(draw(jr.PRNGKey(0), 60_000, shift, distribution))
    counts = np.array([(d == v).mean() for v in range(-shift, shift + 1)])
    assert d.min() == -shift and d.max() == shift
    np.testing.assert_allclose(counts, probs, atol=0.006)  # 120,000 draws: ~0.0015 sd


def test_erasing_zeroes_one_rectangle_of_the_chosen_images(images):
    from eqx_fmnist.augment import ERASE_SIZES, Augmentation, augment

    out = np.asarray(
        jax.jit(augment, static_argnums=2)(jr.PRNGKey(0), images, Augmentation(erase=0.5))
    )
    erased = 0
    for b in range(len(images)):
        zero = (out[b] == 0).reshape(28, 28)
        assert np.array_equal(out[b][~zero.reshape(-1)], images[b][~zero.reshape(-1)])
        if zero.any():
            erased += 1
            rows, cols = np.nonzero(zero.any(1))[0], np.nonzero(zero.any(0))[0]
            h, w = rows[-1] - rows[0] + 1, cols[-1] - cols[0] + 1
            assert zero.sum() == h * w  # one full rectangle
            assert ERASE_SIZES[0] <= h <= ERASE_SIZES[1] and ERASE_SIZES[0] <= w <= ERASE_SIZES[1]
    assert 16 < erased < 48


@pytest.mark.slow  # cold: compiles several programs or trains on the real data
def test_the_step_trains_on_the_augmented_gather(small):
    """One fused step equals a hand-made batch: the run's indices, gathered, moved by
    the step's key, then the one pure step; and a loop of `train_step` over the plain
    batches makes the same run (it applies the state's augmentation itself)."""
    from eqx_fmnist.augment import augment
    from eqx_fmnist.batches import augment_key
    from eqx_fmnist.dataset import batch_indices
    from eqx_fmnist.state import init_state
    from eqx_fmnist.step import _step, train_step, train_steps

    from helpers import small_config

    config = small_config(steps=4, shift=2, mirror=True)
    fused, _ = train_steps(init_state(config, len(small)), small, batch_size=32, num_steps=2)
    by_hand, looped = init_state(config, len(small)), init_state(config, len(small))
    key = jnp.array(np.asarray(by_hand.key))

    @eqx.filter_jit  # the hand-made step, one program (not one per operation)
    def hand_made(state, step, data):
        idx = batch_indices(key, step, len(data.images), 32)
        x = augment(
            jr.fold_in(augment_key(key), step), data.images[idx], state.settings.augmentation
        )
        return _step(state, x, data.labels[idx])[0], idx

    for step in range(2):
        by_hand, idx = hand_made(by_hand, jnp.int32(step), small)
        looped, _ = train_step(looped, small.images[idx], small.labels[idx])
    assert tree_allclose(fused.model, by_hand.model, rtol=1e-5, atol=1e-6)
    assert tree_allclose(fused.model, looped.model, rtol=1e-5, atol=1e-6)
    plain = init_state(config.with_changes(shift=0, mirror=False), len(small))
    plain, _ = train_steps(plain, small, batch_size=32, num_steps=2)
    assert not tree_allclose(plain.model, fused.model, rtol=1e-3, atol=1e-4)


@pytest.mark.slow  # cold: compiles several programs or trains on the real data
def test_augmented_runs_do_not_depend_on_chunking(small):
    from eqx_fmnist.config import TrainConfig
    from eqx_fmnist.state import init_state
    from eqx_fmnist.step import train_steps

    config = TrainConfig(
        steps=6, batch_size=32, hidden_sizes=(16,), shift=1, mirror=True, erase=0.5
    )
    one, _ = train_steps(init_state(config, len(small)), small, batch_size=32, num_steps=6)
    two = init_state(config, len(small))
    for k in (2, 4):
        two, _ = train_steps(two, small, batch_size=32, num_steps=k)
    assert tree_allclose(one.model, two.model, rtol=0, atol=0)


def test_the_augmentation_stream_is_no_epochs_batch_order_stream():
    """JAX's rule: never reuse a key. Epoch `e`'s batch order folds `e` into the run's
    key; the augmentation's key must be none of those (with `jr.split(key)[1]` it was
    epoch 1's, since `split(k)[1] == fold_in(k, 1)` under partitionable threefry)."""
    from eqx_fmnist.batches import augment_key

    key = jr.PRNGKey(3)  # a run's key is a raw uint32[2] key, as init_state makes it
    ours = np.asarray(augment_key(key))
    epochs = jax.vmap(lambda e: jr.fold_in(key, e))(jnp.arange(10_000, dtype=jnp.uint32))
    assert not (np.asarray(epochs) == ours).all(axis=-1).any()
    # ... nor one of the first keys a split of the run's key gives.
    assert not any(np.array_equal(np.asarray(k), ours) for k in jr.split(key, 4))


@pytest.mark.parametrize(
    "aug, count",
    [
        (dict(shift=2, mirror=True, shift_distribution="triangular"), 50),
        (dict(shift=1), 9),
        (dict(mirror=True), 2),
        (dict(), 1),
        (dict(shift=2, mirror=True, erase=0.25), None),
    ],
)
def test_each_image_is_one_of_the_finite_views_and_says_which(images, aug, count):
    """`augment_with_views` makes `augment`'s pixels from the same key, and the view it
    names reproduces each image through numpy's move of the original."""
    from eqx_fmnist.augment import Augmentation, augment, augment_with_views, finite_views

    augmentation = Augmentation(**aug)
    views = finite_views(augmentation)
    if count is None:
        assert views is None
        with pytest.raises(ValueError, match="no finite set of views"):
            augment_with_views(jr.key(0), jnp.asarray(images), augmentation)
        return
    assert len(views) == len(set(views)) == count
    key = jr.key(3)
    moved, which = augment_with_views(key, jnp.asarray(images), augmentation)
    np.testing.assert_array_equal(moved, augment(key, jnp.asarray(images), augmentation))
    for b, v in enumerate(np.asarray(which)):
        dx, dy, mirror = views[v]
        np.testing.assert_array_equal(moved[b], moved_numpy(images[b : b + 1], dx, dy, mirror)[0])
    if count > 2:
        assert len(set(np.asarray(which).tolist())) > count // 3  # it draws many views


@pytest.mark.parametrize("bound", [0, 1, 2, 3, 27, 28])
@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
def test_the_select_form_moves_each_image_as_numpy_does(images, bound, dtype):
    """The accelerators' form (slices of a padded batch and selects) against numpy, image
    by image, for moves up to `bound` in both directions, mirrored or not, a patch
    erased or not; and the CPU's gather gives the same bits."""
    from eqx_fmnist.augment import gather_moves, select_moves

    rng = np.random.default_rng(bound)
    n = len(images)
    dx, dy = rng.integers(-bound, bound + 1, (2, n)).astype(np.int32)
    flip = rng.integers(0, 2, n).astype(bool)
    box = np.stack([*rng.integers(0, 28, (2, n)), *rng.integers(0, 15, (2, n))], 1)
    box[::2, 2:] = 0  # every other image: nothing erased
    x = images.astype(dtype) / (255 if dtype == np.float32 else 1)
    args = (jnp.asarray(x), jnp.asarray(dx), jnp.asarray(dy), jnp.asarray(flip))
    selected = np.asarray(
        jax.jit(lambda *a: select_moves(*a, bound=bound))(*args, jnp.asarray(box, jnp.int32))
    )
    for b in range(n):
        want = moved_numpy(x[b : b + 1], int(dx[b]), int(dy[b]), bool(flip[b]))[0].reshape(28, 28)
        top, left, h, w = box[b]
        want[top : top + h, left : left + w] = 0
        np.testing.assert_array_equal(selected[b], want.reshape(784), err_msg=f"image {b}")
    gathered = np.asarray(gather_moves(*args, jnp.asarray(box, jnp.int32)))
    np.testing.assert_array_equal(selected, gathered)


def test_moves_past_the_canvas_leave_nothing_in_either_form(images):
    from eqx_fmnist.augment import gather_moves, select_moves

    n, flip = len(images), np.zeros((len(images),), bool)
    selected, gathered = jax.jit(select_moves), jax.jit(gather_moves)
    for d in (28, -31, 100):
        full, none = np.full((n,), d, np.int32), np.zeros((n,), np.int32)
        for dx, dy in ((full, none), (none, full)):
            assert not np.asarray(selected(images, dx, dy, flip)).any()
            assert not np.asarray(gathered(images, dx, dy, flip)).any()


def test_the_moves_lower_to_a_gather_on_a_cpu_and_to_selects_elsewhere(images):
    """`move_batch` chooses its form when the program is lowered: the same traced
    program holds a gather when lowered for a CPU and none for a TPU or a GPU (the
    per-pixel gather took 98% of a TPU v5e step)."""
    from eqx_fmnist.augment import Augmentation, augment

    traced = jax.jit(lambda k, x: augment(k, x, Augmentation(shift=2, mirror=True))).trace(
        jr.key(0), jnp.asarray(images)
    )
    lowered = {p: traced.lower(lowering_platforms=(p,)).as_text() for p in ("cpu", "tpu", "cuda")}
    assert "stablehlo.gather" in lowered["cpu"]
    assert "stablehlo.gather" not in lowered["tpu"] and "stablehlo.gather" not in lowered["cuda"]
    assert "stablehlo.select" in lowered["tpu"]
