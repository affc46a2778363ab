"""The MLP computes the codelab's maths: checked against a hand-written reference."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu
import jaxtyping
import numpy as np
import pytest

from helpers import GELU_SLOPE, at_once, float16_products_atol, numpy_gelu


def reference_params(model):
    """The model's weights as the codelab's dict of `x @ w + b` arrays."""
    return {
        f"{kind}{i + 1}": (layer.weight.T if kind == "w" else layer.bias[None, :])
        for i, layer in enumerate(model.layers)
        for kind in ("w", "b")
    }


def reference_mlp(params, x):
    """The codelab's forward pass with float32 products on every backend (a TPU's default
    would multiply in one bfloat16 pass)."""

    def mm(a, b):
        return jnp.matmul(a, b, precision=jax.lax.Precision.HIGHEST)

    h = jax.nn.gelu(mm(x, params["w1"]) + params["b1"])
    h = jax.nn.gelu(mm(h, params["w2"]) + params["b2"])
    return mm(h, params["w3"]) + params["b3"]


def reference_loss(params, x, y):
    logp = jax.nn.log_softmax(reference_mlp(params, x))
    return -jnp.mean(logp[jnp.arange(len(y)), y])


@pytest.fixture
def batch():
    rng = np.random.default_rng(1)
    x, y = rng.uniform(size=(32, 784)).astype(np.float32), rng.integers(0, 10, 32, np.int32)
    return jnp.asarray(x), jnp.asarray(y)


def test_default_mlp_has_235146_params_he_normal_and_zero_bias():
    from eqx_fmnist.model import MLP, count_params

    model = at_once(MLP, key=jr.key(0))
    assert count_params(model) == 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10 == 235_146
    for layer, fan_in in zip(model.layers, (784, 256, 128), strict=True):
        assert float(jnp.abs(layer.bias).max()) == 0.0
        std = float(layer.weight.std())
        assert abs(std - np.sqrt(2 / fan_in)) < 0.1 * np.sqrt(2 / fan_in)
    assert [lay.weight.shape for lay in model.layers] == [(256, 784), (128, 256), (10, 128)]


def test_vmapped_model_matches_the_reference_logits(batch):
    from eqx_fmnist.model import MLP

    model = at_once(MLP, key=jr.key(0))
    x, _ = batch
    got = at_once(lambda m, x: jax.vmap(m)(x), model, x)
    want = at_once(lambda m, x: reference_mlp(reference_params(m), x), model, x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_loss_and_gradients_match_the_reference(batch):
    from eqx_fmnist.losses import cross_entropy
    from eqx_fmnist.model import MLP

    model = at_once(MLP, key=jr.key(0))
    x, y = batch

    @eqx.filter_value_and_grad
    def loss_fn(m):
        return cross_entropy(jax.vmap(m)(x), y)

    loss, grads = at_once(loss_fn, model)
    ref_loss, ref_grads = at_once(jax.value_and_grad(reference_loss), reference_params(model), x, y)
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-6)
    # The gradient tree is the parameter tree ...
    params = eqx.filter(model, eqx.is_inexact_array)
    assert jtu.tree_structure(grads) == jtu.tree_structure(params)
    # ... and holds the reference's gradients (transposed to (out, in)).
    for name, ref in reference_params(grads).items():
        np.testing.assert_allclose(ref, ref_grads[name], rtol=1e-4, atol=1e-6)


def test_a_pure_update_returns_a_new_model(batch):
    from eqx_fmnist.model import MLP

    model = at_once(MLP, key=jr.key(0))
    before = np.asarray(model.layers[0].weight).copy()
    grads = jtu.tree_map(jnp.ones_like, eqx.filter(model, eqx.is_inexact_array))
    new = eqx.apply_updates(model, jtu.tree_map(lambda g: -0.1 * g, grads))
    np.testing.assert_array_equal(model.layers[0].weight, before)
    np.testing.assert_allclose(new.layers[0].weight, before - 0.1, rtol=1e-6)


def test_hidden_sizes_and_finite_differences():
    from eqx_fmnist.model import MLP

    model = MLP(in_size=5, hidden_sizes=(4,), out_size=3, key=jr.key(3))
    x = np.random.default_rng(4).standard_normal(5).astype(np.float32)
    unit = jax.jit(lambda v: model(v)[1])
    grad = jax.jit(jax.grad(lambda v: model(v)[1]))(x)
    eps = 1e-3
    for i in range(5):
        e = np.zeros(5, np.float32)
        e[i] = eps
        fd = (unit(x + e) - unit(x - e)) / (2 * eps)
        assert abs(float(fd) - float(grad[i])) < 1e-3


@pytest.mark.parametrize("compute", ["float32", "bfloat16", "float16"])
def test_matmuls_run_in_the_compute_dtype(compute):
    from eqx_fmnist.model import MLP
    from eqx_fmnist.precision import Policy

    policy = Policy("float32", compute, compute)
    model = at_once(MLP, key=jr.key(0))
    jaxpr = jax.make_jaxpr(lambda m, x: m(x, policy=policy))(model, jnp.ones(784))
    dots = [e for e in jaxpr.eqns if e.primitive.name == "dot_general"]
    assert len(dots) == 3
    assert all(v.aval.dtype == jnp.dtype(compute) for e in dots for v in e.invars)
    # Every product accumulates (and comes out) in float32: the form bf16 hardware runs.
    assert all(v.aval.dtype == jnp.float32 for e in dots for v in e.outvars)
    assert jax.eval_shape(lambda m: m(jnp.ones(784), policy=policy), model).dtype == compute


@pytest.mark.parametrize("compute", ["bfloat16", "float16"])
def test_low_precision_forward_rounds_inputs_only(compute):
    """The logits equal a numpy forward pass that rounds each matmul's inputs to the
    compute dtype and does everything else (sums, bias, GELU) in float64."""
    from eqx_fmnist.model import MLP
    from eqx_fmnist.precision import Policy

    model = at_once(MLP, key=jr.key(1))
    x = np.random.default_rng(2).uniform(size=784).astype(np.float32)
    policy = Policy("float32", compute, "float32")
    got = np.asarray(at_once(lambda m, x: m(x, policy=policy), model, x), np.float64)

    def rounded(a):  # numpy's rounding to the compute dtype (ml_dtypes for bfloat16)
        return np.asarray(a, np.float32).astype(jnp.dtype(compute)).astype(np.float64)

    def forward(round_products: bool):
        h, err = np.asarray(x, np.float64), np.zeros(())
        for i, layer in enumerate(model.layers):
            w, h_in = rounded(layer.weight), rounded(h)
            # A TPU's float16 products carry their own error (`float16_products_atol`),
            # carried through the later layers' weights and GELU's slope.
            err = np.abs(w) @ (err * np.ones_like(h)) + float16_products_atol(w, h_in)
            h = w @ h_in
            h = (rounded(h) if round_products else h) + np.asarray(layer.bias, np.float64)
            if i < len(model.layers) - 1:
                h, err = numpy_gelu(h), GELU_SLOPE * err
        return h, err

    want, err = forward(round_products=False)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 + err.max())
    if compute == "bfloat16":  # a bf16-output matmul (8-bit mantissa) lands elsewhere
        assert np.abs(got - forward(round_products=True)[0]).max() > 1e-3


@pytest.mark.parametrize(
    "bad",
    [jnp.ones((2, 784)), jnp.ones(784, jnp.int32)],
    ids=["a batch where one example is expected", "integer pixels"],
)
def test_type_checks_bite(bad):
    from eqx_fmnist.model import MLP

    with pytest.raises(jaxtyping.TypeCheckError):
        at_once(MLP, key=jr.key(0))(bad)


def test_bad_sizes_raise_value_error():
    from eqx_fmnist.model import MLP

    with pytest.raises(ValueError, match="positive ints"):
        MLP(hidden_sizes=(256, 0), key=jr.key(0))
