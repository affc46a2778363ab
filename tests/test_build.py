"""`build`: what a run is made of besides its config, and `fit` given each part of its
own: an Optax optimiser, a loss that sees the model, any Equinox module (non-array
leaves, a key, inference mode, members), data of another shape. Each is held to a
computation written here: a hand-written SGD step, the loss's own terms, a numpy
forward pass."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax
import pytest

from helpers import at_once, same_arrays, small_config, tree_allclose

PLAIN = dict(shift=0, mirror=False)  # the batch as gathered: a step written by hand sees it


def cross_entropy(model, x, y, *, key):
    logits = jax.vmap(model)(x)
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


def doubled(model, x, y, *, key):
    return 2.0 * cross_entropy(model, x, y, key=key)


def mlp(key):
    """`eqx.nn.MLP`: its activation functions are leaves of the module."""
    return eqx.nn.MLP(784, 10, 16, 1, key=key)


class Dropped(eqx.Module):
    """An MLP behind `eqx.nn.Dropout` (half of the inputs dropped while training)."""

    mlp: eqx.nn.MLP
    dropout: eqx.nn.Dropout

    def __init__(self, *, key):
        self.mlp = mlp(key)
        self.dropout = eqx.nn.Dropout(0.5)

    def __call__(self, x, *, key=None):
        return self.mlp(self.dropout(x, key=key))


def first_batch(small, config):
    from eqx_fmnist.dataset import batch_indices

    key = jr.split(jr.PRNGKey(config.seed))[1]  # the run's data key
    rows = np.asarray(batch_indices(key, 0, len(small), config.batch_size))
    x = np.asarray(small.images)[rows].astype(np.float32) / 255.0
    return jnp.asarray(x), jnp.asarray(np.asarray(small.labels)[rows])


def test_an_optax_optimiser_and_a_loss_of_your_own_take_the_step_written_by_hand(small):
    """SGD through `fit` is `params - rate * grad` of the loss given, on the run's first
    batch, from the constructor's weights; twice the loss moves the weights twice as far
    (a second loss in the process is never served the first's program)."""
    import eqx_fmnist as ef

    config = small_config(steps=1, log_every=1, **PLAIN)
    splits = ef.Splits(small)
    start = ef.init_state(config, len(small), model=mlp, optimizer=optax.sgd(0.5)).model
    x, y = first_batch(small, config)
    grads = at_once(eqx.filter_grad(cross_entropy), start, x, y, key=None)
    for loss, scale in ((cross_entropy, 1.0), (doubled, 2.0)):
        result = ef.fit(config, splits, model=mlp, optimizer=optax.sgd(0.5), loss=loss)
        want = eqx.apply_updates(start, jax.tree.map(lambda g, c=scale: -0.5 * c * g, grads))
        assert tree_allclose(eqx.filter(result.model, eqx.is_array), eqx.filter(want, eqx.is_array))
    assert np.isnan(result.history[0]["learning_rate"])  # plain SGD does not say its rate


def test_a_schedule_is_the_optimisers_own(small):
    """An `inject_hyperparams` optimiser's rate is what its own schedule gives at each
    step; the config's learning rate and schedule are not written over it."""
    import eqx_fmnist as ef

    schedule = optax.linear_schedule(1e-2, 1e-3, 16)
    opt = optax.inject_hyperparams(optax.adam)(learning_rate=schedule)
    config = small_config(log_every=4, learning_rate=123.0)
    result = ef.fit(config, ef.Splits(small), optimizer=opt)
    rates = [h["learning_rate"] for h in result.history]
    # The rate the state's optimiser used at steps 3, 7, 11, 15 (count before the update).
    assert rates == pytest.approx([float(schedule(s)) for s in (3, 7, 11, 15)], rel=1e-6)


def test_a_losss_aux_lands_in_the_history(small):
    """`(loss, aux)`: every scalar of `aux` is the history's, its mean over the interval;
    at the first step, a weight penalty of the constructor's weights (numpy)."""
    import eqx_fmnist as ef

    def penalised(model, x, y, *, key):
        weights = [
            w for w in jax.tree.leaves(eqx.filter(model, eqx.is_inexact_array)) if w.ndim > 1
        ]
        l2 = sum(jnp.sum(w**2) for w in weights)
        logits = jax.vmap(model)(x)
        aux = {"accuracy": jnp.mean(jnp.argmax(logits, -1) == y), "l2": l2}
        return cross_entropy(model, x, y, key=key) + 1e-3 * l2, aux

    config = small_config(steps=1, log_every=1)
    result = ef.fit(config, ef.Splits(small), model=mlp, loss=penalised)
    start = ef.init_state(config, len(small), model=mlp).model
    l2 = sum(
        float(np.sum(np.asarray(w, np.float64) ** 2))
        for w in (start.layers[0].weight, start.layers[1].weight)
    )
    assert result.history[0]["l2"] == pytest.approx(l2, rel=1e-5)
    assert 0.0 <= result.history[0]["accuracy"] <= 1.0


def test_a_dropout_model_trains_with_keys_and_is_evaluated_in_inference_mode(small):
    """`eqx.nn.Dropout` trains (its `inference` flag is not carried through the scan),
    each step's key drops other inputs (two steps' losses on one batch differ), and the
    test figures are the model's without dropout: a numpy forward pass of the MLP."""
    import eqx_fmnist as ef

    config = small_config(**PLAIN)
    result = ef.fit(config, ef.Splits(small, small), model=Dropped)
    model = result.model
    x = np.asarray(small.images, np.float64) / 255.0
    h = np.maximum(
        x @ np.asarray(model.mlp.layers[0].weight, np.float64).T
        + np.asarray(model.mlp.layers[0].bias),
        0,
    )
    logits = h @ np.asarray(model.mlp.layers[1].weight, np.float64).T + np.asarray(
        model.mlp.layers[1].bias
    )
    accuracy = np.mean(np.argmax(logits, -1) == np.asarray(small.labels))
    assert abs(result.test.accuracy - accuracy) <= 1 / len(small)
    assert model.dropout.inference is False  # trained as given; evaluated in inference mode


def test_members_of_your_own_model_are_the_runs_alone(small):
    """`Seeds(2)` of a constructor: one program, member `s` the run of seed `s` alone
    (float32's rounding), evaluated as an ensemble (a `Stack`)."""
    import eqx_fmnist as ef

    splits = ef.Splits(small, small)
    many = ef.fit(small_config(), splits, model=Dropped, members=ef.ensemble.Seeds(2))
    assert many.num_members == 2 and isinstance(many.model, ef.Stack)
    for s in range(2):
        alone = ef.fit(small_config(seed=s), splits, model=Dropped).model
        member = jax.tree.map(lambda a, i=s: a[i], eqx.filter(many.model.members, eqx.is_array))
        assert tree_allclose(member, eqx.filter(alone, eqx.is_array), rtol=1e-4, atol=1e-5)
    assert len(many.test.members) == 2


def test_an_optimiser_of_your_own_is_saved_and_given_again_to_load(small, tmp_path):
    import eqx_fmnist as ef

    result = ef.fit(small_config(), ef.Splits(small), model=mlp, optimizer=optax.lion(1e-4))
    path = ef.save_result(tmp_path / "own.eqx", result)
    with pytest.raises(ef.checkpoint.CheckpointError, match="optimizer=...") as caught:
        ef.load_checkpoint(path, model=mlp)
    assert "\n" not in str(caught.value)
    with pytest.raises(ef.checkpoint.CheckpointError, match="do not fit"):
        ef.load_checkpoint(path, model=mlp, optimizer=optax.adam(1e-3))
    loaded = ef.load_checkpoint(path, model=mlp, optimizer=optax.lion(1e-4))
    assert same_arrays(loaded.state, result.state)
    with pytest.raises(ValueError, match="the optimiser the run was trained with"):
        ef.fit(
            small_config(steps=24), ef.Splits(small), state=loaded.state, optimizer=optax.sgd(0.1)
        )


def test_data_of_another_shape_and_classes():
    """Float 14 x 14 images in three classes: the library's MLP is built for 196 inputs
    and 3 logits, trains and is evaluated (a numpy count of its predictions)."""
    import eqx_fmnist as ef

    rng = np.random.default_rng(0)
    images = rng.random((96, 14, 14), dtype=np.float32)
    labels = rng.integers(0, 3, 96)
    data = ef.ArrayDataset(images, labels, num_classes=3)
    assert data.shape == (14, 14) and data.features == 196 and data.num_classes == 3
    result = ef.fit(small_config(steps=3, log_every=3, **PLAIN), ef.Splits(data, data))
    w, b = result.model.layers[0].weight, result.model.layers[-1].bias
    assert w.shape == (32, 196) and b.shape == (3,)
    flat = jnp.asarray(images.reshape(96, 196))
    logits = np.asarray(at_once(lambda m, x: jax.vmap(m)(x), result.model, flat))
    assert result.test.accuracy == pytest.approx(np.mean(logits.argmax(-1) == labels), abs=1e-6)
    with pytest.raises(ValueError, match="28 x 28 images") as caught:
        ef.fit(small_config(), ef.Splits(data))  # mirrors and shifts
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "labels, error, match",
    [
        (np.array([0, 1, 3, 2]), ValueError, r"labels\[2\] is 3"),
        (jnp.array([1, 2, -1, 3]), ValueError, r"labels\[2\] is -1"),
        (np.array([0.0, np.nan, 1.0, 2.0]), TypeError, "labels"),
    ],
)
def test_labels_are_checked_whatever_array_holds_them(labels, error, match):
    import eqx_fmnist as ef

    with pytest.raises(error, match=match):
        ef.ArrayDataset(np.zeros((4, 5), np.uint8), labels, num_classes=3)


def test_a_model_that_does_not_fit_the_data_or_the_parts_is_refused_in_one_line(small):
    import eqx_fmnist as ef

    splits = ef.Splits(small)
    refused = [
        (dict(model=lambda key: eqx.nn.MLP(784, 3, 8, 1, key=key)), ValueError, r"\(10,\)"),
        (dict(loss=cross_entropy, teacher=mlp(jr.key(0))), ValueError, "teacher="),
    ]
    for kwargs, error, match in refused:
        with pytest.raises(error, match=match) as caught:
            ef.fit(small_config(), splits, **kwargs)
        assert "\n" not in str(caught.value)
    for kwargs, match in ((dict(optimizer="adam"), "optimizer"), (dict(loss=42), "loss")):
        with pytest.raises(TypeError, match=match):  # the annotation's, under the hook
            ef.fit(small_config(), splits, **kwargs)
    with pytest.raises(ValueError, match="mixup=0.2"):
        ef.fit(small_config(mixup=0.2), splits, loss=cross_entropy)


def test_a_conv_model_is_written_out_on_a_cpu_and_trains_as_scanned(small, monkeypatch):
    """On a CPU a model that calls XLA's convolution runs its chunk as calls of a few
    steps written out (jax-ml/jax#12868), the library's models and an MLP as one scan
    (on an accelerator, every model as one scan); both forms train the same weights
    (float32's rounding)."""
    import eqx_fmnist as ef
    import eqx_fmnist.chunk as chunk

    class Conv(eqx.Module):
        conv: eqx.nn.Conv2d
        linear: eqx.nn.Linear

        def __init__(self, *, key):
            k1, k2 = jr.split(key)
            self.conv = eqx.nn.Conv2d(1, 2, 3, stride=2, padding=1, key=k1)
            self.linear = eqx.nn.Linear(2 * 14 * 14, 10, key=k2)

        def __call__(self, x):
            return self.linear(self.conv(x.reshape(1, 28, 28)).reshape(-1))

    assert chunk.convolves(Conv(key=jr.key(0)), 784)
    assert not chunk.convolves(mlp(jr.key(0)), 784)
    state = ef.init_state(small_config(), len(small), model=Conv)
    parts = ef.compile_steps(state, small, batch_size=32, num_steps=8).chunk
    if jax.default_backend() == "cpu":
        assert (parts.scanned, parts.num_steps, parts.calls) == (False, chunk.UNROLLED_STEPS, 2)
    else:  # an accelerator's convolution gradient is fast in a loop: one scan
        assert (parts.scanned, parts.num_steps, parts.calls) == (True, 8, 1)
    config = small_config(**PLAIN)
    written = ef.fit(config, ef.Splits(small), model=Conv).model
    monkeypatch.setattr(chunk, "convolves", lambda *a: False)
    scanned = ef.fit(config, ef.Splits(small), model=Conv).model
    assert tree_allclose(
        eqx.filter(written, eqx.is_array), eqx.filter(scanned, eqx.is_array), rtol=1e-4, atol=1e-5
    )


def test_traced_labels_are_checked_for_their_type_and_shape_only():
    """Inside a compiled function the values cannot be seen: an integer array passes
    unread, a float one is still refused."""
    from eqx_fmnist.dataset import check_labels

    def checked(labels):
        check_labels(labels, 3, 10)
        return labels

    assert jax.jit(checked)(jnp.array([1, 2, 30])).tolist() == [1, 2, 30]
    with pytest.raises(TypeError, match="integer class numbers"):
        jax.jit(checked)(jnp.zeros(3))
